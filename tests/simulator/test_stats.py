"""Tests of gateway.simulator.stats: how attempts fold into counters."""

from __future__ import annotations

from gateway.simulator.stats import MAX_ATTEMPTS, EndpointStats


def test_outcomes_fold_into_counters() -> None:
    stats = EndpointStats()
    for outcome, cancelled, tokens in [
        ("ok", False, 5),
        ("malformed", False, 5),
        ("cancelled", True, 2),
        ("hung", True, 0),
        ("rate_limited", False, 0),
        ("error_event", False, 0),
        ("bad_request", False, 0),
        ("dropped", False, 3),
    ]:
        attempt = stats.begin(1.0)
        attempt.outcome, attempt.cancelled, attempt.tokens = outcome, cancelled, tokens
        stats.finish(attempt, 0.25)
    stats.saw_active(3)
    stats.saw_active(1)
    out = stats.as_dict(active=0)
    assert {
        k: out[k] for k in ("requests", "completed", "cancelled", "errors", "rate_limited", "tokens")
    } == {
        "requests": 8,
        "completed": 2,
        "cancelled": 2,
        "errors": 2,
        "rate_limited": 1,
        "tokens": 15,
    }
    assert out["max_active"] == 3 and out["active"] == 0
    assert out["outcomes"]["hung"] == 1
    assert out["attempts"][0]["duration_ms"] == 250.0
    assert "attempts" not in stats.as_dict(active=0, attempts=False)
    stats.clear()
    assert stats.as_dict(active=0)["requests"] == 0


def test_attempts_are_bounded() -> None:
    stats = EndpointStats()
    for i in range(MAX_ATTEMPTS + 5):
        stats.begin(float(i))
    attempts = stats.as_dict(active=0)["attempts"]
    assert len(attempts) == MAX_ATTEMPTS and attempts[0]["t"] == 5.0
    assert stats.counters["requests"] == MAX_ATTEMPTS + 5


def test_requests_started_before_a_reset_are_not_counted_after_it() -> None:
    stats = EndpointStats()
    old = stats.begin(1.0)
    stats.clear()
    old.outcome, old.cancelled = "hung", True
    stats.finish(old, 1.0)
    assert stats.as_dict(active=0)["cancelled"] == 0
    new = stats.begin(2.0)
    new.outcome = "ok"
    stats.finish(new, 1.0)
    out = stats.as_dict(active=0)
    assert out["completed"] == 1 and "_epoch" not in out["attempts"][0]
