"""`make bench`'s verdict (benchmarks/overhead.py): a comparison of two rows is judged round by round,
each round's pair having been measured back to back, not by the two rows' own medians."""

from __future__ import annotations

from benchmarks.overhead import Row, cpu_ratio, median_row, p50_over, paired


def cell(target: str, cpus: list[float], p50s: list[float], api: str = "chat") -> Row:
    return median_row([Row(target, False, 8, p, 2 * p, 1000.0, c, 0, api=api) for c, p in zip(cpus, p50s, strict=True)])


def test_a_slow_spell_hits_both_sides_of_a_pair() -> None:
    # Round 2 was a slow spell for both; chat's median round is a fast one, messages' the slow one.
    chat = cell("gateway w=1", [500, 900, 520], [1.0, 1.8, 1.04])
    messages = cell("gateway w=1", [480, 880, 930], [1.0, 1.7, 1.9], api="messages")
    assert cpu_ratio(messages, chat) > 1.6  # the medians compared: 880 against 520
    assert paired(messages, chat, cpu_ratio) < 1.0  # each round: 0.96, 0.98, 1.79
    assert abs(paired(messages, chat, p50_over) - 0.0) < 1e-9  # 0.0, -0.1, 0.86


def test_a_row_measured_once_is_its_own_pair() -> None:
    a, b = Row("a", False, 1, 1.5, 3.0, 1.0, 300.0, 0), Row("b", False, 1, 1.0, 2.0, 1.0, 200.0, 0)
    assert paired(a, b, cpu_ratio) == 1.5 and paired(a, b, p50_over) == 0.5
