"""Background probes: the cross-replica lock (real Redis) and what one probe does to the board."""

from __future__ import annotations

import uuid
from pathlib import Path
from types import SimpleNamespace

from gateway.health.board import BreakerSettings, HealthBoard
from gateway.health.probe import ProbeLock, Prober
from gateway.observability.accesslog import AccessLog
from gateway.observability.metrics import Metrics
from gateway.telemetry.sample import AttemptSample, Outcome
from tests.harness import free_port
from tests.routing.helpers import catalogue, endpoint


async def test_one_holder_at_a_time_across_replicas(redis_url: str) -> None:
    prefix = f"lock-{uuid.uuid4().hex[:8]}"
    a, b = ProbeLock(redis_url, prefix), ProbeLock(redis_url, prefix)
    try:
        assert await a.acquire("m/x", "token-a", 5.0)
        assert not await b.acquire("m/x", "token-b", 5.0)  # another replica is probing it
        assert await b.acquire("m/y", "token-b", 5.0)  # another endpoint is free
        await b.release("m/x", "token-b")  # not its lock: nothing released
        assert not await b.acquire("m/x", "token-b", 5.0)
        await a.release("m/x", "token-a")
        assert await b.acquire("m/x", "token-b", 5.0)
    finally:
        await a.aclose()
        await b.aclose()


async def test_without_redis_each_replica_probes_on_its_own() -> None:
    lock = ProbeLock(f"redis://127.0.0.1:{free_port()}/0", "x")  # nothing listens there
    try:
        assert await lock.acquire("m/x", "t", 1.0) and lock.outage.down
    finally:
        await lock.aclose()


class FakeDispatcher:
    """What the prober needs of the dispatcher: a probe with a scripted outcome, and the budgets."""

    def __init__(self, outcome: Outcome) -> None:
        self.outcome = outcome
        self.limits = SimpleNamespace(stall_timeout_s=1.0)
        self.probes = 0

    def first_token_budget(self, endpoint: object) -> float:
        return 1.0

    async def probe(self, endpoint: SimpleNamespace) -> AttemptSample:
        self.probes += 1
        return AttemptSample(endpoint.key, 0.0, self.outcome, 200 if self.outcome is Outcome.OK else 503,
                             0.05, None, None, 0.05, cost_usd=0.000001)


async def test_a_probe_closes_the_circuit_or_keeps_it_open(tmp_path: Path) -> None:
    cat = catalogue(tmp_path, [endpoint("a")])
    e = cat.models["m"][0]
    board = HealthBoard(BreakerSettings(failure_threshold=1, open_s=30))
    board.observe(e, AttemptSample(e.key, 0.0, Outcome.SERVER_ERROR, 503, None, None, None, 0.1))
    metrics = Metrics(cat, lambda key: 0, lambda: 0)
    down, up = FakeDispatcher(Outcome.SERVER_ERROR), FakeDispatcher(Outcome.OK)
    for dispatcher in (down, up):
        prober = Prober(board, cat.endpoints(), dispatcher, metrics, AccessLog(), ProbeLock(None, "x"),  # type: ignore[arg-type]
                        interval_s=1.0)
        await prober.probe(e)
    assert down.probes == up.probes == 1 and not board.is_open(e)
    text = metrics.exposition().decode()
    labels = 'endpoint="a/standard",model="m"'
    assert f'ultraroute_probes_total{{{labels},outcome="server_error",tier="standard"}} 1.0' in text
    assert f'ultraroute_probes_total{{{labels},outcome="ok",tier="standard"}} 1.0' in text
    assert f'ultraroute_requests_total{{{labels},provider="a",status="ok",tier="standard"}} 0.0' in text  # not clients
    assert not board.begin_probe(e)  # closed: nothing to probe
