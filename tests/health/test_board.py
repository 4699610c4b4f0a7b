"""The health board: breaker open / half-open / closed, cool-downs, SLO demotion, misconfiguration."""

from __future__ import annotations

import time
from pathlib import Path

from gateway.health.board import BreakerSettings, HealthBoard
from gateway.telemetry.sample import AttemptSample, Outcome
from tests.routing.helpers import catalogue, endpoint


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def sample(key: str, outcome: Outcome, ttft_s: float = 0.1) -> AttemptSample:
    return AttemptSample(key, 0.0, outcome, 200, ttft_s if outcome is Outcome.OK else None, None, 100.0, 1.0)


def test_breaker_opens_probes_and_closes(tmp_path: Path) -> None:
    e = catalogue(tmp_path, [endpoint("a")]).models["m"][0]
    clock = Clock()
    board = HealthBoard(BreakerSettings(failure_threshold=3, open_s=10), clock)
    for _ in range(3):
        assert board.blocked(e) is None
        board.observe(e, sample(e.key, Outcome.SERVER_ERROR))
    assert board.blocked(e) == "circuit_open"
    clock.now += 10.5
    assert board.blocked(e) is None  # the probe
    assert board.blocked(e) == "circuit_open"  # one probe at a time
    board.observe(e, sample(e.key, Outcome.SERVER_ERROR))
    assert board.blocked(e) == "circuit_open"  # failed probe: open again
    clock.now += 10.5
    assert board.blocked(e) is None
    board.observe(e, sample(e.key, Outcome.OK))
    assert board.blocked(e) is None and board.blocked(e) is None and not board.is_open(e)


def test_cooldown_and_misconfigured(tmp_path: Path) -> None:
    e = catalogue(tmp_path, [endpoint("a")]).models["m"][0]
    clock = Clock()
    board = HealthBoard(clock=clock)
    board.cool_down(e, 2.0)
    assert board.blocked(e) == "cooldown"
    clock.now += 2.1
    assert board.blocked(e) is None
    board.misconfigured(e, 401)
    assert board.blocked(e) == "misconfigured"


def test_slo_demotes_a_slow_endpoint_and_a_fast_probe_restores_it(tmp_path: Path) -> None:
    e = catalogue(tmp_path, [endpoint("a", "fast", slo={"ttft_ms": 500})]).models["m"][0]
    clock = Clock()
    board = HealthBoard(BreakerSettings(open_s=5), clock)
    for _ in range(5):
        board.observe(e, sample(e.key, Outcome.OK, ttft_s=0.2))
    assert board.blocked(e) is None
    for _ in range(4):
        board.observe(e, sample(e.key, Outcome.OK, ttft_s=2.5))  # 5x its SLO, no errors
    assert board.blocked(e) == "slo"
    clock.now += 5.5
    assert board.blocked(e) is None
    board.observe(e, sample(e.key, Outcome.OK, ttft_s=0.2))
    assert not board.is_open(e)


def test_background_probes_close_or_keep_open_up_to_max_open(tmp_path: Path) -> None:
    e = catalogue(tmp_path, [endpoint("a")]).models["m"][0]
    clock = Clock()
    board = HealthBoard(BreakerSettings(failure_threshold=1, open_s=10, max_open_s=25), clock)
    assert not board.wants_probe(e)
    board.observe(e, sample(e.key, Outcome.SERVER_ERROR))
    assert board.wants_probe(e) and board.begin_probe(e)
    assert not board.wants_probe(e) and not board.begin_probe(e)  # one probe at a time
    clock.now += 10.5
    assert board.blocked(e) == "circuit_open"  # no client request while a probe is out
    board.end_probe(e, ok=False)  # still down: open for another open_s ...
    clock.now += 9
    assert board.blocked(e) == "circuit_open"
    board.begin_probe(e)
    board.end_probe(e, ok=False)  # ... but never past max_open_s (25 s) in all
    clock.now += 6
    assert board.blocked(e) is None  # 25.5 s after opening: a client request is the half-open probe
    board.observe(e, sample(e.key, Outcome.SERVER_ERROR))  # ... and failed: a new open period
    assert board.begin_probe(e)
    board.end_probe(e, ok=True)
    assert board.blocked(e) is None and not board.is_open(e)


def test_slo_demotion_is_not_probed_in_the_background(tmp_path: Path) -> None:
    e = catalogue(tmp_path, [endpoint("a", "fast", slo={"ttft_ms": 500})]).models["m"][0]
    board = HealthBoard(BreakerSettings(open_s=5), Clock())
    for _ in range(5):
        board.observe(e, sample(e.key, Outcome.OK, ttft_s=2.0))
    assert board.blocked(e) == "slo" and not board.wants_probe(e)


def test_cooldown_left(tmp_path: Path) -> None:
    e = catalogue(tmp_path, [endpoint("a")]).models["m"][0]
    clock = Clock()
    board = HealthBoard(clock=clock)
    assert board.cooldown_left(e) == 0.0
    board.cool_down(e, 2.0)
    clock.now += 0.5
    assert board.cooldown_left(e) == 1.5


def test_a_shared_close_closes_only_circuits_with_older_evidence(tmp_path: Path) -> None:
    e = catalogue(tmp_path, [endpoint("a")]).models["m"][0]
    board = HealthBoard(BreakerSettings(failure_threshold=1, open_s=30))
    board.observe(e, sample(e.key, Outcome.SERVER_ERROR))
    board.apply_remote_close(e, time.time() - 5)  # closed elsewhere before this replica's circuit opened
    assert board.blocked(e) == "circuit_open"
    closed_at = time.time()
    board.apply_remote_close(e, closed_at)
    assert board.blocked(e) is None and not board.is_open(e)
    assert board.take_changes()[e.key][0] == "circuit_open"  # its own open is shared; the close is not echoed

    board.observe(e, sample(e.key, Outcome.SERVER_ERROR))  # open again
    board.take_changes()  # (shared)
    assert board.begin_probe(e)  # this replica's probe is sent ...
    board.apply_remote_close(e, time.time())  # ... then another replica's probe closes the circuit
    assert board.blocked(e) is None
    board.end_probe(e, ok=False)  # the probe sent before the recovery fails: it reopens nothing
    assert board.blocked(e) is None and e.key not in board.take_changes()

    board.observe(e, sample(e.key, Outcome.SERVER_ERROR))  # open again
    closed_at = time.time()
    assert board.begin_probe(e)  # sent after the other's close ...
    board.end_probe(e, ok=False)  # ... and failed: newer evidence than that close
    board.apply_remote_close(e, closed_at)
    assert board.blocked(e) == "circuit_open"
