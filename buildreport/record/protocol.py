"""A reader of the parts of the Nix worker protocol that describe a remote build.

The runner relays a `nix-daemon --stdio` session byte for byte and hands a copy of each direction to
the two decoders here. They never touch the relayed bytes and never block: they only look.

- `ClientScanner` reads the client's stream: the handshake (the client's protocol version), then every
  `wopBuildDerivation` (op 36) with its derivation path and BasicDerivation. Framing every operation
  would mean following raw NAR streams, so it scans for the op-36 pattern instead (the protocol is
  synchronous: the client sends an op only after the previous answer) and validates all it decodes.
- `ReplyDecoder` reads the daemon's answer to one op 36: the framed log messages (activities, build
  log lines, errors) and then the BuildResult.

Every integer is a little-endian uint64; a string is its length then its bytes, zero-padded to 8.
Field order follows Nix's daemon.cc, derivations.cc and worker-protocol.cc for protocols 1.34 (Nix 2.8)
to 1.38 (Nix 2.26 to 2.34), checked against real sessions and Nix's own test data (tests/data/).
Anything malformed raises `ProtocolError`; the runner then stops recording that session, never relaying.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Callable, Generator
from dataclasses import dataclass, field

WORKER_MAGIC_1 = 0x6E697863
WORKER_MAGIC_2 = 0x6478696F
OP_BUILD_DERIVATION = 36
# A negotiated protocol feature (from 1.38) that changes how a BuildResult names its outputs.
FEATURE_REALISATION_WITH_PATH = "realisation-with-path-not-hash"

STDERR_NEXT = 0x6F6C6D67
STDERR_READ = 0x64617461
STDERR_WRITE = 0x64617416
STDERR_LAST = 0x616C7473
STDERR_ERROR = 0x63787470
STDERR_START_ACTIVITY = 0x53545254
STDERR_STOP_ACTIVITY = 0x53544F50
STDERR_RESULT = 0x52534C54

ACTIVITY_BUILD = 105  # actBuild: fields [drvPath, machine, curRound, nrRounds]
RESULT_BUILD_LOG_LINE = 101  # resBuildLogLine: fields [line]

# Bounds that no real session comes near; past them the bytes are not what the decoder thinks they are.
MAX_STRING = 64 * 1024 * 1024
MAX_PATH = 4096
MAX_COUNT = 1_000_000
MAX_DERIVATION_BYTES = 256 * 1024 * 1024


class ProtocolError(ValueError):
    """The bytes do not follow the worker protocol as this decoder knows it.

    `offset` is where in its stream the value that failed began, when the decoder knows it.
    """

    def __init__(self, message: str, offset: int | None = None) -> None:
        super().__init__(message)
        self.offset = offset


class BuildResultStatus(enum.IntEnum):
    """BuildResult::Status of Nix (build-result.hh)."""

    Built = 0
    Substituted = 1
    AlreadyValid = 2
    PermanentFailure = 3
    InputRejected = 4
    OutputRejected = 5
    TransientFailure = 6
    CachedFailure = 7
    TimedOut = 8
    MiscFailure = 9
    DependencyFailed = 10
    LogLimitExceeded = 11
    NotDeterministic = 12
    ResolvesToAlreadyValid = 13
    NoSubstituters = 14


@dataclass(frozen=True)
class DerivationOutput:
    name: str
    path: str  # empty for outputs whose path is not known in advance (content-addressed)
    hash_algo: str
    hash: str


@dataclass(frozen=True)
class BuildRequest:
    """One wopBuildDerivation: what the client asked the runner to build."""

    drv_path: str
    outputs: tuple[DerivationOutput, ...]
    input_srcs: tuple[str, ...]
    platform: str
    builder: str
    args: tuple[str, ...]
    env: dict[str, str]
    build_mode: int


@dataclass(frozen=True)
class BuildResult:
    """The daemon's answer to one wopBuildDerivation."""

    status: int
    error_msg: str
    times_built: int | None = None
    is_non_deterministic: bool | None = None
    start_time: int | None = None  # Unix seconds, from protocol 1.29
    stop_time: int | None = None
    built_outputs: dict[str, str] = field(default_factory=dict)  # output name -> store path, from 1.28
    cpu_user_us: int | None = None  # the build's own CPU time in microseconds, from 1.37, when Nix measured it
    cpu_system_us: int | None = None

    @property
    def cpu_seconds(self) -> float | None:
        """User and system CPU time of the build, when the daemon sent either."""
        if self.cpu_user_us is None and self.cpu_system_us is None:
            return None
        return ((self.cpu_user_us or 0) + (self.cpu_system_us or 0)) / 1e6


