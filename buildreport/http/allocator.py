"""How the C library's allocator keeps freed memory in a serving process (glibc only).

A page of builds is one large value that SQLite assembles, freed once it is sent. With glibc's defaults, a
thread that assembled it hands the top of its heap back to the kernel at the free, and the next page faults the
same memory in again, a page at a time; kept, the next answer reuses it. (The figures: bench/README.md.)
"""

from __future__ import annotations

import ctypes

# mallopt's parameters, from glibc's malloc.h.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

# Freed memory at the top of a heap is given back to the kernel only past this much. The peak a worker uses
# is unchanged; what it keeps after a large answer is at most this per thread that allocates: enough for a
# year's statistics by day, with room left under a worker's memory target.
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
