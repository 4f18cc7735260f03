from datetime import UTC, datetime, timedelta, timezone

import pytest

from buildreport.http import humanize


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (0.04, "0s"),
        (0.4, "0.4s"),
        (1, "1s"),
        (1.25, "1.2s"),
        (9.94, "9.9s"),
        (9.96, "10s"),
        (42.4, "42s"),
        (59.4, "59s"),
        (59.6, "1m 0s"),
        (83, "1m 23s"),
        (3_599, "59m 59s"),
        (3_600, "1h 0m 0s"),
        (7_384, "2h 3m 4s"),
        (86_399, "23h 59m 59s"),
        (86_400, "1d 0h 0m"),
        (3 * 86_400 + 4 * 3_600 + 5 * 60 + 6, "3d 4h 5m"),
    ],
)
def test_duration(seconds, text):
    assert humanize.duration(seconds) == text


@pytest.mark.parametrize(
    ("num_bytes", "text"),
    [
        (0, "0 B"),
        (1, "1 B"),
        (1023, "1023 B"),
        (1024, "1 KiB"),
        (1536, "1.5 KiB"),
        (123_456, "121 KiB"),
        (1024 * 1024 - 1, "1 MiB"),  # rounds up into the next unit, never "1024 KiB"
        (50 * 1024 * 1024, "50 MiB"),
        (8192 * 1024 * 1024, "8 GiB"),
        (int(1.2 * 1024**3), "1.2 GiB"),
        (int(99.94 * 1024**3), "99.9 GiB"),
        (int(99.96 * 1024**3), "100 GiB"),
        (3 * 1024**4, "3 TiB"),
        (2 * 1024**7, "2048 EiB"),
    ],
)
def test_size(num_bytes, text):
    assert humanize.size(num_bytes) == text


@pytest.mark.parametrize("bad", [-1, -0.5])
def test_negative_values_are_refused(bad):
    with pytest.raises(ValueError):
        humanize.size(bad)
    with pytest.raises(ValueError):
        humanize.duration(bad)


@pytest.mark.parametrize(
    ("fraction", "text"), [(0, "0%"), (0.004, "0.4%"), (0.05, "5%"), (0.873, "87%"), (1, "100%"), (1.5, "150%")]
)
def test_percent(fraction, text):
    assert humanize.percent(fraction) == text


@pytest.mark.parametrize(
    ("number", "word", "text"), [(0, "line", "0 lines"), (1, "line", "1 line"), (12_345, "line", "12,345 lines")]
)
def test_plural(number, word, text):
    assert humanize.plural(number, word) == text


@pytest.mark.parametrize(
    ("moment", "readable", "exact"),
    [
        (
            datetime(2026, 11, 21, 7, 33, 16, 69456, tzinfo=UTC),
            "2026-11-21 07:33:16 UTC",
            "2026-11-21T07:33:16.069456Z",
        ),
        (datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), "2026-01-02 03:04:05 UTC", "2026-01-02T03:04:05Z"),
        (  # another offset is shown in UTC
            datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=2))),
            "2026-01-02 01:04:05 UTC",
            "2026-01-02T01:04:05Z",
        ),
    ],
)
def test_times(moment, readable, exact):
    assert humanize.utc(moment) == readable
    assert humanize.rfc3339(moment) == exact


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "just now"),
        (-30, "just now"),
        (30, "in a few seconds"),
        (60, "in 1 minute"),
        (-150, "3 minutes ago"),
        (3_540, "in 59 minutes"),
        (3_599, "in 1 hour"),
        (-7_200, "2 hours ago"),
        (23 * 3_600, "in 23 hours"),
        (86_400, "in 1 day"),
        (-10 * 86_400, "10 days ago"),
    ],
)
def test_relative(seconds, text):
    assert humanize.relative(seconds) == text