@dataclass(frozen=True)
class DaemonError:
    """STDERR_ERROR: the daemon failed the operation itself."""

    message: str


# --- a push decoder: a generator that asks for byte counts and is fed exactly that many ----------------

Need = Generator[int, bytes, object]


def read_u64() -> Generator[int, bytes, int]:
    data = yield 8
    return int.from_bytes(data, "little")


def read_bytes(limit: int = MAX_STRING) -> Generator[int, bytes, bytes]:
    size = yield from read_u64()
    if size > limit:
        raise ProtocolError(f"string of {size} bytes is longer than {limit}")
    padded = (size + 7) & ~7
    data = yield padded
    if any(data[size:]):
        raise ProtocolError("string padding is not zero")
    return data[:size]


def read_text(limit: int = MAX_STRING) -> Generator[int, bytes, str]:
    data = yield from read_bytes(limit)
    return data.decode("utf-8", errors="replace")


def read_count() -> Generator[int, bytes, int]:
    count = yield from read_u64()
    if count > MAX_COUNT:
        raise ProtocolError(f"count {count} is larger than {MAX_COUNT}")
    return count


class Decoder:
    """Feeds bytes to a generator that yields how many it needs next.

    `base` is the offset in its stream of the first byte the generator reads: a ProtocolError leaves
    with the offset of the value that failed.
    """

    def __init__(self, gen: Generator[int, bytes, object], base: int = 0) -> None:
        self._gen = gen
        self._buf = bytearray()
        self._pos = 0
        self.done = False
        self.value: object = None
        self.base = base
        self.consumed = 0  # bytes taken by the generator so far
        self._need = self._advance(None)

    def _advance(self, data: bytes | None) -> int:
        try:
            return self._gen.send(data) if data is not None else next(self._gen)
        except StopIteration as stop:
            self.done = True
            self.value = stop.value
            return 0
        except ProtocolError as exc:
            if exc.offset is None:
                exc.offset = self.base + self.consumed - (len(data) if data is not None else 0)
            raise

    def feed(self, data: bytes) -> int:
        """Take bytes; the number of them left over once the generator finished (else 0)."""
        self._buf += data
        while not self.done and len(self._buf) - self._pos >= self._need:
            chunk = bytes(self._buf[self._pos : self._pos + self._need])
            self._pos += self._need
            self.consumed += self._need
            self._need = self._advance(chunk)
        left = len(self._buf) - self._pos if self.done else 0
        if self._pos > 65536 or self.done:
            del self._buf[: self._pos]
            self._pos = 0
        return left

    @property
    def rest(self) -> bytes:
        return bytes(self._buf[self._pos :])


# --- client -> daemon ----------------------------------------------------------------------------------


def _store_path(text: str, store_dir: str, *, allow_empty: bool = False) -> str:
    if allow_empty and text == "":
        return text
    prefix = store_dir + "/"
    name = text[len(prefix) :]
    if not text.startswith(prefix) or not name or "/" in name or len(text) > MAX_PATH or not text.isprintable():
        raise ProtocolError(f"not a store path: {text[:120]!r}")
    return text


def _derivation(store_dir: str) -> Generator[int, bytes, BuildRequest]:
    """wopBuildDerivation after its op code: drvPath, BasicDerivation, buildMode."""
    drv_path = _store_path((yield from read_text(MAX_PATH)), store_dir)
    if not drv_path.endswith(".drv"):
        raise ProtocolError(f"not a derivation path: {drv_path!r}")
    outputs = []
    for _ in range((yield from read_count())):
        name = yield from read_text(MAX_PATH)
        path = _store_path((yield from read_text(MAX_PATH)), store_dir, allow_empty=True)
        hash_algo = yield from read_text(MAX_PATH)
        digest = yield from read_text(MAX_PATH)
        if not name:
            raise ProtocolError("derivation output without a name")
        outputs.append(DerivationOutput(name, path, hash_algo, digest))
    if not outputs:
        raise ProtocolError("derivation without outputs")
    input_srcs = []
    for _ in range((yield from read_count())):
        input_srcs.append(_store_path((yield from read_text(MAX_PATH)), store_dir))
    platform = yield from read_text(MAX_PATH)
    if not platform or not platform.isprintable():
        raise ProtocolError(f"bad platform {platform[:60]!r}")
    builder = yield from read_text(MAX_PATH)
    args = []
    for _ in range((yield from read_count())):
        args.append((yield from read_text()))
    env = {}
    for _ in range((yield from read_count())):
        key = yield from read_text()
        env[key] = yield from read_text()
    build_mode = yield from read_u64()
    if build_mode > 2:  # bmNormal, bmRepair, bmCheck
        raise ProtocolError(f"bad build mode {build_mode}")
    return BuildRequest(drv_path, tuple(outputs), tuple(input_srcs), platform, builder, tuple(args), env, build_mode)


