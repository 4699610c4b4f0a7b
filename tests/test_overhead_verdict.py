"""`make bench`'s verdict (benchmarks/overhead.py): a comparison of two rows is judged round by round,
each round's pair having been measured back to back, not by the two rows' own medians."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from benchmarks.overhead import (
    BASELINE,
    Row,
    cpu_ratio,
    median_row,
    p50_over,
    paired,
    rows_ratio,
    verdict,
    write_catalogue,
)


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


def _passthrough_rows(baseline_cpu: float | None) -> list[Row]:
    """A run's rows at c=8 JSON: the reference, today's chat at 500 µs, a Messages pass-through at 550,
    and (unless None) chat on the gateway of when issue 30 was filed."""
    rows = [cell("reference", [200] * 3, [1.0] * 3), cell("reference", [200] * 3, [1.0] * 3, "messages"),
            cell("gateway w=1", [500] * 3, [2.0] * 3), cell("gateway w=1", [550] * 3, [2.0] * 3, "messages")]
    if baseline_cpu is not None:
        rows.append(cell(BASELINE, [baseline_cpu] * 3, [2.0] * 3))
    return rows


def test_a_pass_through_path_is_judged_against_chat_as_it_was_when_issue_30_was_filed(capsys: Any) -> None:
    assert verdict(_passthrough_rows(baseline_cpu=600), {}) == 0  # 550 against 600: under it
    line = next(x for x in capsys.readouterr().out.splitlines() if "msg json" in x and "chat's" in x)
    assert line.startswith("PASS") and "0.92x chat's when issue 30 was filed" in line and "1.10x today's chat" in line
    assert verdict(_passthrough_rows(baseline_cpu=500), {}) == 1  # 550 against 500: over it
    assert any(x.startswith("FAIL") and "1.10x chat's when issue 30 was filed" in x
               for x in capsys.readouterr().out.splitlines())


def test_without_that_baseline_the_pass_through_target_fails_and_says_why(capsys: Any) -> None:
    assert verdict(_passthrough_rows(baseline_cpu=None), {}) == 1
    assert any(x.startswith("FAIL") and f"no {BASELINE}" in x for x in capsys.readouterr().out.splitlines())


def test_the_baselines_catalogue_holds_the_chat_provider_alone(tmp_path: Any) -> None:
    catalogue = yaml.safe_load(write_catalogue(9, "p", chat_only=True).read_text())
    assert list(catalogue["providers"]) == ["stub"]
    assert {e["provider"] for m in catalogue["models"].values() for e in m["endpoints"]} == {"stub"}
    assert "bench" in catalogue["models"]


def test_the_full_gateways_rows_together_are_judged_round_by_round() -> None:
    # The paced cell is most of the sum. Rounds 1 and 2: full 10% over plain (round 2 a slow spell for
    # both); round 3: a spell that hit the full gateway's turn alone. The rows' medians pair the full
    # gateway's slow round 2 with the plain one's fast round 3.
    plain = [cell("gateway w=1", [2500, 4200, 2600], [1.0] * 3), cell("gateway w=1", [400, 400, 400], [1.0] * 3)]
    full = [cell("gateway full", [2750, 4620, 4700], [1.0] * 3), cell("gateway full", [440, 440, 440], [1.0] * 3)]
    pairs = list(zip(full, plain, strict=True))
    medians = sum(f.cpu_us or 0 for f, _ in pairs) / sum(p.cpu_us or 0 for _, p in pairs)
    assert medians == pytest.approx((4620 + 440) / (2600 + 400))  # 1.69
    assert rows_ratio(pairs) == pytest.approx(1.1)  # rounds: 1.1, 1.1, 1.71
    once = [(Row("f", False, 1, 1.0, 2.0, 1.0, 330.0, 0), Row("p", False, 1, 1.0, 2.0, 1.0, 300.0, 0))]
    assert rows_ratio(once) == pytest.approx(1.1)  # rows measured once: their own figures
