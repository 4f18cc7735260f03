"""The opening of a worker-protocol session, read from both directions: what the runner must know to
decode the rest, and what its log says about each session.

Client: magic 1, its version; from 1.38 its feature list; then the obsolete CPU affinity (from 1.14:
a flag, and a value when it is set) and reserve-space flag (from 1.11).
Daemon: magic 2, its version; from 1.38 its feature list; from 1.33 its Nix version; from 1.35 whether
it trusts the client (0 unknown, 1 trusted, 2 not trusted). Both use the lower of the two versions and
the features both sent (Nix's worker-protocol-connection.cc and worker-protocol.cc).

A session's negotiated version decides how every answer is decoded, so one newer than the decoders
know (or a feature they do not know) means the session is relayed but not recorded.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass

from buildreport.record.protocol import (
    FEATURE_REALISATION_WITH_PATH,
    WORKER_MAGIC_1,
    WORKER_MAGIC_2,
    Decoder,
    ProtocolError,
    read_count,
    read_text,
    read_u64,
)

NEWEST_KNOWN_MINOR = 38  # Nix 2.26 to 2.34 (and the newest sources) speak 1.38; Nix 2.8 speaks 1.34
OLDEST_KNOWN_MINOR = 18  # the oldest a daemon of today accepts
# Features that leave wopBuildDerivation and its BuildResult as the decoders read them.
KNOWN_FEATURES = frozenset({FEATURE_REALISATION_WITH_PATH, "delete-dead-specific-referrers"})
HELLO = 16
MAX_FEATURES = 1000


def version_text(version: int) -> str:
    return f"{version >> 8}.{version & 0xFF}"


@dataclass
class Handshake:
    client_version: int | None = None
    daemon_version: int | None = None
    client_features: frozenset[str] | None = None
    daemon_features: frozenset[str] | None = None
    daemon_nix_version: str | None = None
    trusted: bool | None = None  # None: the daemon did not say (before 1.35, or "unknown")

    @property
    def version(self) -> int | None:
        """The negotiated version, once both sides have said theirs."""
        if self.client_version is None or self.daemon_version is None:
            return None
        return min(self.client_version, self.daemon_version)

    @property
    def minor(self) -> int:
        version = self.version
        if version is None:
            raise ProtocolError("the protocol version is not known yet")
        return version & 0xFF

    @property
    def features(self) -> frozenset[str]:
        """Features both sides offered (from 1.38); they change some messages."""
        return (self.client_features or frozenset()) & (self.daemon_features or frozenset())

    def unsupported(self) -> str | None:
        """Why this session's builds cannot be decoded (None when they can)."""
        version = self.version
        if version is None:
            return None
        if version >> 8 != 1 or not OLDEST_KNOWN_MINOR <= version & 0xFF <= NEWEST_KNOWN_MINOR:
            return (
                f"protocol {version_text(version)} is not one this runner decodes "
                f"(1.{OLDEST_KNOWN_MINOR} to 1.{NEWEST_KNOWN_MINOR})"
            )
        unknown = self.features - KNOWN_FEATURES
        if unknown:
            return f"protocol features {', '.join(sorted(unknown))} are unknown to this runner"
        return None

    def describe(self) -> str:
        version = self.version
        parts = [
            f"protocol {version_text(version) if version is not None else '?'}",
            f"client {version_text(self.client_version) if self.client_version is not None else '?'}",
            f"daemon {version_text(self.daemon_version) if self.daemon_version is not None else '?'}",
        ]
        if self.daemon_nix_version is not None:
            parts.append(f"daemon Nix {self.daemon_nix_version}")
        if self.trusted is not None:
            parts.append("trusted" if self.trusted else "not trusted")
        if self.client_features is not None and self.daemon_features is not None:
            parts.append(f"features: {', '.join(sorted(self.features)) or 'none'}")
        return ", ".join(parts)


def _features() -> Generator[int, bytes, frozenset[str]]:
    count = yield from read_count()
    if count > MAX_FEATURES:
        raise ProtocolError(f"{count} protocol features")
    names = []
    for _ in range(count):
        names.append((yield from read_text(1024)))
    return frozenset(names)


def _client_rest(info: Handshake) -> Generator[int, bytes, None]:
    minor = info.minor
    if minor >= 38:
        info.client_features = yield from _features()
    if minor >= 14 and (yield from read_u64()):
        yield from read_u64()  # obsolete CPU affinity
    if minor >= 11:
        yield from read_u64()  # obsolete reserveSpace


def _daemon_rest(info: Handshake) -> Generator[int, bytes, None]:
    minor = info.minor
    if minor >= 38:
        info.daemon_features = yield from _features()
    if minor >= 33:
        info.daemon_nix_version = yield from read_text(1024)
    if minor >= 35:
        flag = yield from read_u64()
        if flag > 2:
            raise ProtocolError(f"bad trust flag {flag}")
        info.trusted = None if flag == 0 else flag == 1


class HandshakeReader:
    """Reads the handshake from copies of both streams, fed as they pass; `done` once both sides finished.

    The client's part after its hello depends on the negotiated version, which needs the daemon's hello:
    bytes are held until both hellos are in (a client never sends more before the daemon answers).
    """

    def __init__(self) -> None:
        self.info = Handshake()
        self._raw = {"client": b"", "daemon": b""}
        self._rest: dict[str, Decoder] = {}

    @property
    def done(self) -> bool:
        return len(self._rest) == 2 and all(decoder.done for decoder in self._rest.values())

    @property
    def versions_known(self) -> bool:
        return self.info.version is not None

    def feed_client(self, data: bytes) -> None:
        self._feed("client", data)

    def feed_daemon(self, data: bytes) -> None:
        self._feed("daemon", data)

    def _feed(self, side: str, data: bytes) -> None:
        decoder = self._rest.get(side)
        if decoder is not None:
            if not decoder.done:
                decoder.feed(data)
            return
        if len(self._raw[side]) < 1 << 20:  # a hello is 16 bytes; a stream that never sends one stops here
            self._raw[side] += data
        self._hello(side)
        if self.versions_known and self.unsupported_reason is None and not self._rest:
            self._rest = {
                "client": Decoder(_client_rest(self.info), HELLO),
                "daemon": Decoder(_daemon_rest(self.info), HELLO),
            }
            for name, rest in self._rest.items():
                rest.feed(self._raw[name][HELLO:])
            self._raw = {"client": b"", "daemon": b""}

    @property
    def unsupported_reason(self) -> str | None:
        return self.info.unsupported()

    def _hello(self, side: str) -> None:
        raw = self._raw[side]
        if len(raw) < HELLO:
            return
        magic, version = int.from_bytes(raw[:8], "little"), int.from_bytes(raw[8:16], "little")
        if side == "client" and self.info.client_version is None:
            if magic != WORKER_MAGIC_1:
                raise ProtocolError("the client did not open with the worker magic", 0)
            self.info.client_version = version
        elif side == "daemon" and self.info.daemon_version is None:
            if magic != WORKER_MAGIC_2:
                raise ProtocolError("the daemon did not answer with the worker magic", 0)
            self.info.daemon_version = version
