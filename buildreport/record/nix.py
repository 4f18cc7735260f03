"""What Nix says about a build, shared by every recorder.

- derivation attributes (`nix derivation show`, `nix show-derivation` before Nix 2.15): system, outputs,
  `SERVICE_TAG_*` tags;
- outputs with their NAR hash (SRI, as Nix gives it) and size (`nix path-info --json`);
- the stored build log (`<log dir>/drvs/xx/rest.drv.bz2`, else `nix log`);
- the events of `--log-format internal-json` and the error messages Nix prints when a build fails.

Read with Nix 2.8, 2.26 and 2.34 (Debian bookworm, trixie, sid), whose shapes differ:
- `derivation show` answers `{path: {...}}` up to 2.3x and `{"derivations": {name: {...}}, "version": N}` later,
  with keys and output paths written without the store folder;
- `path-info --json` answers a list of objects in 2.8, an object keyed by path (null: not valid) later, and
  wants `--json-format 1` where that flag exists (2.34) to keep hashes as SRI strings and full paths;
- a failed builder is `builder for '<drv>' failed with exit code N` up to 2.26 and `Cannot build '<drv>'.`
  with `Reason: builder failed with exit code N` in 2.34; a time-out names `<drv>!out` (2.8), `<drv>^out`
  (2.26) or no derivation at all (2.34: `timed out after N seconds`, for --timeout and max-silent-time alike).
Status messages are kept in one form whatever the version, without Nix's `error: ` prefix:
`builder for '<drv>' failed with exit code N`, `building of '<drv>' timed out after N seconds[ of silence]`,
`interrupted by the user`.
"""

from __future__ import annotations

import bz2
import functools
import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec

from buildreport import ansi
from buildreport.models import BuildOutput, BuildStatus

TAG_PREFIX = "SERVICE_TAG_"
# `nix path-info`, `nix show-derivation` and `nix log` are "experimental" commands in 2.8: enable them per call
# so that a recorder works whatever the machine's nix.conf says.
NIX_FLAGS = ("--extra-experimental-features", "nix-command")
DEFAULT_LOG_DIR = "/nix/var/log/nix"

# Activity and result types of `--log-format internal-json` (Nix's src/libutil/logging.hh).
ACT_BUILDS = 104  # the whole set of builds: its progress results say how many are done, running, failed
ACT_BUILD = 105  # one derivation being built: fields = [drv path, machine, current round, number of rounds]
RES_BUILD_LOG_LINE = 101  # one line of a builder's output: fields = [text]
RES_PROGRESS = 105  # fields = [done, expected, running, failed]


class NixError(Exception):
    """Nix could not answer; the message is one line a user can act on."""


def tags_from_env(env: Mapping[str, str]) -> dict[str, str]:
    """The tags an environment (or a derivation's attributes) carries: `SERVICE_TAG_project=web` → project: web."""
    return {
        name[len(TAG_PREFIX) :]: value
        for name, value in env.items()
        if name.startswith(TAG_PREFIX) and len(name) > len(TAG_PREFIX)
    }


def strip_ansi(text: str) -> str:
    """Text without its terminal colours and control sequences (Nix colours its error messages)."""
    return ansi.strip(text)


def nix_command(args: Sequence[str], *, timeout: float = 60.0) -> bytes:
    """Standard output of `nix ARGS…`; NixError with Nix's own last line when it fails."""
    try:
        done = subprocess.run(
            ["nix", *NIX_FLAGS, *args], capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL, check=False
        )
    except FileNotFoundError as exc:
        raise NixError("nix is not installed or not on PATH") from exc
    except subprocess.TimeoutExpired as exc:
        raise NixError(f"nix {args[0]} did not answer within {timeout:g} s") from exc
    if done.returncode != 0:
        lines = strip_ansi(done.stderr.decode(errors="replace")).strip().splitlines()
        raise NixError(f"nix {args[0]} failed: {lines[-1].strip() if lines else f'exit status {done.returncode}'}")
    return done.stdout


def drv_name(drv_path: str) -> str:
    """The name of a derivation, as Nix prefixes its log lines: `/nix/store/<hash>-hello-2.12.drv` → hello-2.12."""
    base = os.path.basename(drv_path).removesuffix(".drv")
    return base.split("-", 1)[1] if "-" in base else base


