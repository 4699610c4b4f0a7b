"""deploy/prometheus/alerts.yml: each alert fires on series that should trip it and stays quiet on
series that should not, as Prometheus's own `promtool test rules` evaluates them; the rules name only
metrics the gateway exports; docker compose and the Kubernetes ConfigMap load them.

The cases are data below, written out as a promtool test file. promtool compares the annotations too,
and those are prose for whoever is paged, so the rules are tested from a copy without them (the real
file, annotations and all, must pass `promtool check rules`).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.harness import ROOT, GatewayProcess, ensure_binary
from tests.observability.test_deploy import compose, exposed_sample_names

ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
K8S_PROMETHEUS = ROOT / "deploy" / "k8s" / "prometheus.yaml"


def counter(series: str, per_minute: float, minutes: int = 420) -> dict[str, str]:
    return {"series": series, "values": f"0+{per_minute}x{minutes}"}


def requests(ok_per_min: float, errors_per_min: float, overloaded_per_min: float = 0) -> list[dict[str, str]]:
    return [counter('ultraroute_client_requests_total{api="chat",status="2xx"}', ok_per_min),
            counter('ultraroute_client_requests_total{api="chat",status="5xx"}', errors_per_min),
            counter("ultraroute_overloaded_total", overloaded_per_min)]


def durations(served_per_min: float, slow_per_min: float) -> list[dict[str, str]]:
    labels = 'model="m",endpoint="a",tier="fast"'
    return [counter(f"ultraroute_request_duration_seconds_count{{{labels}}}", served_per_min),
            counter(f'ultraroute_request_duration_seconds_bucket{{{labels},le="30.0"}}', served_per_min - slow_per_min),
            counter(f'ultraroute_request_duration_seconds_bucket{{{labels},le="+Inf"}}', served_per_min)]


def lag(under_50ms: float, under_100ms: float, total: float = 1200) -> list[dict[str, str]]:
    """A worker's lag samples per minute (one every 50 ms), by bucket."""
    return [counter(f'ultraroute_event_loop_lag_seconds_bucket{{instance="w1",le="{le}"}}', n)
            for le, n in (("0.05", under_50ms), ("0.1", under_100ms), ("0.25", total), ("+Inf", total))]


PAGE, TICKET = {"severity": "page"}, {"severity": "ticket"}
CIRCUIT = 'ultraroute_endpoint_circuit_open{model="m",endpoint="a",tier="fast",instance="w1"}'
CIRCUIT_LABELS = {"model": "m", "endpoint": "a", "tier": "fast"}

# name -> (input series, {eval time: {alert: the label sets it fires with; [] = quiet}})
CASES: dict[str, tuple[list[dict[str, str]], dict[str, dict[str, list[dict[str, str]]]]]] = {
    "5% errors: both error burns fire": (requests(950, 50), {
        "30m": {"UltrarouteErrorBudgetBurnFast": [PAGE], "UltrarouteErrorBudgetBurnSlow": [TICKET]}}),
    "1% errors: slow burn only": (requests(990, 10), {
        "1h": {"UltrarouteErrorBudgetBurnFast": [], "UltrarouteErrorBudgetBurnSlow": [TICKET]}}),
    "0.05% errors: within the budget": (requests(9995, 5), {
        "2h": {"UltrarouteErrorBudgetBurnFast": [], "UltrarouteErrorBudgetBurnSlow": []}}),
    "overload refusals count as errors": (requests(950, 0, 50), {
        "30m": {"UltrarouteErrorBudgetBurnFast": [PAGE]}}),
    "a 10-minute error spike that has ended: the short window is quiet": ([
        counter('ultraroute_client_requests_total{api="chat",status="2xx"}', 800),
        {"series": 'ultraroute_client_requests_total{api="chat",status="5xx"}', "values": "0+200x10 2000+0x60"},
        counter("ultraroute_overloaded_total", 0)], {
        "30m": {"UltrarouteErrorBudgetBurnFast": []}}),
    "30% over 30 s: both latency burns fire": (durations(100, 30), {
        "30m": {"UltrarouteLatencyBudgetBurnFast": [PAGE], "UltrarouteLatencyBudgetBurnSlow": [TICKET]}}),
    "8% over 30 s: slow latency burn only": (durations(100, 8), {
        "1h": {"UltrarouteLatencyBudgetBurnFast": [], "UltrarouteLatencyBudgetBurnSlow": [TICKET]}}),
    "0.5% over 30 s: p99 within the SLO": (durations(1000, 5), {
        "2h": {"UltrarouteLatencyBudgetBurnFast": [], "UltrarouteLatencyBudgetBurnSlow": []}}),
    "a circuit open for 20 minutes": ([{"series": CIRCUIT, "values": "1x30"}], {
        "10m": {"UltrarouteCircuitOpenLong": []},
        "20m": {"UltrarouteCircuitOpenLong": [{**TICKET, **CIRCUIT_LABELS}]}}),
    "a circuit that reopens every 10 minutes is never open for 15": (
        [{"series": CIRCUIT, "values": "1x9 0 1x9 0 1x9"}], {"25m": {"UltrarouteCircuitOpenLong": []}}),
    "5% refused as overloaded for 20 minutes": (requests(950, 0, 50), {
        "20m": {"UltrarouteOverloadedSustained": [PAGE]}}),
    "0.5% refused as overloaded": (requests(995, 0, 5), {"20m": {"UltrarouteOverloadedSustained": []}}),
    "a 3-minute burst of refusals": ([
        counter('ultraroute_client_requests_total{api="chat",status="2xx"}', 1000),
        counter('ultraroute_client_requests_total{api="chat",status="5xx"}', 0),
        {"series": "ultraroute_overloaded_total", "values": "0+300x3 900+0x30"}], {
        "8m": {"UltrarouteOverloadedSustained": []}, "20m": {"UltrarouteOverloadedSustained": []}}),
    "5% of the loop's timers over 100 ms late": (lag(1000, 1140), {
        "20m": {"UltrarouteEventLoopLag": [{**TICKET, "instance": "w1"}]}}),
    "the loop on time": (lag(1200, 1200), {"20m": {"UltrarouteEventLoopLag": []}}),
    "Redis failing for 10 minutes": ([counter('ultraroute_redis_errors_total{instance="w1"}', 1, 30)], {
        "3m": {"UltrarouteRedisOutage": []}, "10m": {"UltrarouteRedisOutage": [{**PAGE, "instance": "w1"}]}}),
    "one failed Redis call": ([{"series": 'ultraroute_redis_errors_total{instance="w1"}', "values": "0 0 0 1+0x30"}], {
        "5m": {"UltrarouteRedisOutage": []}, "8m": {"UltrarouteRedisOutage": []},
        "20m": {"UltrarouteRedisOutage": []}}),
}


