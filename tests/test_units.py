"""Durations in findings are tokens that reports phrase in the reader's unit."""

from distprof.units import duration, phrase, readable


def test_tokens_keep_the_exact_value_and_take_the_readers_unit():
    message = f"exposed communication {duration(343_400_000)} on rank 2, gap {duration(15_000)}"
    assert phrase(message) == "exposed communication 343.4 ms on rank 2, gap 15.0 us"
    assert phrase(message, "us") == "exposed communication 343400.00 us on rank 2, gap 15.00 us"
    assert phrase(message, "s") == "exposed communication 0.34 s on rank 2, gap 0.00 s"
    assert phrase("no tokens here", "ms") == "no tokens here"


def test_readable_units():
    assert [readable(v) for v in (80, 15_000, 45_300_000, 1_200_000_000)] == ["80 ns", "15.0 us", "45.3 ms", "1.20 s"]