class ClientScanner:
    """Finds the handshake and every wopBuildDerivation in the client's stream.

    `on_request(request)` is called for each op 36 decoded whole. A candidate that fails to decode is
    dropped and scanning goes on after it, so a NAR that happens to hold the pattern costs nothing.
    """

    def __init__(self, on_request: Callable[[BuildRequest], None], store_dir: str = "/nix/store") -> None:
        self._on_request = on_request
        self._store_dir = store_dir
        self._prefix = (store_dir + "/").encode()
        # The op code, then the length of the derivation path (1 to 4095: two low bytes, six zeros),
        # then the store directory: found by the regex engine, so relaying a large NAR costs little.
        op = re.escape(OP_BUILD_DERIVATION.to_bytes(8, "little"))
        self._pattern = re.compile(op + rb"[\x00-\xff][\x00-\x0f]\x00{6}" + re.escape(self._prefix), re.DOTALL)
        self._pending = b""  # bytes not scanned yet: a possible op start cut by a chunk boundary
        self._handshake = b""
        self.client_version: int | None = None
        self._decoder: Decoder | None = None
        self._decoded = b""  # bytes a running candidate has taken, rescanned if it turns out wrong

    def feed(self, data: bytes) -> None:
        if self.client_version is None:
            self._handshake += data
            if len(self._handshake) < 16:
                return
            if int.from_bytes(self._handshake[:8], "little") != WORKER_MAGIC_1:
                raise ProtocolError("the client did not open with the worker magic", 0)
            self.client_version = int.from_bytes(self._handshake[8:16], "little")
            if self.client_version >> 8 != 1:
                raise ProtocolError(f"unknown protocol version {self.client_version:#x}", 8)
            data, self._handshake = self._handshake[16:], b""
        while data:
            data = self._feed_candidate(data) if self._decoder is not None else self._scan(data)

    def _scan(self, data: bytes) -> bytes:
        buf = self._pending + data
        self._pending = b""
        match = self._pattern.search(buf)
        if match is None:
            # Keep what could be the start of an op cut off by the end of this chunk.
            self._pending = buf[-(15 + len(self._prefix)) :]
            return b""
        at = match.start()
        self._decoder = Decoder(_derivation(self._store_dir))
        self._decoded = b""
        return buf[at + 8 :]

    def _feed_candidate(self, data: bytes) -> bytes:
        assert self._decoder is not None
        try:
            left = self._decoder.feed(data)
            if self._decoder.consumed > MAX_DERIVATION_BYTES:
                raise ProtocolError("derivation too large")
        except ProtocolError:
            # Not a real op 36 after all: scan again from just after where the candidate started.
            rescan = self._decoded + data
            self._decoder = None
            self._decoded = b""
            self._pending = b""
            return rescan[1:]
        if not self._decoder.done:
            if len(self._decoded) < MAX_DERIVATION_BYTES:
                self._decoded += data
            return b""
        request = self._decoder.value
        rest = data[len(data) - left :] if left else b""
        self._decoder = None
        self._decoded = b""
        assert isinstance(request, BuildRequest)
        self._on_request(request)
        return rest


# --- daemon -> client ----------------------------------------------------------------------------------


class ReplyEvents:
    """What a ReplyDecoder reports; the runner overrides the methods it needs."""

    def build_started(self, drv_path: str) -> None: ...

    def log_line(self, line: str) -> None: ...

    def message(self, text: str) -> None: ...

    def finished(self, result: BuildResult | DaemonError) -> None: ...


def _fields() -> Generator[int, bytes, list[int | str]]:
    values: list[int | str] = []
    for _ in range((yield from read_count())):
        kind = yield from read_u64()
        if kind == 0:
            values.append((yield from read_u64()))
        elif kind == 1:
            values.append((yield from read_text()))
        else:
            raise ProtocolError(f"unknown field type {kind}")
    return values


def _error(minor: int) -> Generator[int, bytes, DaemonError]:
    if minor >= 26:
        yield from read_text()  # "Error"
        yield from read_u64()  # level
        yield from read_text()  # name
        message = yield from read_text()
        yield from read_u64()  # position: always 0 in these versions
        for _ in range((yield from read_count())):
            yield from read_u64()
            yield from read_text()
        return DaemonError(message)
    message = yield from read_text()
    yield from read_u64()  # exit status
    return DaemonError(message)


