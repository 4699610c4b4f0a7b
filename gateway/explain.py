"""The plan and its attempts as JSON: `POST /v1/route` and the `ultraroute` metadata object.

Explaining is reading: nothing here changes a plan or calls an upstream.
"""

from __future__ import annotations

from typing import Any

from gateway.context import Attempt, Candidate, Plan


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


def candidate_json(c: Candidate) -> dict[str, Any]:
    f = c.figures
    return {
        "id": c.endpoint.id,
        "model": c.endpoint.model,
        "provider": c.endpoint.provider.name,
        "tier": c.endpoint.tier.value,
        "tier_rank": c.tier_rank,
        "figures": {
            "decode_tps": _round(f.decode_tps),
            "ttft_ms": _round(f.ttft_ms),
            "cost_usd": None if f.cost_usd is None else round(f.cost_usd, 8),
            "in_flight": f.in_flight,
            "load": f.load,  # in flight with this request added: what the figures were predicted at
            "e2e_s": _round(f.e2e_s, 3),
            "marginal_s": _round(f.marginal_s, 3),  # time this request would add to the others
            "capacity": f.capacity,
            "samples": f.samples,
            "source": f.source,
        },
        "notes": list(c.notes),
    }


def attempt_json(a: Attempt) -> dict[str, Any]:
    return {"endpoint": a.endpoint_id, "tier": a.tier, "outcome": a.outcome.value, "status": a.status,
            "reason": a.reason, "duration_ms": round(a.duration_s * 1000, 1)}


def plan_json(plan: Plan) -> dict[str, Any]:
    return {
        "model": plan.model,
        "strategy": plan.strategy,
        "candidates": [candidate_json(c) for c in plan.candidates],
        "excluded": [{"endpoint": e.endpoint_key, "reason": e.reason} for e in plan.excluded],
        "spills": [{"endpoint": s.endpoint_id, "reason": s.reason} for s in plan.spills],
    }


def metadata_json(plan: Plan, attempts: tuple[Attempt, ...], served_id: str) -> dict[str, Any]:
    return {**plan_json(plan), "attempts": [attempt_json(a) for a in attempts], "served": served_id}
