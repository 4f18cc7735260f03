"""Terminal text to escaped HTML: SGR colours and bold become `<span class>`, every other control is dropped.

Kept: foreground colours 30-37 (class `a30`…`a37`), bright 90-97 (`a90`…`a97`) and bold (`ab`).
Dropped: every other escape sequence (cursor moves, erase, OSC titles and hyperlinks, 256-colour and RGB
colours, backgrounds, …), every other control character but the tab, and the bidirectional controls
(U+202A to U+202E, U+2066 to U+2069). `strip` does the same to a plain value every page shows. The style
carries from one line to the next, as in a terminal, so a caller renders a log line by line through one
`Style`.
"""

from __future__ import annotations

import re
from html import escape

from markupsafe import Markup

# CSI (ESC [ or the 8-bit U+009B), its parameters and its final byte; an OSC string up to BEL or ST;
# any other escape; then control characters and bidirectional embeddings, overrides and isolates (which
# could show text in another order than it is stored) on their own. A sequence cut off at the end of a line
# is dropped.
_TOKEN = re.compile(
    r"(?:\x1b\[|\x9b)(?P<params>[0-?]*)[ -/]*(?P<final>[@-~])?"
    r"|(?:\x1b\]|\x9d)[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[ -/]*[0-~]?"
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]"
)

_FOREGROUND = frozenset(range(30, 38)) | frozenset(range(90, 98))
_PRIVATE = frozenset("<=>?")  # `ESC [ > 4 ; 2 m` and the like are not SGR


class Style:
    """What the SGR codes seen so far have turned on: a foreground colour and bold."""

    __slots__ = ("bold", "fg")

    def __init__(self, fg: int | None = None, bold: bool = False) -> None:
        self.fg = fg
        self.bold = bold

    def classes(self) -> str:
        names = [f"a{self.fg}"] if self.fg is not None else []
        if self.bold:
            names.append("ab")
        return " ".join(names)

    def apply(self, params: str) -> None:
        """One SGR sequence's parameters, e.g. `01;31`; an empty list is a reset."""
        codes = params.split(";") if params else ["0"]
        i = 0
        while i < len(codes):
            code = codes[i]
            i += 1
            if not code.isdigit():  # colon sub-parameters (`38:5:1`) and junk: nothing we show
                continue
            number = int(code)
            if number == 0:
                self.fg, self.bold = None, False
            elif number == 1:
                self.bold = True
            elif number == 22:
                self.bold = False
            elif number in _FOREGROUND:
                self.fg = number
            elif number == 39:
                self.fg = None
            elif number in (38, 48, 58) and i < len(codes):  # extended colours: skip their arguments
                i += {"5": 2, "2": 4}.get(codes[i], 1)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Style) and (self.fg, self.bold) == (other.fg, other.bold)

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"Style(fg={self.fg!r}, bold={self.bold!r})"


def strip(text: str) -> str:
    """The text without any escape sequence or control character but the tab."""
    return _TOKEN.sub("", text)


def to_html(text: str, style: Style | None = None) -> Markup:
    """One line as escaped HTML; `style` is the state the line starts in and is updated to where it ends."""
    style = style if style is not None else Style()
    out: list[str] = []
    pending: list[str] = []  # text in the current style

    def flush() -> None:
        if pending:
            chunk = escape("".join(pending), quote=False)
            classes = style.classes()
            out.append(f'<span class="{classes}">{chunk}</span>' if classes else chunk)
            pending.clear()

    position = 0
    for match in _TOKEN.finditer(text):
        if match.start() > position:
            pending.append(text[position : match.start()])
        position = match.end()
        params = match["params"]
        if match["final"] == "m" and params[:1] not in _PRIVATE:
            after = Style(style.fg, style.bold)
            after.apply(params)
            if after != style:
                flush()
                style.fg, style.bold = after.fg, after.bold
    if position < len(text):
        pending.append(text[position:])
    flush()
    return Markup("".join(out))