# --- derivations --------------------------------------------------------------------------------------------


class _ShownOutput(msgspec.Struct):
    path: str = ""  # empty for content-addressed outputs, whose path is known only once built


class _ShownDerivation(msgspec.Struct):
    outputs: dict[str, _ShownOutput]
    system: str
    env: dict[str, str] = {}


class Derivation(msgspec.Struct, frozen=True):
    """What a recorder needs from a `.drv`: where it is, what it builds and on which system, its attributes."""

    path: str
    system: str
    outputs: dict[str, str]  # output name → store path
    env: dict[str, str]

    @property
    def tags(self) -> dict[str, str]:
        return tags_from_env(self.env)


@functools.cache
def _version_of(nix_program: str) -> tuple[int, ...]:
    try:
        done = subprocess.run([nix_program, "--version"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    words = done.stdout.split()
    return tuple(int(part) for part in words[-1].split(".") if part.isdigit()) if words else ()


def nix_version() -> tuple[int, ...]:
    """The version of the `nix` on PATH, (2, 34, 8); () when it cannot say."""
    program = shutil.which("nix")
    return _version_of(program) if program else ()


def _derivation_command() -> str:
    # `show-derivation` became a deprecated alias of `derivation show` (2.15), which warns about it.
    return "derivation show" if nix_version() >= (2, 15) else "show-derivation"


def _full_path(path: str, store_dir: str) -> str:
    """A store path as the older Nix wrote it: newer `derivation show` leaves out the store folder."""
    return path if not path or path.startswith("/") else f"{store_dir}/{path}"


def parse_derivations(raw: bytes, store_dir: str) -> dict[str, Derivation]:
    """Derivations by path from either shape of `nix derivation show` (see the module's docstring)."""
    try:
        shown = msgspec.json.decode(raw)
        if isinstance(shown, dict) and isinstance(shown.get("derivations"), dict) and "version" in shown:
            shown = shown["derivations"]
        entries = msgspec.convert(shown, type=dict[str, _ShownDerivation])
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise NixError(f"nix {_derivation_command()} printed something unexpected: {exc}") from exc
    found = {}
    for key, drv in entries.items():
        path = _full_path(key, store_dir)
        outputs = {name: _full_path(out.path, store_dir) for name, out in sorted(drv.outputs.items())}
        found[path] = Derivation(path=path, system=drv.system, outputs=outputs, env=drv.env)
    return found


def show_derivations(drv_paths: Iterable[str]) -> dict[str, Derivation]:
    """The derivations at `drv_paths`, by path (one `nix derivation show` call for all of them)."""
    paths = list(dict.fromkeys(drv_paths))
    if not paths:
        return {}
    raw = nix_command([*_derivation_command().split(), *paths])
    return parse_derivations(raw, os.path.dirname(paths[0]))


def show_derivation(drv_path: str) -> Derivation:
    found = show_derivations([drv_path])
    if drv_path not in found:
        raise NixError(f"nix {_derivation_command()} said nothing about {drv_path}")
    return found[drv_path]


# --- store paths --------------------------------------------------------------------------------------------


class PathInfo(msgspec.Struct, frozen=True, rename="camel"):
    """One entry of `nix path-info --json`; an invalid (absent) path has only `path` and `valid: false`."""

    path: str
    valid: bool = True
    nar_hash: str = ""
    nar_size: int = 0
    registration_time: int | None = None
    deriver: str | None = None


_JSON_FORMAT = ("--json-format", "1")  # 2.34: string hashes and full paths (the older versions' only format)


@functools.cache
def _has_json_format(nix_program: str) -> bool:
    """Whether this Nix takes `--json-format` (2.34 warns without it; 2.26 and 2.8 refuse it)."""
    try:
        done = subprocess.run(
            [nix_program, *NIX_FLAGS, "path-info", "--json", *_JSON_FORMAT, "--help"],
            capture_output=True, timeout=60, stdin=subprocess.DEVNULL, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def parse_path_infos(raw: bytes) -> list[PathInfo]:
    """The entries of either shape of `nix path-info --json`: a list (2.8) or an object keyed by path."""
    try:
        listed = msgspec.json.decode(raw)
        if isinstance(listed, dict):
            listed = [{**(info or {}), "path": path, "valid": info is not None} for path, info in listed.items()]
        return msgspec.convert(listed, type=list[PathInfo])
    except (msgspec.DecodeError, msgspec.ValidationError, TypeError) as exc:
        raise NixError(f"nix path-info printed something unexpected: {exc}") from exc


def path_infos(paths: Iterable[str]) -> dict[str, PathInfo]:
    """The valid store paths among `paths`, by path; absent ones are left out."""
    wanted = [p for p in dict.fromkeys(paths) if p]
    if not wanted:
        return {}
    program = shutil.which("nix")
    json_format = _JSON_FORMAT if program and _has_json_format(program) else ()
    raw = nix_command(["path-info", "--json", *json_format, *wanted])
    return {info.path: info for info in parse_path_infos(raw) if info.valid}


class BuiltByNix(msgspec.Struct, frozen=True, rename="camel"):
    """One entry of `nix build --json`: the build's times in whole seconds (2.12 to 2.26; 2.34 and 2.8 print
    none) and its CPU time in seconds when Nix ran it in a cgroup (`use-cgroups`, from 2.12)."""

    drv_path: str
    start_time: int | None = None
    stop_time: int | None = None
    cpu_user: float | None = None
    cpu_system: float | None = None

    @property
    def cpu_seconds(self) -> float | None:
        if self.cpu_user is None or self.cpu_system is None:
            return None
        return self.cpu_user + self.cpu_system


def parse_build_json(raw: bytes) -> dict[str, BuiltByNix]:
    """What `nix build --json` printed, by derivation path; nothing when it printed something else."""
    try:
        return {entry.drv_path: entry for entry in msgspec.json.decode(raw, type=list[BuiltByNix])}
    except msgspec.DecodeError:
        return {}


def build_outputs(drv: Derivation) -> list[BuildOutput]:
    """The outputs of `drv` that are valid in the store now, by output name, with NAR hash and size."""
    infos = path_infos(drv.outputs.values())
    return [
        BuildOutput(name=name, path=path, nar_hash=infos[path].nar_hash, nar_size_bytes=infos[path].nar_size)
        for name, path in sorted(drv.outputs.items())
        if path in infos
    ]


def outputs_valid(drv: Derivation, outputs: Sequence[BuildOutput]) -> bool:
    """Whether every output of `drv` is among `outputs` (a build that produced them all)."""
    return bool(drv.outputs) and {o.name for o in outputs} >= drv.outputs.keys()


# --- stored build logs --------------------------------------------------------------------------------------


def log_dir() -> Path:
    """Where this machine's Nix keeps build logs (`NIX_LOG_DIR`, as Nix itself reads it)."""
    return Path(os.environ.get("NIX_LOG_DIR") or DEFAULT_LOG_DIR)


def log_file(drv_path: str, directory: Path | None = None) -> Path:
    """The compressed log Nix writes for `drv_path` when `keep-build-log` is on (the default)."""
    base = os.path.basename(drv_path)
    return (directory or log_dir()) / "drvs" / base[:2] / f"{base[2:]}.bz2"


def log_mtime_ns(drv_path: str, directory: Path | None = None) -> int | None:
    """When Nix last wrote the stored log of `drv_path` (≈ the end of its latest build), if there is one."""
    try:
        return log_file(drv_path, directory).stat().st_mtime_ns
    except OSError:
        return None


def read_build_log(drv_path: str, directory: Path | None = None) -> str | None:
    """The text of the stored build log of `drv_path` (stdout and stderr merged), or None when Nix kept none.

    Read from the file where it is local; otherwise (another log directory, a store of its own) asked of
    `nix log`. Bytes that are not UTF-8 are replaced, so any log can be recorded.
    """
    path = log_file(drv_path, directory)
    try:
        with bz2.open(path, "rb") as handle:
            return handle.read().decode(errors="replace")
    except FileNotFoundError:
        pass
    except (OSError, EOFError):
        return None  # a log still being written (or cut short) is not a log yet
    plain = path.with_suffix("")  # compress-build-log = false
    try:
        return plain.read_bytes().decode(errors="replace")
    except OSError:
        pass
    try:
        return nix_command(["log", drv_path]).decode(errors="replace")
    except NixError:
        return None


# --- what Nix prints ------------------------------------------------------------------------------------------


class NixEvent(msgspec.Struct):
    """One `@nix {…}` line of `--log-format internal-json` (start, stop, result or msg)."""

    action: str
    id: int = 0
    type: int = 0
    level: int = 0
    fields: list[Any] = []
    text: str = ""
    msg: str = ""
    parent: int = 0


_EVENT = msgspec.json.Decoder(NixEvent)
EVENT_PREFIX = b"@nix "


def parse_event(line: bytes) -> NixEvent | None:
    """The event on a line of Nix's stderr, or None for any other line (or one that is not valid JSON)."""
    if not line.startswith(EVENT_PREFIX):
        return None
    try:
        return _EVENT.decode(line[len(EVENT_PREFIX) :])
    except msgspec.DecodeError:
        return None


DRV = r"(?P<drv>/[^'\s]+\.drv)"
BUILDER_FAILED = re.compile(rf"builder for '{DRV}' failed with exit code (?P<code>\d+)")
# 2.34: "Cannot build '<drv>'.\n Reason: builder failed with exit code 1.\n Output paths: …"
CANNOT_BUILD = re.compile(rf"Cannot build '{DRV}'\.?(?:\s*Reason: (?P<reason>[^\n]*?)\.?\s*(?:\n|$))?")
REASON_EXIT_CODE = re.compile(r"^builder failed with exit code (?P<code>\d+)$")
TIMED_OUT = re.compile(
    rf"building of '{DRV}(?:[!^][^']*)?'(?: from \.drv file)? timed out after (?P<seconds>\d+) seconds"
    r"(?P<silence> of silence)?"
)
TIMED_OUT_UNNAMED = re.compile(r"^(?:error: )?timed out after (?P<seconds>\d+) seconds(?P<silence> of silence)?")
INTERRUPTED = re.compile(r"\binterrupted by the user\b")


class ErrorFinding(msgspec.Struct, frozen=True):
    """What one of Nix's error messages says: which build ended how (drv_path None: the whole command, or a
    time-out that Nix did not say the derivation of: `message` is then `timed out after N seconds`)."""

    status: BuildStatus
    drv_path: str | None
    message: str


def message_line(message: str) -> str:
    """The first line of one of Nix's messages, without colours or the `error: ` prefix (one form for all)."""
    text = strip_ansi(message).strip()
    first = text.splitlines()[0].strip() if text else ""
    return first.removeprefix("error:").strip()


def failed_message(drv_path: str, code: int | str) -> str:
    return f"builder for '{drv_path}' failed with exit code {code}"


def timeout_message(drv_path: str, seconds: int | str, silence: bool) -> str:
    return f"building of '{drv_path}' timed out after {seconds} seconds{' of silence' if silence else ''}"


def read_error(message: str) -> ErrorFinding | None:
    """The build an error message names and how it ended, or None for a message that says neither.

    The message may carry Nix's colours; the finding's `message` is in the form of the module's docstring.
    """
    text = strip_ansi(message)
    if match := BUILDER_FAILED.search(text):
        return ErrorFinding(BuildStatus.build_failed, match["drv"], failed_message(match["drv"], match["code"]))
    if match := TIMED_OUT.search(text):
        drv = match["drv"]
        return ErrorFinding(BuildStatus.timeout, drv, timeout_message(drv, match["seconds"], bool(match["silence"])))
    if match := CANNOT_BUILD.search(text):
        drv, reason = match["drv"], (match["reason"] or "").strip()
        if code := REASON_EXIT_CODE.match(reason):
            return ErrorFinding(BuildStatus.build_failed, drv, failed_message(drv, code["code"]))
        status = BuildStatus.timeout if "timed out" in reason else BuildStatus.build_failed
        return ErrorFinding(status, drv, f"cannot build '{drv}'" + (f": {reason}" if reason else ""))
    if match := TIMED_OUT_UNNAMED.match(text.strip()):
        return ErrorFinding(BuildStatus.timeout, None, message_line(text))
    if INTERRUPTED.search(text):
        return ErrorFinding(BuildStatus.cancelled, None, message_line(text))
    return None
