"""Numbers and times as people read them: `1m 23s`, `1.2 GiB`, `2026-11-21 07:33:16 UTC`, `in 59 minutes`."""

from __future__ import annotations

from datetime import UTC, datetime

_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def duration(seconds: float) -> str:
    """`0s`, `0.4s`, `42s`, `1m 23s`, `2h 5m 0s`, `3d 4h 5m`: short, exact to the second past a minute."""
    if seconds < 0:
        raise ValueError("a duration cannot be negative")
    if seconds < 10 and round(seconds, 1) < 10:
        text = f"{seconds:.1f}".removesuffix(".0")
        return f"{text}s"
    total = int(seconds + 0.5)  # halves round up
    if total < 60:
        return f"{total}s"
    days, rest = divmod(total, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h {minutes}m"
    if hours:
        return f"{hours}h {minutes}m {secs}s"
    return f"{minutes}m {secs}s"


def size(num_bytes: float) -> str:
    """Binary units: `512 B`, `1.5 KiB`, `120 MiB`, `1.2 GiB`; three significant digits at most."""
    if num_bytes < 0:
        raise ValueError("a size cannot be negative")
    if num_bytes < 1024:
        return f"{int(num_bytes)} B"
    value = float(num_bytes)
    for unit in _UNITS:
        value /= 1024
        text = f"{value:.1f}" if value < 99.95 else f"{value:.0f}"
        if float(text) < 1024 or unit == _UNITS[-1]:
            return f"{text.removesuffix('.0')} {unit}"
    raise AssertionError("unreachable")


def count(number: int) -> str:
    """An integer with thousands separators: `1,234,567`."""
    return f"{number:,}"


def percent(fraction: float) -> str:
    """A share of 1 as a percentage: 0.873 → `87%`, 0.004 → `0.4%`."""
    value = fraction * 100
    if 0 < value < 10:
        return f"{value:.1f}".removesuffix(".0") + "%"
    return f"{round(value)}%"


def plural(number: int, word: str) -> str:
    return f"{count(number)} {word}{'' if number == 1 else 's'}"


def utc(moment: datetime) -> str:
    """`2026-11-21 07:33:16 UTC`: seconds precision, for reading; the exact value goes in a `datetime` attribute."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def rfc3339(moment: datetime) -> str:
    """The exact value, as the API writes it: `2026-11-21T07:33:16.069456Z`."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def relative(seconds: float) -> str:
    """A signed offset from now in words: 3540 → `in 59 minutes`, -7200 → `2 hours ago`."""
    amount = abs(seconds)
    if amount < 45:
        return "just now" if seconds <= 0 else "in a few seconds"
    # Each unit until the rounded amount would read as one of the next: 59 minutes, then 1 hour.
    for limit, unit, size_ in ((3_570, "minute", 60), (84_600, "hour", 3_600), (float("inf"), "day", 86_400)):
        if amount < limit:
            words = plural(max(1, int(amount / size_ + 0.5)), unit)  # halves round up
            return f"in {words}" if seconds > 0 else f"{words} ago"
    raise AssertionError("unreachable")
