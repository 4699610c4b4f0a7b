"""Async load generation: every concurrency level, every target, N streamed requests each.

Does: build each target's request bodies once (orjson bytes: model, messages, `stream`,
`stream_options.include_usage`, `max_tokens`, the target's extra body), open one
`httpx.AsyncClient` per target with a pool at least as large as the highest level, and for each
level run `max(N, level)` requests with exactly `level` in flight (a closed loop: a worker sends
its next request when the previous one ends), reporting every result to a progress sink.
Does not: compute statistics (`metrics.py`) or print; a failed request is a result, not an error.

Order: level-major (c=1 for every target, then c=4 for every target, ...), so that two targets
compared at one level are measured minutes, not a whole run, apart: real endpoints drift.
Targets are never measured at the same time, so they do not share this process's CPU or, behind
one gateway, each other's load. Before each level, a target gets `level` concurrent unrecorded
warm-up requests (max_tokens 1), so the level's requests find `level` open connections: a real
client keeps its connections, and a new one costs set-up and TLS (10-30 ms even on loopback), which
is not the endpoint's speed.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

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
    warmup_timeout_s: float = 10.0  # a hung endpoint costs at most this much before the levels

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


async def run_level(
    client: httpx.AsyncClient,
    target: Target,
    bodies: Sequence[bytes],
    headers: Mapping[str, str],
    level: int,
    settings: RunSettings,
    progress: ProgressSink,
) -> LevelRun:
    n = settings.requests_at(level)
    url = f"{target.base_url}/chat/completions"
    results: list[RequestResult | None] = [None] * n
    indexes = iter(range(n))  # shared by the workers: request i always gets prompt i mod len
    start = time.perf_counter()

    async def worker() -> None:
        for i in indexes:  # no await between next() calls, so workers never take the same index
            result = await send(client, url, bodies[i % len(bodies)], headers, settings.timeout_s,
                                target=target.name, level=level, index=i, level_start=start)
            results[i] = result
            progress.advance(result)

    progress.start_level(target.name, level, n)
    await asyncio.gather(*(worker() for _ in range(min(level, n))))
    wall = time.perf_counter() - start
    return LevelRun(target=target.name, level=level, wall_s=wall,
                    results=tuple(r for r in results if r is not None))


async def warm_up(client: httpx.AsyncClient, target: Target, prompt: Prompt, headers: Mapping[str, str],
                  level: int, settings: RunSettings) -> None:
    """`level` concurrent 1-token requests, not recorded; failures are ignored (the level shows them)."""
    body = request_body(target, prompt, 1)
    url = f"{target.base_url}/chat/completions"
    timeout = min(settings.timeout_s, settings.warmup_timeout_s)
    await asyncio.gather(*(send(client, url, body, headers, timeout, target=target.name, level=level,
                                index=-1, level_start=0.0) for _ in range(level)))


def _client(settings: RunSettings) -> httpx.AsyncClient:
    pool = max(settings.levels)
    return httpx.AsyncClient(
        limits=httpx.Limits(max_connections=pool, max_keepalive_connections=pool),
        # The real deadline is per request in `send`; these only bound single operations.
        timeout=httpx.Timeout(settings.timeout_s, connect=min(10.0, settings.timeout_s)),
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
    clients = {t.name: _client(settings) for t in targets}
    bodies = {t.name: [request_body(t, p, settings.max_tokens) for p in prompts] for t in targets}
    headers = {t.name: request_headers(t, env) for t in targets}
    runs: list[LevelRun] = []
    try:
        for level in settings.levels:
            for target in targets:
                await warm_up(clients[target.name], target, prompts[0], headers[target.name], level, settings)
                runs.append(await run_level(clients[target.name], target, bodies[target.name],
                                            headers[target.name], level, settings, progress))
    finally:
        for client in clients.values():
            await client.aclose()
    return runs
