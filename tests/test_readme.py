"""The README's examples run as printed against the demo a newcomer starts with `make demo`."""

from __future__ import annotations

import re
import shlex
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
_VARIABLE = re.compile(r"\$(\w+)|\$\{(\w+)\}")


def curl_lines(text: str) -> list[str]:
    """Every `curl` command in the README's shell blocks, as printed."""
    lines, inside = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            inside = line.strip() == "```sh"
            continue
        if inside and line.strip().startswith("curl "):
            lines.append(line.strip())
    return lines


def expand(text: str, values: dict[str, str]) -> str:
    return _VARIABLE.sub(lambda m: values[m[1] or m[2]], text)


def run_curl(line: str, values: dict[str, str]) -> httpx.Response:
    """A request as curl sends it: the URL byte for byte (curl sends non-ASCII and spaces raw), the -H headers,
    the method of -X and the body of --data-binary."""
    words = shlex.split(line)
    assert words[0] == "curl"
    headers, urls, method, body = {}, [], "GET", None
    rest = iter(words[1:])
    for word in rest:
        if word == "-H":
            name, _, value = expand(next(rest), values).partition(":")
            headers[name.strip()] = value.strip()
        elif word == "-X":
            method = next(rest)
        elif word == "--data-binary":
            body = next(rest).encode()
            method = "POST" if method == "GET" else method
        elif word == "-sS":
            continue
        elif word == "-o":
            next(rest)  # where curl saves the body; the test only reads it
        else:
            urls.append(expand(word, values))
    (url,) = urls
    assert url.isascii() and " " not in url, f"{url!r} breaks the request line"
    return httpx.request(method, url, headers=headers, content=body, timeout=30)


def has_data(value: Any) -> bool:
    """Whether an answer holds any figure, item or link: a non-empty list, a non-zero number or a `url`."""
    if isinstance(value, list):
        return bool(value)
    if isinstance(value, dict):
        return bool(value.get("url")) or any(has_data(v) for v in value.values())
    return isinstance(value, int | float) and not isinstance(value, bool) and value != 0


def assert_has_data(line: str, response: httpx.Response) -> None:
    """An example answers with data: builds, figures, a link or rows, never an empty list or only zeros."""
    if response.headers["content-type"].startswith("application/json"):
        assert has_data(response.json()), (line, response.text[:300])
    else:
        assert len(response.text.splitlines()) > 1, (line, response.text[:300])  # a header and rows


_WINDOW_EDGE = re.compile(r"[?&](\w*?)(from|to)=(\d{4}-\d\d-\d\d)")


def within_the_demo(line: str, days: int = 30) -> bool:
    """Whether the dates an example names leave any of the demo's data in its window (the demo's data ends now
    and spans the sample's days, so an example's fixed dates hold data only while they are that recent)."""
    today = datetime.now(UTC).date()
    for _, edge, day in _WINDOW_EDGE.findall(line):
        moment = date.fromisoformat(day)
        if (edge == "to" and moment <= today - timedelta(days=days)) or (edge == "from" and moment > today):
            return False
    return True


def test_the_readme_sets_base_and_header_as_the_examples_use_them():
    text = README.read_text()
    assert "BASE=http://127.0.0.1:8000\n" in text
    assert 'H="Authorization: Bearer $TOKEN"\n' in text
    assert "…" not in "".join(curl_lines(text))


@pytest.mark.parametrize("line", curl_lines(README.read_text()))
def test_readme_example_runs_against_the_demo(demo, line):
    values = {"BASE": demo.url, "TOKEN": demo.tokens["acme"], "WRITE_TOKEN": demo.write_token}
    values["H"] = f"Authorization: Bearer {values['TOKEN']}"
    response = run_curl(line, values)
    assert 200 <= response.status_code < 300, (line, response.status_code, response.text[:300])
    if "/healthz" not in line and within_the_demo(line):
        assert_has_data(line, response)


def test_the_lines_the_demo_prints_run_as_printed(demo):
    printed = [line.strip() for line in demo.output.splitlines() if line.strip().startswith("curl ")]
    assert printed
    values = {"TOKEN": demo.tokens["acme"]}
    for line in printed:
        response = run_curl(line, values)
        assert 200 <= response.status_code < 300, (line, response.status_code)
        assert_has_data(line, response)
