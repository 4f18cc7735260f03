"""Log lines show request values escaped: a request can neither forge a line nor write terminal escapes."""

from __future__ import annotations

import logging
import sys

import httpx
import pytest
from conftest import auth, record

from buildreport.http.envelope import EscapingFormatter, printable, without_controls

NASTY = ["/builds/%0a2026-01-01 INFO forged line", "/%1b[31mred%1b[0m", "/x%0d%0aSet: y", "/%e2%80%a8sep", "/%c2%9b2J"]


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("a\nb", "a\\nb"),
        ("\x1b[31m", "\\x1b[31m"),
        ("\r\t\x00\x7f", "\\r\\t\\x00\\x7f"),
        ("\x9b", "\\x9b"),
        ("\u2028\u202e", "\\u2028\\u202e"),
        ('say "hi" \\ bye', 'say \\"hi\\" \\\\ bye'),
        ("/builds/1 plain é", "/builds/1 plain é"),
    ],
)
def test_printable_escapes_controls_quotes_and_backslashes(raw, shown):
    assert printable(raw) == shown


def test_every_log_message_has_its_controls_escaped():
    formatter = EscapingFormatter("%(levelname)s %(message)s")
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "value %s", ("a\nINFO forged\x1b[2J",), None)
    assert formatter.format(record) == "INFO value a\\nINFO forged\\x1b[2J"
    try:
        raise ValueError("bad\x1bvalue")
    except ValueError:
        failed = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    text = formatter.format(failed)
    assert "\x1b" not in text and "bad\\x1bvalue" in text and "Traceback" in text
    assert without_controls("line\nbreak") == "line\\nbreak"


@pytest.mark.parametrize("path", NASTY)
def test_access_log_escapes_the_request_path(env, caplog, path):
    env.load([record(1)])
    with env.client() as client, caplog.at_level(logging.INFO, logger="buildreport.access"):
        client.get(path, headers=auth(env.token()))
    (line,) = [r.getMessage() for r in caplog.records if r.name == "buildreport.access"]
    assert line.isprintable(), line
    assert "\\x" in line or "\\n" in line or "\\r" in line or "\\u" in line


def test_a_real_server_log_has_one_line_per_request_whatever_the_path(env, serve):
    env.load([record(1)])
    server = serve(env.db)
    for path in NASTY:
        httpx.get(server.url + path, timeout=10)
    httpx.get(server.url + "/healthz", timeout=10)
    server.stop()
    text = server.log.read_text(errors="replace")
    assert "\x1b" not in text and "\u2028" not in text and "\x9b" not in text
    for line in text.splitlines():
        assert "forged line" not in line or '"GET /builds/\\n2026' in line, line
        assert not line.startswith(("2026-01-01 INFO forged", "Set: y"))
    assert text.count("forged line") == 1
