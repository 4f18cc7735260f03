"""The allocator's settings: memory one thread allocates and another frees stays with the process."""

import platform
import subprocess
import sys

import pytest

from buildreport.http import allocator

# A reader thread makes a 2 MB answer in pieces below glibc's own mapping size; the event loop's thread frees
# it. Each round's page faults tell whether the freed heap top went back to the kernel in between.
_ROUNDS = """
import queue, resource, sys, threading
from buildreport.http.allocator import keep_freed_memory
if sys.argv[1] == "kept":
    assert keep_freed_memory()
asks, answers = queue.Queue(), queue.Queue()
def reader():
    while asks.get():
        answers.put([bytes(100_000) for _ in range(20)])
thread = threading.Thread(target=reader)
thread.start()
for _ in range(5):
    asks.put(True); answers.get()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(100):
    asks.put(True); answers.get()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 100)
asks.put(False); thread.join()
"""

glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the settings are glibc's")


def _faults_a_round(mode: str) -> float:
    done = subprocess.run([sys.executable, "-c", _ROUNDS, mode], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return float(done.stdout)


@glibc
def test_memory_freed_by_another_thread_is_kept_for_the_next_answer():
    # 2 MB is 488 pages: with glibc's defaults nearly all are faulted in again every round.
    assert _faults_a_round("default") > 200
    assert _faults_a_round("kept") < 20


@glibc
def test_the_bounds_are_accepted_by_glibc():
    assert allocator.keep_freed_memory()


def test_a_serving_process_sets_the_allocator_up():
    code = "from unittest import mock; from buildreport.http import app\n" \
           "with mock.patch.object(app, 'keep_freed_memory') as kept: app.tune_process()\n" \
           "print(kept.call_count)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "1"
