"""How the C library's allocator keeps freed memory in a serving process (glibc only).

A page of 500 builds is one 460 KB value that SQLite assembles, freed once it is sent. When pages were
assembled in a reader thread (today a page that runs long still is), glibc's defaults handed the top of that
thread's heap back to the kernel (`madvise`) at the free, and the next page faulted the same 1.7 MB in again,
one 4 KiB page at a time: 1.1 ms of system time a request. Kept instead, `GET /builds` with 500 builds went
from 3.0 ms to 1.2-1.6 ms (p50, one client, a million builds), and no other endpoint got slower.
"""

from __future__ import annotations

import ctypes

# mallopt's parameters, from glibc's malloc.h.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

# Freed memory at the top of a heap is given back to the kernel only past this much. The peak a worker uses
# is unchanged; what it keeps after a large answer is at most this per thread that allocates. A year's
# statistics by day spent 2.3 ms of system time a request with 16 MiB, 1.6 ms with 32 MiB and 8-11 ms with
# 8 MiB; 16 MiB leaves the room under a worker's memory target.
KEEP_FREED_BYTES = 16 << 20
# Blocks from this size up get their own mapping, given back as soon as they are freed (an export's pages);
# smaller ones come from the heaps. Setting it also stops glibc from moving the two bounds on its own.
OWN_MAPPING_BYTES = 4 << 20


def keep_freed_memory() -> bool:
    """Set the two bounds; False where the C library has no `mallopt` or refuses them (not glibc)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    # mallopt answers 1 on success.
    return mallopt(_M_MMAP_THRESHOLD, OWN_MAPPING_BYTES) == 1 and mallopt(_M_TRIM_THRESHOLD, KEEP_FREED_BYTES) == 1
