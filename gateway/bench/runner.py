"""Async load generation: every concurrency level, every target, N streamed requests each.

Does: build each target's request bodies once (orjson bytes: model, messages, `stream`,
`stream_options.include_usage`, `max_tokens`, the target's extra body), and for each level run
`max(N, level)` requests with exactly `level` in flight (a closed loop: a worker sends its next
request when the previous one ends), reporting every result to a progress sink.
Does not: compute statistics (`metrics.py`) or print; a failed request is a result, not an error.

Clients: one single-connection `httpx.AsyncClient` per worker slot (so a target has as many as its
highest level, all sharing one SSL context), not one client with a big pool. httpcore's pool
re-scans every connection for every queued request: with 64 idle connections and 64 requests that
burned ~4 s of CPU per round here and inflated TTFT tenfold. One connection per client keeps the
client's cost flat, and worker k always reuses its own connection.

Order: level-major (c=1 for every target, then c=4 for every target, ...), so that two targets
compared at one level are measured minutes, not a whole run, apart: real endpoints drift.
Targets are never measured at the same time, so they do not share this process's CPU or, behind
one gateway, each other's load. Before each level, the level's workers each send one unrecorded
warm-up request (max_tokens 1), so that the level's requests find open connections: a real
client keeps its connections, and a new one costs set-up and TLS (10-30 ms even on loopback), which
is not the endpoint's speed.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import certifi
import httpx
import orjson

from gateway.bench.models import LevelRun, RequestResult
from gateway.bench.prompts import Prompt
from gateway.bench.stream import send
from gateway.bench.targets import Target


@dataclass(frozen=True, slots=True)
class RunSettings:
    levels: tuple[int, ...] = (1, 4, 16, 64)
    requests: int = 32  # per level; a level of c runs max(requests, c) so that c are ever in flight
    max_tokens: int = 256
    timeout_s: float = 120.0
    warmup_timeout_s: float = 10.0  # a hung endpoint costs at most this much per level

    def requests_at(self, level: int) -> int:
        return max(self.requests, level)


class ProgressSink(Protocol):
    def start_level(self, target: str, level: int, requests: int) -> None: ...

    def advance(self, result: RequestResult) -> None: ...


class NoProgress:
    def start_level(self, target: str, level: int, requests: int) -> None:
        pass

    def advance(self, result: RequestResult) -> None:
        pass


def request_body(target: Target, prompt: Prompt, max_tokens: int) -> bytes:
    body: dict[str, Any] = {
        "model": target.model,
        "messages": list(prompt.messages),
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},  # so output tokens are the provider's count
    }
    body.update(target.body)  # the target's fields win: they are what is being measured
    return orjson.dumps(body)


def request_headers(target: Target, env: Mapping[str, str]) -> dict[str, str]:
    headers = {
        "content-type": "application/json",
        "accept": "text/event-stream",
        # A compressed event stream is buffered by some servers: it would delay every token.
        "accept-encoding": "identity",
    }
    key = env.get(target.api_key_env) if target.api_key_env else None
    if key:
        headers["authorization"] = f"Bearer {key}"
    return headers


@dataclass(frozen=True, slots=True)
class _Lane:
    """Everything one target's requests need, prepared once."""

    target: Target
    url: str
    bodies: tuple[bytes, ...]
    warmup: bytes
    headers: Mapping[str, str]
    clients: tuple[httpx.AsyncClient, ...]  # one per worker slot


async def run_level(lane: _Lane, level: int, settings: RunSettings, progress: ProgressSink) -> LevelRun:
    n = settings.requests_at(level)
    target, bodies = lane.target, lane.bodies
    results: list[RequestResult | None] = [None] * n
    indexes = iter(range(n))  # shared by the workers: request i always gets prompt i mod len
    start = time.perf_counter()
    cpu_start = time.process_time()

    async def worker(client: httpx.AsyncClient) -> None:
        for i in indexes:  # no await between next() calls, so workers never take the same index
            result = await send(client, lane.url, bodies[i % len(bodies)], lane.headers, settings.timeout_s,
                                target=target.name, level=level, index=i, level_start=start)
            results[i] = result
            progress.advance(result)

    progress.start_level(target.name, level, n)
    await asyncio.gather(*(worker(client) for client in lane.clients[: min(level, n)]))
    wall = time.perf_counter() - start
    return LevelRun(target=target.name, level=level, wall_s=wall,
                    results=tuple(r for r in results if r is not None),
                    client_cpu_s=time.process_time() - cpu_start)


async def warm_up(lane: _Lane, level: int, settings: RunSettings) -> None:
    """One 1-token request per worker of the level, not recorded; failures are ignored (the level
    itself will show them)."""
    timeout = min(settings.timeout_s, settings.warmup_timeout_s)
    await asyncio.gather(*(
        send(client, lane.url, lane.warmup, lane.headers, timeout, target=lane.target.name, level=level,
             index=-1, level_start=0.0)
        for client in lane.clients[: min(level, settings.requests_at(level))]
    ))


def _clients(count: int, settings: RunSettings, tls: ssl.SSLContext) -> tuple[httpx.AsyncClient, ...]:
    return tuple(
        httpx.AsyncClient(
            verify=tls,
            limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
            # The real deadline is per request in `send`; these only bound single operations.
            timeout=httpx.Timeout(settings.timeout_s, connect=min(10.0, settings.timeout_s)),
        )
        for _ in range(count)
    )


async def run_bench(
    targets: Sequence[Target],
    prompts: Sequence[Prompt],
    settings: RunSettings,
    progress: ProgressSink | None = None,
    env: Mapping[str, str] | None = None,
) -> list[LevelRun]:
    """All levels of all targets, level-major; returns one LevelRun per (level, target)."""
    progress = progress or NoProgress()
    env = os.environ if env is None else env
    tls = ssl.create_default_context(cafile=certifi.where())  # loaded once, not once per client
    slots = max(settings.levels)
    lanes = [
        _Lane(target=t, url=f"{t.base_url}/chat/completions",
              bodies=tuple(request_body(t, p, settings.max_tokens) for p in prompts),
              warmup=request_body(t, prompts[0], 1), headers=request_headers(t, env),
              clients=_clients(slots, settings, tls))
        for t in targets
    ]
    runs: list[LevelRun] = []
    try:
        for level in settings.levels:
            for lane in lanes:
                await warm_up(lane, level, settings)
                runs.append(await run_level(lane, level, settings, progress))
    finally:
        for lane in lanes:
            for client in lane.clients:
                await client.aclose()
    return runs
