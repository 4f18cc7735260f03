"""Reading the worker-protocol handshake: Nix's own test data and a real Nix 2.8 session."""

from __future__ import annotations

from pathlib import Path

import pytest

from buildreport.record.handshake import NEWEST_KNOWN_MINOR, HandshakeReader
from buildreport.record.protocol import FEATURE_REALISATION_WITH_PATH, WORKER_MAGIC_1, WORKER_MAGIC_2, ProtocolError

DATA = Path(__file__).parent / "data"
NIX_DATA = DATA / "nix_worker_protocol"


def u64(n: int) -> bytes:
    return n.to_bytes(8, "little")


def string(text: str) -> bytes:
    data = text.encode()
    return u64(len(data)) + data + b"\0" * (-len(data) % 8)


def strings(*items: str) -> bytes:
    return u64(len(items)) + b"".join(string(item) for item in items)


def client_hello(minor: int) -> bytes:
    return u64(WORKER_MAGIC_1) + u64(0x100 | minor)


def read(client: bytes, daemon: bytes, chunk: int = 1 << 20) -> HandshakeReader:
    """Feed both streams as a relay sees them: the client's hello, the daemon's hello, then the rest."""
    reader = HandshakeReader()
    reader.feed_client(client[:16])
    for i in range(0, len(daemon), chunk):
        reader.feed_daemon(daemon[i : i + chunk])
    for i in range(16, len(client), chunk):
        reader.feed_client(client[i : i + chunk])
    return reader


def test_handshake_of_a_real_nix_2_8_session_gives_version_and_daemon_nix() -> None:
    client = (DATA / "nix_session" / "ok.client").read_bytes()[:32]
    daemon = (DATA / "nix_session" / "ok.daemon").read_bytes()[:40]
    reader = read(client, daemon)
    assert reader.done
    info = reader.info
    assert (info.client_version, info.daemon_version, info.minor) == (0x122, 0x122, 34)
    assert info.daemon_nix_version == "2.8.0" and info.trusted is None
    assert info.describe() == "protocol 1.34, client 1.34, daemon 1.34, daemon Nix 2.8.0"
    assert info.unsupported() is None


def test_daemon_hello_from_nix_test_data_gives_the_daemons_version() -> None:
    hello = (NIX_DATA / "handshake-to-client.bin").read_bytes()
    reader = HandshakeReader()
    reader.feed_client(client_hello(10))
    reader.feed_daemon(hello)
    assert reader.info.daemon_version == 0x10A and reader.info.version == 0x10A


@pytest.mark.parametrize(
    ("minor", "name", "expected"),
    [
        (30, "client-handshake-info_1_30", (None, None)),
        (33, "client-handshake-info_1_33", ("foo", None)),
        (35, "client-handshake-info_1_35", ("foo", False)),
    ],
)
def test_daemon_handshake_info_of_each_version_decodes_as_nix_writes_it(
    minor: int, name: str, expected: tuple[str | None, bool | None]
) -> None:
    # Each file holds two ClientHandshakeInfo values; the first is what a daemon sends after its hello.
    info_bytes = (NIX_DATA / f"{name}.bin").read_bytes()
    client = client_hello(minor) + u64(0) + u64(0)
    reader = read(client, u64(WORKER_MAGIC_2) + u64(0x100 | minor) + info_bytes)
    assert reader.done
    assert (reader.info.daemon_nix_version, reader.info.trusted) == expected


def test_every_trust_flag_nix_writes_is_read() -> None:
    flags = (NIX_DATA / "optional-trusted-flag.bin").read_bytes()
    seen = []
    for at in range(0, len(flags), 8):
        daemon = u64(WORKER_MAGIC_2) + u64(0x100 | 35) + string("2.20.0") + flags[at : at + 8]
        reader = read(client_hello(35) + u64(0) + u64(0), daemon)
        seen.append(reader.info.trusted)
    assert seen == [None, True, False]


def test_handshake_of_1_38_exchanges_features_and_keeps_those_both_offer() -> None:
    client = client_hello(38) + strings(FEATURE_REALISATION_WITH_PATH, "something-else") + u64(1) + u64(3) + u64(0)
    daemon = u64(WORKER_MAGIC_2) + u64(0x100 | 38) + strings(FEATURE_REALISATION_WITH_PATH) + string("2.99.0") + u64(1)
    reader = read(client, daemon, chunk=5)
    assert reader.done
    info = reader.info
    assert info.features == {FEATURE_REALISATION_WITH_PATH}
    assert info.describe() == (
        "protocol 1.38, client 1.38, daemon 1.38, daemon Nix 2.99.0, trusted, features: realisation-with-path-not-hash"
    )
    assert info.unsupported() is None


def test_nix_2_34_talking_to_itself_negotiates_1_38_without_features() -> None:
    daemon = u64(WORKER_MAGIC_2) + u64(0x126) + strings() + string("2.34.8") + u64(2)
    reader = read(client_hello(38) + strings() + u64(0) + u64(0), daemon)
    assert reader.done
    assert reader.info.describe().endswith("daemon Nix 2.34.8, not trusted, features: none")


def test_an_older_client_with_a_newer_daemon_uses_the_clients_version() -> None:
    daemon = u64(WORKER_MAGIC_2) + u64(0x126) + string("2.34.8") + u64(1)  # no features below 1.38
    reader = read(client_hello(34) + u64(0) + u64(0), daemon)
    assert reader.done and reader.info.minor == 34 and reader.info.daemon_nix_version == "2.34.8"


def test_a_protocol_newer_than_the_decoders_know_is_named_as_unsupported() -> None:
    reader = HandshakeReader()
    reader.feed_client(client_hello(NEWEST_KNOWN_MINOR + 1))
    reader.feed_daemon(u64(WORKER_MAGIC_2) + u64(0x100 | (NEWEST_KNOWN_MINOR + 1)))
    assert reader.unsupported_reason == (
        f"protocol 1.{NEWEST_KNOWN_MINOR + 1} is not one this runner decodes (1.18 to 1.{NEWEST_KNOWN_MINOR})"
    )
    assert not reader.done


def test_a_newer_client_with_a_known_daemon_is_decoded_at_the_daemons_version() -> None:
    daemon = u64(WORKER_MAGIC_2) + u64(0x126) + strings() + string("2.34.8") + u64(1)
    reader = read(client_hello(NEWEST_KNOWN_MINOR + 5) + strings("future") + u64(0) + u64(0), daemon)
    assert reader.done and reader.info.minor == 38 and reader.info.unsupported() is None


def test_an_unknown_negotiated_feature_is_named_as_unsupported() -> None:
    daemon = u64(WORKER_MAGIC_2) + u64(0x126) + strings("future-feature") + string("3.0") + u64(1)
    reader = read(client_hello(38) + strings("future-feature") + u64(0) + u64(0), daemon)
    assert reader.info.unsupported() == "protocol features future-feature are unknown to this runner"


def test_a_bad_trust_flag_fails_at_its_offset() -> None:
    daemon = u64(WORKER_MAGIC_2) + u64(0x123) + string("2.20.0") + u64(9)
    with pytest.raises(ProtocolError, match="bad trust flag 9") as caught:
        read(client_hello(35) + u64(0) + u64(0), daemon)
    assert caught.value.offset == 16 + 16


def test_a_daemon_without_the_magic_is_refused() -> None:
    reader = HandshakeReader()
    reader.feed_client(client_hello(34))
    with pytest.raises(ProtocolError, match="worker magic"):
        reader.feed_daemon(u64(1234) + u64(0x122))
