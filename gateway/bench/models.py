"""The frozen records a bench produces, from one request up to the whole report.

Does: define `RequestResult` (one streamed request, times in seconds from when it was sent),
`LevelRun` (a level's requests and its wall time), `LevelStats` (the figures of one target at one
concurrency level, times in ms), `LevelComparison`/`Comparison` (A vs B) and `BenchReport`.
Does not: compute anything beyond trivial derived properties, or do I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class RequestResult:
    """One request. `ok` is False for HTTP errors, connect errors, SSE `error` events, timeouts and
    streams that end before `[DONE]`/a finish reason; `error` then says which."""

    target: str
    level: int
    index: int  # position in the level; picks the prompt (index mod number of prompts)
    ok: bool
    error: str | None
    status: int | None  # HTTP status, None when no response came
    endpoint: str | None  # the gateway's x-ultraroute-endpoint header: what actually served
    started_s: float  # when it was sent, from the level's start
    ttft_s: float | None  # sent -> first token of any kind (content or reasoning)
    answer_s: float | None  # sent -> first non-reasoning content token
    e2e_s: float | None  # sent -> end of the stream (or the failure)
    decode_s: float | None  # first token -> last token
    output_tokens: int  # usage.completion_tokens when reported, else counted token deltas
    prompt_tokens: int  # usage.prompt_tokens when reported, else 0
    usage_reported: bool
    served_tier: str | None = None  # the tier the provider reported (chunks' `service_tier`), if any

    @property
    def decode_tps(self) -> float | None:
        """(output tokens - 1) / (last token - first token): the rate after the first token."""
        if self.output_tokens < 2 or not self.decode_s or self.decode_s <= 0:
            return None
        return (self.output_tokens - 1) / self.decode_s


@dataclass(frozen=True, slots=True)
class LevelRun:
    """All requests of one target at one concurrency level."""

    target: str
    level: int
    wall_s: float  # first request sent -> last request finished
    results: tuple[RequestResult, ...]
    client_cpu_s: float = 0.0  # this process's CPU time during the level: is the client the bottleneck?


@dataclass(frozen=True, slots=True)
class LevelStats:
    """The figures of one target at one level. None = not measurable (e.g. every request failed)."""

    target: str
    level: int
    requests: int
    errors: int
    error_rate: float
    decode_tps_p25: float | None
    decode_tps_p50: float | None
    ttft_ms_p50: float | None
    ttft_ms_p95: float | None
    answer_ms_p50: float | None
    answer_ms_p95: float | None
    e2e_ms_p50: float | None
    e2e_ms_p95: float | None
    output_tokens: int
    prompt_tokens: int
    wall_s: float
    aggregate_tps: float  # all output tokens of the level / its wall time
    client_cpu: float  # the bench's own CPU time / wall time (1.0 = one core saturated)
    pricing: str  # "per_token", "hourly" or "" (no price known)
    cost_per_1m_output: float | None
    blended_cost_per_1m_output: float | None
    endpoints: tuple[tuple[str, int], ...]  # x-ultraroute-endpoint values and how many requests
    error_kinds: tuple[tuple[str, int], ...]  # e.g. (("connect", 4),)
    served_tiers: tuple[tuple[str, int], ...] = ()  # tiers the provider reported serving, and how many


@dataclass(frozen=True, slots=True)
class LevelComparison:
    """A vs B at one level. Multiples are A / B, except `e2e_x` = B's e2e / A's (bigger = A faster)."""

    level: int
    speed_x: float | None  # per-user decode p50
    aggregate_x: float | None
    e2e_x: float | None
    price_x: float | None  # cost per 1M output tokens
    worth_it: bool | None  # speed_x >= price_x and A no less reliable; None when unknown
    error_rate_a: float = 0.0
    error_rate_b: float = 0.0


@dataclass(frozen=True, slots=True)
class Comparison:
    a: str
    b: str
    levels: tuple[LevelComparison, ...]
    verdict: str


@dataclass(frozen=True, slots=True)
class BenchReport:
    started_at: str  # ISO 8601, UTC
    settings: dict[str, Any]
    targets: tuple[dict[str, Any], ...]  # each target described (no API keys, only env var names)
    levels: tuple[LevelStats, ...]
    comparisons: tuple[Comparison, ...]  # one per --compare pair, in the order given
    runs: tuple[LevelRun, ...]
