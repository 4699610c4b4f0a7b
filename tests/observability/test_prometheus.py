"""End to end with a real Prometheus: it scrapes the gateway (in front of the simulator) every second.

Issue "Observability": `histogram_quantile` of TTFT by tier agrees with the simulator's profiles, the
fallback counter rises when the fast tier fails, and every query of the Grafana dashboard runs.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from gateway.simulator.testing import SimProcess
from tests.harness import ROOT, GatewayProcess
from tests.observability.conftest import PROFILES
from tests.observability.servers import PrometheusServer, by_label
from tests.test_e2e_routing import burst, served

USER = [{"role": "user", "content": "Plan the migration."}]
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "ultraroute.json"
# What Grafana substitutes before a query reaches Prometheus.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "5m", "${model:regex}": ".*",
                     "$model": ".*", "${model}": ".*"}


@pytest.fixture(scope="module")
def prometheus(gateway: GatewayProcess) -> Iterator[PrometheusServer]:
    server = PrometheusServer([f"127.0.0.1:{gateway.port}"]).start()
    try:
        server.wait_for('up{job="ultraroute"} == 1', bool)
        yield server
    finally:
        server.stop()


def dashboard_exprs() -> list[str]:
    def walk(node: Any) -> Iterator[str]:
        if isinstance(node, dict):
            if isinstance(node.get("expr"), str):
                yield node["expr"]
            for value in node.values():
                yield from walk(value)
        elif isinstance(node, list):
            for value in node:
                yield from walk(value)

    return list(walk(json.loads(DASHBOARD.read_text())))


def grafana_to_promql(expr: str) -> str:
    for name in sorted(GRAFANA_VARIABLES, key=len, reverse=True):
        expr = expr.replace(name, GRAFANA_VARIABLES[name])
    assert "$" not in expr, f"unknown Grafana variable in {expr}"
    return expr


def test_ttft_quantiles_by_tier_match_the_simulator(gateway: GatewayProcess, prometheus: PrometheusServer) -> None:
    fast = {"model": "m", "messages": USER, "speed": "fast", "provider": {"only": ["fast"]}}
    std = {"model": "m", "messages": USER, "provider": {"only": ["std"]}}
    before = by_label(prometheus.query('sum by (tier) (ultraroute_ttft_seconds_count{model="m"})'), "tier")
    served(asyncio.run(burst(gateway.base_url, [fast] * 16 + [std] * 12, 6)))

    def scraped(result: list[dict[str, Any]]) -> bool:
        counts = by_label(result, "tier")
        return (counts.get("fast", 0) - before.get("fast", 0) >= 16
                and counts.get("standard", 0) - before.get("standard", 0) >= 12)

    prometheus.wait_for('sum by (tier) (ultraroute_ttft_seconds_count{model="m"})', scraped)
    # The dashboard's own expression shape: quantiles of per-second rates, summed over replicas.
    p50 = by_label(prometheus.query(
        'histogram_quantile(0.5, sum by (tier, le) (rate(ultraroute_ttft_seconds_bucket{model="m"}[1m])))'), "tier")
    assert p50["fast"] == pytest.approx(PROFILES["fast"], rel=0.25), p50
    assert p50["standard"] == pytest.approx(PROFILES["std"], rel=0.25), p50
    assert 3.0 < p50["standard"] / p50["fast"] < 5.3, p50  # the profiles' ratio is 4
    by_endpoint = by_label(prometheus.query(
        'histogram_quantile(0.95, sum by (endpoint, le) (rate(ultraroute_ttft_seconds_bucket{model="m"}[1m])))'),
        "endpoint")
    assert by_endpoint["fast"] < by_endpoint["std"], by_endpoint


def test_fallback_counter_rises_when_the_fast_tier_fails(
    gateway: GatewayProcess, sim: SimProcess, prometheus: PrometheusServer
) -> None:
    total = 'sum(ultraroute_fallbacks_total{from_tier="fast", to_tier="standard"}) or vector(0)'
    before = prometheus.scalar(total)
    errors = 'sum(ultraroute_requests_total{endpoint="fast", status="server_error"})'
    errors_before = prometheus.scalar(errors)
    sim.patch("fast", faults={"error_rate": 1.0})
    try:
        responses = asyncio.run(burst(gateway.base_url, [{"model": "m", "messages": USER, "speed": "fast"}] * 8, 2))
    finally:
        sim.patch("fast", faults={"error_rate": 0.0})
    assert set(served(responses)) == {"std"}
    fell_back = [r.headers["x-ultraroute-fallback"] for r in responses if "x-ultraroute-fallback" in r.headers]
    # "fast" served the earlier tests, so its first 503s may be taken as sporadic and tried there once more
    # (retry.py) before its circuit opens.
    assert len(fell_back) == 8 and all(re.match(r"fast->(fast->)?std \(", h) for h in fell_back), fell_back

    prometheus.wait_for(total, lambda r: bool(r) and float(r[0]["value"][1]) - before >= 8)
    assert prometheus.scalar(total) - before == 8  # one per request served after a fallback, no more
    reasons = by_label(prometheus.query(
        'sum by (reason) (ultraroute_fallbacks_total{from_tier="fast", to_tier="standard"})'), "reason")
    header_reasons = {re.search(r"\((\w+)", h).group(1) for h in fell_back}  # type: ignore[union-attr]
    assert header_reasons <= set(reasons), (header_reasons, reasons)
    assert prometheus.scalar(errors) > errors_before
    # The dashboard's fallback panel sees it too.
    rate = prometheus.scalar('sum(rate(ultraroute_fallbacks_total{from_tier="fast"}[1m]))')
    assert rate > 0


def test_every_dashboard_query_runs_in_prometheus(prometheus: PrometheusServer) -> None:
    exprs = dashboard_exprs()
    assert len(exprs) >= 10
    failures = {}
    for expr in exprs:
        body = prometheus.query_raw(grafana_to_promql(expr))
        if body.get("status") != "success":
            failures[expr] = body.get("error")
    assert not failures, failures
