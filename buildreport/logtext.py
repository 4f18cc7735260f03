"""Log text for the build page and raw log: inflated a bounded piece at a time, never whole.

The raw log streams as it inflates; the page keeps only a window of the last lines (`LineWindow`)
and renders them as escaped HTML with their numbers and colours.
"""

from __future__ import annotations

import zlib
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from markupsafe import Markup

from buildreport import ansi

# How much log the page shows: all of a log up to FULL_LOG_BYTES (within PAGE_LINES lines), else the last
# TAIL_LINES lines; never more than PAGE_BYTES of text, and no line longer than LINE_BYTES.
FULL_LOG_BYTES = 1024 * 1024
PAGE_LINES = 20_000
TAIL_LINES = 2_000
PAGE_BYTES = 1024 * 1024
LINE_BYTES = 8 * 1024
EXCERPT_LINES = 10  # the end of the log, at the top of the page of a build that ended badly
INFLATE_IN = 64 * 1024  # compressed bytes fed at a time
INFLATE_OUT = 256 * 1024  # most inflated bytes produced at a time

def inflate(blob: bytes, inflater: zlib._Decompress | None = None) -> Iterator[bytes]:
    """The inflated bytes of a zlib blob, at most INFLATE_OUT at a time."""
    inflater = inflater or zlib.decompressobj()
    view = memoryview(blob)
    for start in range(0, len(view), INFLATE_IN):
        data: bytes | memoryview = view[start : start + INFLATE_IN]
        while data:
            out = inflater.decompress(data, INFLATE_OUT)
            if out:
                yield out
            data = inflater.unconsumed_tail
    rest = inflater.flush()
    if rest:
        yield rest


def check_inflates(blob: bytes) -> None:
    """Raise zlib.error unless the blob inflates whole and its checksum holds (the text is discarded)."""
    inflater = zlib.decompressobj()
    for _ in inflate(blob, inflater):
        pass
    if not inflater.eof:
        raise zlib.error("the compressed log ends early")


class LineWindow:
    """The last lines of a text fed in pieces, within a number of lines and, optionally, of bytes.

    Lines end at `\\n`. `line_bytes` cuts long lines short (their full length is kept) and bounds what
    an unfinished line may hold; without it, lines are kept exactly.
    """

    def __init__(self, max_lines: int, max_bytes: int | None = None, line_bytes: int | None = None) -> None:
        self.max_lines = max_lines
        self.max_bytes = max_bytes
        self.line_bytes = line_bytes
        self.lines: deque[tuple[bytes, int]] = deque()  # (text kept, full length)
        self.total = 0  # lines seen
        self.kept_bytes = 0
        self._partial: list[bytes] = []
        self._partial_len = 0
        self._closed = False
        self.ends_with_newline = False

    def feed(self, chunk: bytes) -> None:
        pieces = chunk.split(b"\n")
        if len(pieces) > 1:
            self._partial.append(pieces[0])
            self._push(b"".join(self._partial), self._partial_len + len(pieces[0]))
            self._partial, self._partial_len = [], 0
            middle = pieces[1:-1]
            if len(middle) > self.max_lines:  # only the last of them can stay
                self.total += len(middle) - self.max_lines
                middle = middle[-self.max_lines :]
            for line in middle:
                self._push(line, len(line))
        self._grow(pieces[-1])

    def close(self) -> LineWindow:
        if not self._closed:
            self._closed = True
            if self._partial_len:
                self._push(b"".join(self._partial), self._partial_len)
                self.ends_with_newline = False
            else:
                self.ends_with_newline = self.total > 0
        return self

    @property
    def first_number(self) -> int:
        """The 1-based number of the first line kept."""
        return self.total - len(self.lines) + 1

    def _grow(self, piece: bytes) -> None:
        if not piece:
            return
        room = len(piece) if self.line_bytes is None else max(0, self.line_bytes - self._partial_len)
        if room:
            self._partial.append(piece[:room])
        self._partial_len += len(piece)

    def _push(self, line: bytes, length: int) -> None:
        if self.line_bytes is not None and len(line) > self.line_bytes:
            line = line[: self.line_bytes]
        self.total += 1
        self.lines.append((line, length))
        self.kept_bytes += len(line)
        while len(self.lines) > self.max_lines or (
            self.max_bytes is not None and self.kept_bytes > self.max_bytes and len(self.lines) > 1
        ):
            self.kept_bytes -= len(self.lines.popleft()[0])


def window(chunks: Iterable[bytes], max_lines: int, max_bytes: int | None = None,
           line_bytes: int | None = None) -> LineWindow:
    lines = LineWindow(max_lines, max_bytes, line_bytes)
    for chunk in chunks:
        lines.feed(chunk)
    return lines.close()


def tail_bytes(lines: LineWindow, piece: int = INFLATE_OUT) -> Iterator[bytes]:
    """The text of a window's lines as it was, in pieces of about `piece` bytes."""
    batch: list[bytes] = []
    size = 0
    last = len(lines.lines) - 1
    for i, (line, _) in enumerate(lines.lines):
        batch.append(line + b"\n" if i < last or lines.ends_with_newline else line)
        size += len(line) + 1
        if size >= piece:
            yield b"".join(batch)
            batch, size = [], 0
    if batch:
        yield b"".join(batch)


@dataclass(frozen=True)
class LogLine:
    number: int
    html: Markup
    cut: int  # bytes left out of a long line, 0 when whole


@dataclass(frozen=True)
class LogView:
    size_bytes: int
    total_lines: int
    lines: list[LogLine]

    @property
    def complete(self) -> bool:
        return not self.lines or self.lines[0].number == 1

    @property
    def gutter(self) -> int:
        """Digits of the biggest line number: the width of the number column."""
        return min(9, max(3, len(str(self.total_lines))))

    @property
    def excerpt(self) -> list[LogLine]:
        """The last lines, for the top of the page of a build that ended badly: where it says why."""
        end = len(self.lines)
        while end and not self.lines[end - 1].html.strip():
            end -= 1
        return self.lines[max(0, end - EXCERPT_LINES) : end]

    @property
    def any_cut(self) -> bool:
        return any(line.cut for line in self.lines)


def render_log(blob: bytes, size_bytes: int) -> LogView:
    """The window of a stored log the page shows, as escaped HTML lines with their numbers."""
    limit = PAGE_LINES if size_bytes <= FULL_LOG_BYTES else TAIL_LINES
    lines = window(inflate(blob), limit, PAGE_BYTES, LINE_BYTES)
    style = ansi.Style()
    out = []
    for number, (raw, length) in enumerate(lines.lines, start=lines.first_number):
        text = raw.decode("utf-8", "replace")
        if "\r" in text:  # a carriage return redraws the line: show what a terminal would end with
            *drawn_over, text = text.rstrip("\r").split("\r")
            for segment in drawn_over:
                ansi.to_html(segment, style)  # colours set there still apply
        out.append(LogLine(number, ansi.to_html(text, style), length - len(raw)))
    return LogView(size_bytes=size_bytes, total_lines=lines.total, lines=out)