def _optional_micros() -> Generator[int, bytes, int | None]:
    """std::optional<std::chrono::microseconds>: a tag (0 none, 1 some), then the value."""
    tag = yield from read_u64()
    if tag == 0:
        return None
    if tag != 1:
        raise ProtocolError(f"bad optional tag {tag}")
    value = yield from read_u64()
    if value >= 1 << 63:
        raise ProtocolError(f"negative duration {value - (1 << 64)}")
    return value


def _realisations(store_dir: str) -> Generator[int, bytes, dict[str, str]]:
    """builtOutputs with the feature realisation-with-path-not-hash: output name -> (store path, signatures)."""
    outputs: dict[str, str] = {}
    for _ in range((yield from read_count())):
        name = yield from read_text(MAX_PATH)
        outputs[name] = _store_path((yield from read_text(MAX_PATH)), store_dir)
        for _ in range((yield from read_count())):
            yield from read_text()
    return outputs


def _build_result(minor: int, store_dir: str, features: frozenset[str]) -> Generator[int, bytes, BuildResult]:
    status = yield from read_u64()
    if status > 64:
        raise ProtocolError(f"bad build status {status}")
    error_msg = yield from read_text()
    times_built = non_det = start = stop = cpu_user = cpu_system = None
    if minor >= 29:
        times_built = yield from read_u64()
        non_det = bool((yield from read_u64()))
        start = yield from read_u64()
        stop = yield from read_u64()
    if minor >= 37:
        cpu_user = yield from _optional_micros()
        cpu_system = yield from _optional_micros()
    outputs: dict[str, str] = {}
    if FEATURE_REALISATION_WITH_PATH in features:
        outputs = yield from _realisations(store_dir)
    elif minor >= 28:
        for _ in range((yield from read_count())):
            drv_output = yield from read_text()  # "sha256:<hash>!<output name>"
            realisation = yield from read_text()
            name = drv_output.rpartition("!")[2]
            try:
                path = json.loads(realisation)["outPath"]
            except (ValueError, KeyError, TypeError) as exc:
                raise ProtocolError(f"bad realisation {realisation[:120]!r}") from exc
            outputs[name] = path if path.startswith("/") else f"{store_dir}/{path}"
    return BuildResult(status, error_msg, times_built, non_det, start, stop, outputs, cpu_user, cpu_system)


def _reply(
    minor: int, events: ReplyEvents, store_dir: str, features: frozenset[str]
) -> Generator[int, bytes, BuildResult | DaemonError]:
    builds: set[int] = set()
    while True:
        kind = yield from read_u64()
        if kind == STDERR_NEXT:
            events.message((yield from read_text()))
        elif kind == STDERR_START_ACTIVITY:
            act_id = yield from read_u64()
            yield from read_u64()  # level
            act_type = yield from read_u64()
            yield from read_text()
            values = yield from _fields()
            yield from read_u64()  # parent
            if act_type == ACTIVITY_BUILD and values and isinstance(values[0], str):
                builds.add(act_id)
                events.build_started(values[0])
        elif kind == STDERR_STOP_ACTIVITY:
            yield from read_u64()
        elif kind == STDERR_RESULT:
            act_id = yield from read_u64()
            res_type = yield from read_u64()
            values = yield from _fields()
            if res_type == RESULT_BUILD_LOG_LINE and act_id in builds and values and isinstance(values[0], str):
                events.log_line(values[0])
        elif kind == STDERR_WRITE:
            yield from read_bytes()
        elif kind == STDERR_READ:
            yield from read_u64()
        elif kind == STDERR_ERROR:
            error = yield from _error(minor)
            events.finished(error)
            return error
        elif kind == STDERR_LAST:
            result = yield from _build_result(minor, store_dir, features)
            events.finished(result)
            return result
        else:
            raise ProtocolError(f"unknown message {kind:#x} from the daemon")


class ReplyDecoder:
    """Decodes the daemon's answer to one wopBuildDerivation, reporting to `events` as bytes arrive."""

    def __init__(
        self,
        minor: int,
        events: ReplyEvents,
        store_dir: str = "/nix/store",
        features: frozenset[str] = frozenset(),
        base: int = 0,
    ) -> None:
        self._decoder = Decoder(_reply(minor, events, store_dir, features), base)

    @property
    def done(self) -> bool:
        return self._decoder.done

    def feed(self, data: bytes) -> int:
        """Take bytes of the daemon's stream; how many of them came after the answer ended."""
        return self._decoder.feed(data)
