"""Warm-up (health/warm_up.py): which endpoints are measured at start, what one measurement teaches, when it is done."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace

from gateway.health.warm_up import WarmUp
from gateway.observability.accesslog import AccessLog
from gateway.observability.metrics import Metrics
from gateway.routing.router import Router
from gateway.telemetry.sample import AttemptSample, Outcome
from gateway.telemetry.store import MemoryStore
from tests.routing.helpers import catalogue, endpoint


class FakeDispatcher:
    """A probe that waits for `release` (None: forever) and answers at `tps` tokens/s."""

    def __init__(self, tps: float = 200.0) -> None:
        self.tps = tps
        self.release: asyncio.Event | None = asyncio.Event()
        self.asked: list[tuple[str, int]] = []

    async def probe(self, endpoint: SimpleNamespace, max_tokens: int = 1) -> AttemptSample:
        self.asked.append((endpoint.key, max_tokens))
        if self.release is None:
            await asyncio.Event().wait()
        else:
            await self.release.wait()
        return AttemptSample(endpoint.key, time.time() - 0.3, Outcome.OK, 200, 0.1, 0.1, self.tps, 0.3,
                             output_tokens=max_tokens, cost_usd=0.00001)


def parts(tmp_path: Path) -> tuple[object, MemoryStore, Router, Metrics]:
    cat = catalogue(tmp_path, [endpoint("a", advertised={"tokens_per_second": 900}), endpoint("b"),
                               endpoint("emb", apis=["embeddings"])])
    store = MemoryStore()
    return cat, store, Router(cat, store), Metrics(cat, lambda key: 0, lambda: 0)


async def test_each_unmeasured_chat_endpoint_is_measured_once_and_then_it_is_ready(tmp_path: Path) -> None:
    cat, store, router, metrics = parts(tmp_path)
    a, b, _ = cat.endpoints()  # type: ignore[attr-defined]
    # b was measured already (here, or by another replica through Redis): no warm-up completion for it
    # Ended now, as a recorded attempt does: one ending later would be filed in a bucket after now's,
    # outside the window (then, in the last 0.5 s of a bucket, b looked unmeasured).
    store.record(AttemptSample(b.key, time.time() - 0.5, Outcome.OK, 200, 0.1, 0.1, 150.0, 0.5, output_tokens=60))
    dispatcher = FakeDispatcher(tps=80.0)
    warm = WarmUp(cat.endpoints(), dispatcher, router, store, metrics, AccessLog(), tokens=32,  # type: ignore[arg-type]
                  timeout_s=10)
    await warm.start()
    try:
        await asyncio.sleep(0.05)
        assert dispatcher.asked == [(a.key, 32)]  # not b (measured), not the embeddings endpoint
        assert not warm.done  # /healthz: warming_up
        assert router.speed_model(a.key) is None
        dispatcher.release.set()  # type: ignore[union-attr]
        await asyncio.sleep(0.05)
        assert warm.done and warm.measured == [a.key]
        # The router learnt a's measured rate: the catalogue's claim (900 tok/s) is no longer what it goes by.
        model = router.speed_model(a.key)
        assert model is not None and model.tps.w > 0
        assert abs(1.0 / model.tps.mean()[1] - 80.0) < 1.0
        assert 'ultraroute_probes_total{endpoint="a/standard",model="m",outcome="ok",tier="standard"} 1.0' \
            in metrics.exposition().decode()
    finally:
        await warm.stop()


async def test_it_is_ready_after_the_timeout_even_if_an_endpoint_never_answers(tmp_path: Path) -> None:
    cat, store, router, metrics = parts(tmp_path)
    dispatcher = FakeDispatcher()
    dispatcher.release = None
    warm = WarmUp(cat.endpoints(), dispatcher, router, store, metrics, AccessLog(), tokens=16,  # type: ignore[arg-type]
                  timeout_s=0.3)
    started = time.perf_counter()
    await warm.start()
    try:
        while not warm.done:
            assert time.perf_counter() - started < 5
            await asyncio.sleep(0.02)
        assert time.perf_counter() - started >= 0.3 and warm.measured == []
        assert len(dispatcher.asked) == 2
    finally:
        await warm.stop()
