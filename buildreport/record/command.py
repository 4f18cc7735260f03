"""The Nix command a user asks `buildreport record` to run: which kind it is, how to ask it for events.

Only `nix-build` and `nix build` are recorded; the recorder asks either for `--log-format internal-json -v`
and shows the user what Nix would have printed at the verbosity the user asked for.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import IO

DEFAULT_VERBOSITY = 3  # Nix's `info`: what it prints without -v or --quiet


class UsageError(Exception):
    """The command cannot be recorded as given; the message says why."""


def nix_command_line(command: Sequence[str]) -> tuple[list[str], str]:
    """The command with internal-json logging asked for, and its kind (`nix-build` or `nix build`)."""
    if not command:
        raise UsageError("give the Nix command to run after --, e.g. buildreport record -- nix-build default.nix")
    program = os.path.basename(command[0])
    if program == "nix-build":
        head, rest, kind = [command[0]], list(command[1:]), "nix-build"
    elif program == "nix" and len(command) > 1 and command[1] == "build":
        head, rest, kind = [command[0], "build"], list(command[2:]), "nix build"
    else:
        raise UsageError(f"buildreport record wraps nix-build or nix build, not {' '.join(command[:2])!r}")
    kept: list[str] = []
    skip = False
    for arg in rest:  # the recorder reads internal-json: a --log-format of the user's own would hide the events
        if skip:
            skip = False
        elif arg == "--log-format":
            skip = True
        elif not arg.startswith("--log-format="):
            kept.append(arg)
    # Appended: `nix build` takes --log-format only after its other flags (-L before it turns it off again);
    # before a `--`, after which every word is an argument.
    at = kept.index("--") if "--" in kept else len(kept)
    return [*head, *kept[:at], "--log-format", "internal-json", "-v", *kept[at:]], kind


def verbosity(command: Sequence[str]) -> int:
    """The level up to which Nix would print messages for this command (3 plus each -v, minus --quiet)."""
    level = DEFAULT_VERBOSITY
    for arg in command[1:]:
        if arg == "--":
            break
        if arg == "--verbose":
            level += 1
        elif arg == "--quiet":
            level -= 1
        elif arg.startswith("-") and not arg.startswith("--") and set(arg[1:]) == {"v"}:
            level += len(arg) - 1
    return level


def reads_build_json(command: Sequence[str], kind: str, stdout_is_terminal: bool) -> bool:
    """Whether the recorder reads what `nix build --json` prints (per build: times, and CPU time in a cgroup).

    Only when the user asked for --json, and only when standard output is not a terminal: Nix formats its
    JSON for a terminal differently, and what the user sees must not change.
    """
    words = list(command[: command.index("--")] if "--" in command else command)
    return kind == "nix build" and "--json" in words and not stdout_is_terminal


class StdoutCopy:
    """Passes Nix's standard output on to ours byte for byte, keeping a copy of its first `limit` bytes."""

    def __init__(self, source: IO[bytes], target_fd: int, limit: int = 16 * 1024 * 1024) -> None:
        self.source, self.target_fd, self.limit = source, target_fd, limit
        self.copy = bytearray()
        self.thread = threading.Thread(target=self._relay, name="buildreport-stdout", daemon=True)
        self.thread.start()

    def _relay(self) -> None:
        fd = self.source.fileno()
        writable = True
        while chunk := os.read(fd, 65536):
            if len(self.copy) < self.limit:
                self.copy += chunk[: self.limit - len(self.copy)]
            view = memoryview(chunk)
            while writable and view:
                try:
                    view = view[os.write(self.target_fd, view) :]
                except BrokenPipeError:
                    writable = False
                    self.source.close()  # Nix then meets a closed pipe too, as it would without the recorder
                    return
                except InterruptedError:
                    continue

    def text(self, wait_seconds: float = 10.0) -> bytes:
        """What Nix printed, once it has closed its output (or what came within `wait_seconds`)."""
        self.thread.join(wait_seconds)
        return bytes(self.copy)
