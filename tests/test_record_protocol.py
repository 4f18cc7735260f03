"""The worker-protocol decoders, on bytes captured from a real ssh-ng session with Nix 2.8."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from buildreport.record.protocol import (
    STDERR_ERROR,
    STDERR_LAST,
    BuildRequest,
    BuildResult,
    ClientScanner,
    DaemonError,
    ProtocolError,
    ReplyDecoder,
    ReplyEvents,
    daemon_version,
    negotiated_minor,
)

DATA = Path(__file__).parent / "data" / "nix_session"
# In these captures the answer to wopBuildDerivation starts after the handshake and the answers to
# wopQueryValidPaths and wopAddMultipleToStore: magic, version, "2.8.0", and three STDERR_LAST.
REPLY_OFFSET = 64


def u64(n: int) -> bytes:
    return n.to_bytes(8, "little")


def string(text: str | bytes) -> bytes:
    data = text.encode() if isinstance(text, str) else text
    return u64(len(data)) + data + b"\0" * (-len(data) % 8)


def scan(data: bytes, chunk: int = 1 << 20) -> list[BuildRequest]:
    found: list[BuildRequest] = []
    scanner = ClientScanner(found.append)
    for i in range(0, len(data), chunk):
        scanner.feed(data[i : i + chunk])
    return found


class Recorded(ReplyEvents):
    def __init__(self) -> None:
        self.started: list[str] = []
        self.lines: list[str] = []
        self.results: list[BuildResult | DaemonError] = []

    def build_started(self, drv_path: str) -> None:
        self.started.append(drv_path)

    def log_line(self, line: str) -> None:
        self.lines.append(line)

    def finished(self, result: BuildResult | DaemonError) -> None:
        self.results.append(result)


def reply(name: str, chunk: int = 1 << 20) -> tuple[Recorded, int]:
    events = Recorded()
    decoder = ReplyDecoder(34, events)
    data = (DATA / f"{name}.daemon").read_bytes()[REPLY_OFFSET:]
    left = 0
    for i in range(0, len(data), chunk):
        left = decoder.feed(data[i : i + chunk]) + max(0, len(data) - i - chunk)
        if decoder.done:
            break
    assert decoder.done
    return events, left


def test_client_scanner_finds_the_derivation_and_its_attributes() -> None:
    [request] = scan((DATA / "ok.client").read_bytes())
    assert request.drv_path.endswith("-ok-test.drv")
    assert request.platform == "x86_64-linux"
    assert request.builder == "/bin/sh"
    assert request.args[0] == "-c"
    assert request.env["SERVICE_TAG_drvtag"] == "yes"
    assert [o.name for o in request.outputs] == ["out"]
    assert request.outputs[0].path == request.env["out"]
    assert request.build_mode == 0


def test_client_scanner_reads_every_output_of_a_multi_output_derivation() -> None:
    [request] = scan((DATA / "multi.client").read_bytes())
    assert {o.name: o.path for o in request.outputs} == {"out": request.env["out"], "dev": request.env["dev"]}


@pytest.mark.parametrize("name", ["ok", "fail", "multi"])
@pytest.mark.parametrize("chunk", [1, 3, 8, 13, 4096])
def test_client_scanner_gives_the_same_request_however_the_stream_is_cut(name: str, chunk: int) -> None:
    data = (DATA / f"{name}.client").read_bytes()
    assert scan(data, chunk) == scan(data)


def test_client_scanner_reads_the_client_protocol_version() -> None:
    scanner = ClientScanner(lambda r: None)
    scanner.feed((DATA / "ok.client").read_bytes()[:16])
    assert scanner.client_version == 0x122


def test_client_scanner_skips_a_false_op_pattern_inside_other_data() -> None:
    data = (DATA / "ok.client").read_bytes()
    # An op-36 lookalike whose "derivation" is garbage, as a NAR could hold, just before the real op.
    decoy = u64(36) + string("/nix/store/abc-decoy.drv") + u64(1) + b"\xff" * 40
    head, tail = data[:16], data[16:]
    at = tail.find(u64(36) + u64(0x37))
    requests = scan(head + tail[:at] + decoy + tail[at:])
    assert [r.drv_path for r in requests] == [r.drv_path for r in scan(data)]


def test_client_scanner_refuses_a_stream_without_the_worker_magic() -> None:
    with pytest.raises(ProtocolError):
        ClientScanner(lambda r: None).feed(b"\0" * 16)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=4096))
def test_client_scanner_finds_nothing_in_noise_and_never_fails_on_it(noise: bytes) -> None:
    data = (DATA / "ok.client").read_bytes()[:16] + noise
    assert scan(data, 7) == []


@settings(max_examples=50, deadline=None)
@given(st.binary(max_size=512), st.binary(max_size=512))
def test_client_scanner_finds_the_real_request_among_noise(before: bytes, after: bytes) -> None:
    data = (DATA / "fail.client").read_bytes()
    [expected] = scan(data)
    found = scan(data[:16] + before + data[16:] + after, 5)
    assert expected in found


def test_reply_of_a_successful_build_gives_its_log_times_and_outputs() -> None:
    events, _ = reply("ok")
    [result] = events.results
    assert isinstance(result, BuildResult)
    assert result.status == 0 and result.error_msg == ""
    assert result.times_built == 1 and result.is_non_deterministic is False
    assert result.start_time is not None and result.stop_time is not None
    assert result.start_time <= result.stop_time
    assert events.lines == ["building", "to-stderr"]
    assert events.started == [scan((DATA / "ok.client").read_bytes())[0].drv_path]
    assert list(result.built_outputs) == ["out"]
    assert result.built_outputs["out"].startswith("/nix/store/") and result.built_outputs["out"].endswith("-ok-test")


def test_reply_of_a_failed_build_gives_its_status_and_error_text() -> None:
    events, _ = reply("fail", chunk=3)
    [result] = events.results
    assert isinstance(result, BuildResult)
    assert result.status == 3  # PermanentFailure
    assert "failed with exit code 1" in result.error_msg
    assert events.lines == ["about to fail"]
    assert result.built_outputs == {}


def test_reply_of_a_multi_output_build_names_every_output() -> None:
    events, left = reply("multi")
    [result] = events.results
    assert isinstance(result, BuildResult)
    assert sorted(result.built_outputs) == ["dev", "out"]
    assert left > 0  # the answers to the next ops follow and are not read as part of this one


def test_reply_ending_in_a_daemon_error_reports_it() -> None:
    error = string("Error") + u64(0) + string("Error") + string("interrupted by the user") + u64(0) + u64(0)
    events = Recorded()
    decoder = ReplyDecoder(34, events)
    decoder.feed(u64(STDERR_ERROR) + error)
    assert decoder.done
    assert events.results == [DaemonError("interrupted by the user")]


def test_reply_before_protocol_1_28_has_no_times_and_no_outputs() -> None:
    events = Recorded()
    ReplyDecoder(27, events).feed(u64(STDERR_LAST) + u64(0) + string(""))
    assert events.results == [BuildResult(0, "")]


def test_reply_with_an_unknown_message_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError):
        ReplyDecoder(34, Recorded()).feed(u64(0x1234))


def test_daemon_version_and_negotiated_minor() -> None:
    hello = (DATA / "ok.daemon").read_bytes()[:16]
    assert daemon_version(hello) == 0x122
    assert negotiated_minor(0x11D, 0x122) == 29
    with pytest.raises(ProtocolError):
        daemon_version(b"\0" * 16)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=64), min_size=1, max_size=50))
def test_reply_decoder_gives_the_same_events_however_the_answer_is_cut(cuts: list[int]) -> None:
    data = (DATA / "ok.daemon").read_bytes()[REPLY_OFFSET:]
    whole = Recorded()
    ReplyDecoder(34, whole).feed(data)
    pieces = Recorded()
    decoder = ReplyDecoder(34, pieces)
    at, i = 0, 0
    while not decoder.done:
        size = cuts[i % len(cuts)]
        decoder.feed(data[at : at + size])
        at, i = at + size, i + 1
    assert (pieces.started, pieces.lines, pieces.results) == (whole.started, whole.lines, whole.results)
