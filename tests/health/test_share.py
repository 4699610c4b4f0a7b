"""Health sharing between replicas through a real Redis: an opened circuit and its closing travel."""

from __future__ import annotations

import uuid
from pathlib import Path

from gateway.health.board import BreakerSettings, HealthBoard
from gateway.health.share import HealthSharing
from gateway.telemetry.sample import AttemptSample, Outcome
from tests.routing.helpers import catalogue, endpoint


def failure(key: str) -> AttemptSample:
    return AttemptSample(key, 0.0, Outcome.SERVER_ERROR, 503, None, None, 100.0, 1.0)


async def test_one_replicas_probe_closes_the_circuit_on_every_replica(tmp_path: Path, redis_url: str) -> None:
    e = catalogue(tmp_path, [endpoint("a")]).models["m"][0]
    prefix = f"share-{uuid.uuid4().hex[:8]}"
    boards = [HealthBoard(BreakerSettings(failure_threshold=1, open_s=30)) for _ in range(2)]
    a, b = (HealthSharing(board, (e,), redis_url, prefix) for board in boards)
    try:
        boards[0].observe(e, failure(e.key))
        await a.sync()
        await b.sync()
        assert boards[1].blocked(e) == "circuit_open"  # B learned A's open circuit

        assert boards[0].begin_probe(e)
        boards[0].end_probe(e, ok=True)  # A's background probe succeeded
        await a.sync()
        await b.sync()
        assert boards[1].blocked(e) is None and not boards[1].is_open(e)  # B is back without a probe of its own

        # Newer evidence wins: B fails on the endpoint after A's close, and A's note does not reopen it.
        boards[1].observe(e, failure(e.key))
        await b.sync()
        await a.sync()
        assert boards[0].blocked(e) == "circuit_open"
        await b.sync()
        assert boards[1].blocked(e) == "circuit_open"
    finally:
        await a.stop()
        await b.stop()


async def test_a_close_older_than_the_local_circuit_leaves_it_open(tmp_path: Path, redis_url: str) -> None:
    e = catalogue(tmp_path, [endpoint("a")]).models["m"][0]
    prefix = f"share-{uuid.uuid4().hex[:8]}"
    boards = [HealthBoard(BreakerSettings(failure_threshold=1, open_s=30)) for _ in range(2)]
    a, b = (HealthSharing(board, (e,), redis_url, prefix) for board in boards)
    try:
        boards[0].observe(e, failure(e.key))
        assert boards[0].begin_probe(e)
        boards[0].end_probe(e, ok=True)
        await a.sync()  # the close note is written first ...
        boards[1].observe(e, failure(e.key))  # ... then B's own failure opens B's circuit
        await b.sync()
        assert boards[1].blocked(e) == "circuit_open"
    finally:
        await a.stop()
        await b.stop()