def alert_names() -> set[str]:
    rules = yaml.safe_load(ALERTS.read_text())
    return {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}


def promtool() -> str:
    return ensure_binary("promtool", "prometheus")  # Debian's prometheus package ships it


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *args], capture_output=True, text=True, timeout=120, check=False)


def rules_test_file(tmp_path: Path, cases: dict[str, Any]) -> Path:
    """The cases as a promtool test file, against a copy of alerts.yml without its annotations."""
    rules = yaml.safe_load(ALERTS.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (tmp_path / "alerts.yml").write_text(yaml.safe_dump(rules))
    tests = []
    for name, (series, checks) in cases.items():
        tests.append({"name": name, "interval": "1m", "input_series": series, "alert_rule_test": [
            {"eval_time": at, "alertname": alert, "exp_alerts": [{"exp_labels": labels} for labels in fired]}
            for at, alerts in checks.items() for alert, fired in alerts.items()]})
    spec = tmp_path / "alerts.test.yml"
    spec.write_text(yaml.safe_dump({"rule_files": ["alerts.yml"], "evaluation_interval": "1m", "tests": tests}))
    return spec


def test_the_rules_file_is_valid() -> None:
    checked = run("check", "rules", str(ALERTS))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_each_alert_fires_when_it_should_and_only_then(tmp_path: Path) -> None:
    tested = {alert for _, checks in CASES.values() for alerts in checks.values() for alert in alerts}
    assert tested == alert_names()  # every alert has cases
    for alert in tested:  # ...and each fires in one and stays quiet in another
        outcomes = {bool(fired) for _, checks in CASES.values() for alerts in checks.values()
                    for name, fired in alerts.items() if name == alert}
        assert outcomes == {True, False}, alert
    result = run("test", "rules", str(rules_test_file(tmp_path, CASES)))
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_wrong_expectation_fails(tmp_path: Path) -> None:
    """The check can fail: expecting the quiet case to fire is refused."""
    series, _ = CASES["the loop on time"]
    wrong = {"the loop on time": (series, {"20m": {"UltrarouteEventLoopLag": [{**TICKET, "instance": "w1"}]}})}
    result = run("test", "rules", str(rules_test_file(tmp_path, wrong)))
    assert result.returncode != 0


def test_the_rules_name_only_metrics_the_gateway_exports(gateway: GatewayProcess) -> None:
    exposed = exposed_sample_names(httpx.get(f"{gateway.url}/metrics").text)
    exprs = [r["expr"] for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]]
    used = {name for expr in exprs for name in re.findall(r"\bultraroute_[a-z_]+", expr)}
    assert used and used - exposed == set(), sorted(used - exposed)


def test_compose_and_kubernetes_load_the_rules() -> None:
    prometheus = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
    assert prometheus["rule_files"] == ["alerts.yml"]  # beside prometheus.yml, wherever that is mounted
    mounts = compose()["services"]["prometheus"]["volumes"]
    assert "./deploy/prometheus/alerts.yml:/etc/prometheus/alerts.yml:ro" in mounts
    (configmap,) = [d for d in yaml.safe_load_all(K8S_PROMETHEUS.read_text()) if d and d["kind"] == "ConfigMap"]
    assert configmap["data"]["alerts.yml"] == ALERTS.read_text()  # the same rules, word for word
    in_cluster = yaml.safe_load(configmap["data"]["prometheus.yml"])
    assert in_cluster["rule_files"] == ["alerts.yml"]  # both keys are files of the mounted ConfigMap


def test_promtool_accepts_the_config_with_its_rules() -> None:
    checked = run("check", "config", str(ROOT / "deploy/prometheus/prometheus.yml"))
    assert checked.returncode == 0 and "alerts.yml" in checked.stdout, checked.stdout + checked.stderr
