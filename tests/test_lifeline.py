"""Worker processes end with the server that started them, even when it is killed with SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import record

from buildreport.lifeline import is_onefile_child


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_workers_end_when_the_server_is_killed(env, serve):
    env.load([record(1)])
    server = serve(env.db, "--workers", "2")
    deadline = time.monotonic() + 20
    while len(workers := children(server.process.pid)) < 2:
        assert time.monotonic() < deadline, "the workers never started"
        time.sleep(0.1)
    try:
        os.kill(server.process.pid, signal.SIGKILL)
        server.process.wait(timeout=5)
        deadline = time.monotonic() + 10
        while any(alive(pid) for pid in workers):
            assert time.monotonic() < deadline, f"workers outlived the server: {workers}"
            time.sleep(0.05)
    finally:
        for pid in workers:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_process_started_from_the_package_is_not_a_onefile_child():
    assert not is_onefile_child()


def test_a_process_that_ends_with_its_parent_says_so(tmp_path):
    # What the watch does once the parent is gone: the log names the process and why it ends, before it exits.
    script = (
        "import logging\n"
        "logging.basicConfig(format='%(levelname)s %(name)s %(message)s')\n"
        "from buildreport import lifeline\n"
        "lifeline._end_with_parent(4242)\n"
        "print('not reached')\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    assert result.returncode == 1
    assert "not reached" not in result.stdout
    assert "WARNING buildreport.lifeline process " in result.stderr
    assert "the process that started it (4242) has ended" in result.stderr
