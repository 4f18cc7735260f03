import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from buildreport import ansi

ESC = "\x1b"


@pytest.mark.parametrize(
    ("text", "html"),
    [
        ("plain text", "plain text"),
        ("", ""),
        ("<script>alert(1)</script> & 'q' \"", "&lt;script&gt;alert(1)&lt;/script&gt; &amp; 'q' \""),
        (f"{ESC}[31mred{ESC}[0m plain", '<span class="a31">red</span> plain'),
        (f"{ESC}[1mbold{ESC}[22m not", '<span class="ab">bold</span> not'),
        (f"{ESC}[1;32mok{ESC}[m", '<span class="a32 ab">ok</span>'),
        (f"{ESC}[01;31m{ESC}[Kerror: {ESC}[m{ESC}[Kmsg", '<span class="a31 ab">error: </span>msg'),  # gcc
        (f"{ESC}[91mbright{ESC}[39m default", '<span class="a91">bright</span> default'),
        (f"{ESC}[30mk{ESC}[37mw{ESC}[90mK{ESC}[97mW", '<span class="a30">k</span><span class="a37">w</span>'
         '<span class="a90">K</span><span class="a97">W</span>'),
        (f"{ESC}[31m{ESC}[32mgreen", '<span class="a32">green</span>'),  # no empty span for a colour unused
        (f"{ESC}[31m<b>{ESC}[0m", '<span class="a31">&lt;b&gt;</span>'),
        # Everything else is stripped, never shown.
        (f"{ESC}[41mbg{ESC}[4m under{ESC}[3m it", "bg under it"),
        (f"{ESC}[38;5;196mx{ESC}[38;2;1;2;3my{ESC}[48;5;21mz", "xyz"),  # their arguments are not codes
        (f"{ESC}[38;5;1;31mx", '<span class="a31">x</span>'),  # a code after an extended colour still counts
        (f"{ESC}[38:5:196mx", "x"),
        (f"{ESC}[2K{ESC}[1G{ESC}[?25lcursor{ESC}[?25h", "cursor"),
        (f"{ESC}]0;window title\x07text", "text"),
        (f"{ESC}]8;;https://example.com{ESC}\\link{ESC}]8;;{ESC}\\", "link"),
        (f"{ESC}(Bcharset{ESC}=", "charset"),
        (f"{ESC}[>4;2mkeys", "keys"),  # private-marker sequences are not SGR
        ("bell\x07 back\x08space\x00nul\x7fdel", "bell backspacenuldel"),
        ("tab\tkept", "tab\tkept"),
        (f"cut off at the end{ESC}", "cut off at the end"),
        (f"cut off at the end{ESC}[3", "cut off at the end"),
        ("\x9b31mC1 csi", '<span class="a31">C1 csi</span>'),
    ],
)
def test_to_html(text, html):
    assert ansi.to_html(text) == html


def test_style_carries_across_lines():
    style = ansi.Style()
    assert ansi.to_html(f"{ESC}[1;33mwarning: first", style) == '<span class="a33 ab">warning: first</span>'
    assert style == ansi.Style(33, True)
    assert ansi.to_html("second", style) == '<span class="a33 ab">second</span>'
    assert ansi.to_html(f"{ESC}[0mthird", style) == "third"
    assert style == ansi.Style()


@pytest.mark.parametrize(
    ("text", "stripped"),
    [(f"{ESC}[1;31merror{ESC}[0m: x", "error: x"), (f"a{ESC}]0;t\x07b\x1bc", "ab"), ("ok\tfine", "ok\tfine")],
)
def test_strip(text, stripped):
    assert ansi.strip(text) == stripped


@given(st.text(alphabet=st.sampled_from(["\x1b", "[", "]", "m", ";", "3", "1", "9", "<", "&", "a", "\x07", "\\"])))
def test_no_control_character_or_markup_gets_through(text):
    html = str(ansi.to_html(text))
    assert "\x1b" not in html and "\x07" not in html
    assert "<" not in re.sub(r'<span class="(?:a(?:3[0-7]|9[0-7])(?: ab)?|ab)">|</span>', "", html)
