"""The worker-protocol decoders, on bytes captured from a real ssh-ng session with Nix 2.8 and on the
bytes Nix's own serialisers write for each protocol version (tests/data/nix_worker_protocol)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from buildreport.record.protocol import (
    FEATURE_REALISATION_WITH_PATH,
    STDERR_ERROR,
    STDERR_LAST,
    STDERR_NEXT,
    BuildRequest,
    BuildResult,
    BuildResultStatus,
    ClientScanner,
    DaemonError,
    ProtocolError,
    ReplyDecoder,
    ReplyEvents,
)

DATA = Path(__file__).parent / "data" / "nix_session"
NIX_DATA = Path(__file__).parent / "data" / "nix_worker_protocol"
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


def nix_build_results(name: str, minor: int, features: frozenset[str] = frozenset()) -> list[BuildResult]:
    """Every BuildResult in one of Nix's data files, read as the answer to a wopBuildDerivation."""
    data = (NIX_DATA / f"{name}.bin").read_bytes()
    results: list[BuildResult] = []
    while data:
        events = Recorded()
        decoder = ReplyDecoder(minor, events, features=features)
        left = decoder.feed(u64(STDERR_LAST) + data)
        assert decoder.done
        [result] = events.results
        assert isinstance(result, BuildResult)
        results.append(result)
        data = data[len(data) - left :] if left else b""
    return results


def expected_results(name: str) -> list[dict[str, object]]:
    return json.loads((NIX_DATA / f"{name}.json").read_text())


@pytest.mark.parametrize(
    ("name", "minor"),
    [("build-result-1.27", 27), ("build-result-1.28", 28), ("build-result-1.29", 29), ("build-result-1.37", 37)],
)
def test_build_results_of_each_protocol_version_decode_as_nix_describes_them(name: str, minor: int) -> None:
    results = nix_build_results(name, minor)
    expected = expected_results(name)
    assert len(results) == len(expected) == 3
    for result, want in zip(results, expected, strict=True):
        assert BuildResultStatus(result.status).name == want["status"]
        assert result.error_msg == want.get("errorMsg", "")
        if minor >= 29:
            assert (result.times_built, result.start_time, result.stop_time) == (
                want["timesBuilt"],
                want["startTime"],
                want["stopTime"],
            )
            assert result.is_non_deterministic == want.get("isNonDeterministic", False)
        else:
            assert result.start_time is None and result.times_built is None
        outputs = want.get("builtOutputs", {}) if minor >= 28 else {}
        assert result.built_outputs == {k: f"/nix/store/{v['outPath']}" for k, v in outputs.items()}
        assert (result.cpu_user_us, result.cpu_system_us) == (want.get("cpuUser"), want.get("cpuSystem"))


def test_build_result_from_1_37_gives_the_builds_own_cpu_time() -> None:
    *_, built = nix_build_results("build-result-1.37", 37)
    assert (built.cpu_user_us, built.cpu_system_us) == (500_000_000, 604_000_000)
    assert built.cpu_seconds == pytest.approx(1104.0)
    assert sorted(built.built_outputs) == ["bar", "foo"]


def test_build_results_of_1_37_read_as_an_older_version_do_not_decode() -> None:
    # What a decoder that ignores the CPU fields meets: an optional tag taken for the output count.
    with pytest.raises(ProtocolError):
        nix_build_results("build-result-1.37", 29)


def test_build_results_with_the_feature_realisation_with_path_name_their_outputs() -> None:
    name = "build-result-realisation-with-path-not-hash"
    results = nix_build_results(name, 38, frozenset({FEATURE_REALISATION_WITH_PATH}))
    for result, want in zip(results, expected_results(name), strict=True):
        outputs = want.get("builtOutputs", {})
        assert result.built_outputs == {k: f"/nix/store/{v['outPath']}" for k, v in outputs.items()}
        assert (result.cpu_user_us, result.cpu_system_us) == (want.get("cpuUser"), want.get("cpuSystem"))


def test_build_results_written_for_older_clients_by_newer_nix_decode() -> None:
    results = nix_build_results("build-result-1.29-compat", 29)
    assert [BuildResultStatus(r.status).name for r in results] == [
        w["status"] for w in expected_results("build-result-1.29-compat")
    ]
    assert sorted(results[-1].built_outputs) == ["bar", "foo"]


def test_a_cpu_time_with_a_bad_optional_tag_fails_at_its_offset() -> None:
    body = u64(0) + string("") + u64(1) + u64(0) + u64(10) + u64(20) + u64(7)
    with pytest.raises(ProtocolError, match="bad optional tag 7") as caught:
        ReplyDecoder(37, Recorded(), base=1000).feed(u64(STDERR_LAST) + body)
    assert caught.value.offset == 1000 + 8 + len(body) - 8


def test_an_unknown_message_fails_at_its_offset_in_the_stream() -> None:
    with pytest.raises(ProtocolError) as caught:
        ReplyDecoder(34, Recorded(), base=64).feed(u64(STDERR_NEXT) + string("hi") + u64(0x1234))
    assert caught.value.offset == 64 + 8 + 16
