"""A level's requests -> the figures of the table: `LevelStats`.

Does, per (target, level): per-user decode rate p25/p50 (over successful requests with at least
two tokens), TTFT p50/p95, time to first answer token p50/p95, end-to-end p50/p95 (successful
requests only: a refused connection's 1 ms is not a latency), aggregate output tok/s (all output
tokens of the level, failed streams' included, over the level's wall time), error rate and its
kinds, the endpoints that served (gateway header), and cost per 1M output tokens.
Does not: time anything, or judge (see `compare.py`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from gateway.bench.cost import Pricing, blended_cost_per_1m_output, cost_per_1m_output
from gateway.bench.models import LevelRun, LevelStats
from gateway.bench.stats import percentile


def _ms(values: Iterable[float | None], q: float) -> float | None:
    value = percentile((v for v in values if v is not None), q)
    return None if value is None else value * 1000.0


def error_kind(error: str) -> str:
    """The class of an error message, for counting: "http 503", "connect", "timeout", ..."""
    return error.split(":", 1)[0].strip()


def summarize(run: LevelRun, pricing: Pricing | None) -> LevelStats:
    results = run.results
    ok = [r for r in results if r.ok]
    requests = len(results)
    errors = requests - len(ok)
    decode = [tps for r in ok if (tps := r.decode_tps) is not None]
    output_tokens = sum(r.output_tokens for r in results)
    prompt_tokens = sum(r.prompt_tokens for r in results)
    aggregate = output_tokens / run.wall_s if run.wall_s > 0 else 0.0
    endpoints = Counter(r.endpoint for r in results if r.endpoint)
    kinds = Counter(error_kind(r.error) for r in results if r.error)
    tiers = Counter(r.served_tier for r in results if r.served_tier)
    return LevelStats(
        target=run.target,
        level=run.level,
        requests=requests,
        errors=errors,
        error_rate=errors / requests if requests else 0.0,
        decode_tps_p25=percentile(decode, 25),
        decode_tps_p50=percentile(decode, 50),
        ttft_ms_p50=_ms((r.ttft_s for r in ok), 50),
        ttft_ms_p95=_ms((r.ttft_s for r in ok), 95),
        answer_ms_p50=_ms((r.answer_s for r in ok), 50),
        answer_ms_p95=_ms((r.answer_s for r in ok), 95),
        e2e_ms_p50=_ms((r.e2e_s for r in ok), 50),
        e2e_ms_p95=_ms((r.e2e_s for r in ok), 95),
        output_tokens=output_tokens,
        prompt_tokens=prompt_tokens,
        wall_s=run.wall_s,
        aggregate_tps=aggregate,
        client_cpu=run.client_cpu_s / run.wall_s if run.wall_s > 0 else 0.0,
        pricing="" if pricing is None else pricing.kind,
        cost_per_1m_output=cost_per_1m_output(pricing, aggregate),
        blended_cost_per_1m_output=blended_cost_per_1m_output(
            pricing, prompt_tokens, output_tokens, aggregate
        ),
        endpoints=tuple(sorted(endpoints.items())),
        error_kinds=tuple(sorted(kinds.items())),
        served_tiers=tuple(sorted(tiers.items())),
    )
