"""The deployment files hang together: docker-compose.yml parses and everything it mounts exists, the
configs it mounts name its services, and every metric the Grafana dashboard queries is one the
gateway exposes at `/metrics`. (`docker compose` itself cannot run here: no container engine.)
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families

from gateway.config import load_catalogue
from gateway.simulator.config import load_sim_config
from tests.harness import ROOT, GatewayProcess, ensure_binary

COMPOSE = ROOT / "docker-compose.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "ultraroute.json"
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",),
            "summary": ("", "_sum", "_count"), "unknown": ("",)}


def compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(data, dict) and isinstance(data.get("services"), dict)
    return data


def bind_mounts(service: dict[str, Any]) -> list[tuple[str, str]]:
    """(host path, container path) of each bind mount; named volumes are skipped."""
    mounts = []
    for volume in service.get("volumes", []):
        if isinstance(volume, dict):
            if volume.get("type") == "bind":
                mounts.append((volume["source"], volume["target"]))
            continue
        source, target = volume.split(":")[:2]
        if source.startswith((".", "/", "~")):
            mounts.append((source, target))
    return mounts


def test_compose_parses_and_everything_it_mounts_exists() -> None:
    data = compose()
    services = data["services"]
    assert {"redis", "prometheus", "grafana", "lb"} <= set(services)
    gateways = [name for name, s in services.items() if "serve" in (s.get("command") or [])]
    assert len(gateways) >= 2, gateways
    for name in gateways:
        assert services[name]["environment"]["REDIS_URL"].startswith("redis://redis:")
        # Simulated providers: open on purpose, and said so (a gateway without keys refuses to start).
        assert services[name]["environment"]["ULTRAROUTE_OPEN"] == "${ULTRAROUTE_OPEN:-1}"
    missing = []
    for name, service in services.items():
        build = service.get("build")
        if build is not None:
            context = ROOT / (build if isinstance(build, str) else build.get("context", "."))
            dockerfile = context / ("Dockerfile" if isinstance(build, str) else build.get("dockerfile", "Dockerfile"))
            missing += [f"{name}: build {p}" for p in (context, dockerfile) if not p.exists()]
        missing += [f"{name}: {src}" for src, _ in bind_mounts(service) if not (ROOT / src).exists()]
        for volume in service.get("volumes", []):
            named = isinstance(volume, str) and not volume.startswith((".", "/", "~"))
            if named:
                assert volume.split(":")[0] in (data.get("volumes") or {}), f"{name}: undeclared volume {volume}"
    assert not missing, missing


def test_dockerfile_copies_what_exists() -> None:
    text = (ROOT / "Dockerfile").read_text()
    for line in re.findall(r"^COPY (.+)$", text, flags=re.M):
        *sources, _ = line.split()
        for source in sources:
            assert (ROOT / source).exists(), source
    assert re.search(r"^CMD ", text, flags=re.M)


def test_mounted_configs_name_the_compose_services() -> None:
    services = compose()["services"]
    gateways = {name for name, s in services.items() if "serve" in (s.get("command") or [])}
    prom = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
    targets = {t for job in prom["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]}
    expected = set()
    for g in gateways:  # every worker of every replica, scraped directly on its own port
        command = services[g]["command"]
        workers = int(command[command.index("--workers") + 1]) if "--workers" in command else 1
        if "--worker-ports" in command:
            first = int(command[command.index("--worker-ports") + 1])
            expected |= {f"{g}:{first + i}" for i in range(workers)}
        else:
            assert workers == 1, f"{g}: {workers} workers behind one port cannot be scraped one by one"
            expected.add(f"{g}:8080")
    assert targets == expected
    nginx = (ROOT / "deploy/nginx/nginx.conf").read_text()
    assert set(re.findall(r"^\s*server (\S+):8080", nginx, flags=re.M)) == gateways
    assert "proxy_buffering off" in nginx  # streams must not be buffered
    datasource = yaml.safe_load((ROOT / "deploy/grafana/provisioning/datasources/prometheus.yml").read_text())
    uids = {d["uid"] for d in datasource["datasources"]}
    provider = yaml.safe_load((ROOT / "deploy/grafana/provisioning/dashboards/ultraroute.yml").read_text())
    grafana_targets = {target for _, target in bind_mounts(services["grafana"])}
    assert provider["providers"][0]["options"]["path"] in grafana_targets
    dashboard = json.loads(DASHBOARD.read_text())
    panel_uids = {p["datasource"]["uid"] for p in dashboard["panels"] if "datasource" in p}
    assert panel_uids <= uids


def test_compose_catalogue_and_simulator_agree() -> None:
    catalogue, _ = load_catalogue(ROOT / "deploy/providers.yaml", env={})
    sim = load_sim_config(ROOT / "deploy/sim.yaml")
    ports = {p.port for p in sim.endpoints.values()}
    for provider in catalogue.providers.values():
        match = re.fullmatch(r"http://simulator:(\d+)/v1", provider.base_url)
        assert match and int(match.group(1)) in ports, provider.base_url


def test_promtool_accepts_the_prometheus_config() -> None:
    # Installed like the Prometheus server the other tests start (Debian's package ships both).
    promtool = ensure_binary("promtool", "prometheus")
    result = subprocess.run([promtool, "check", "config", str(ROOT / "deploy/prometheus/prometheus.yml")],
                            capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def exposed_sample_names(text: str) -> set[str]:
    names = set()
    for family in text_string_to_metric_families(text):
        names |= {family.name + suffix for suffix in SUFFIXES.get(family.type, ("",))}
    return names


def test_every_metric_the_dashboard_queries_is_exposed(gateway: GatewayProcess) -> None:
    exposed = exposed_sample_names(httpx.get(f"{gateway.url}/metrics").text)
    text = DASHBOARD.read_text()
    exprs = [e for e in re.findall(r'"expr": "((?:[^"\\]|\\.)*)"', text)]
    assert exprs
    queried = {name for expr in exprs for name in re.findall(r"\bultraroute_[a-z_]+", expr)}
    assert queried - exposed == set(), sorted(queried - exposed)
    required = {"ultraroute_requests_total", "ultraroute_ttft_seconds_bucket",
                "ultraroute_time_to_first_answer_token_seconds_bucket", "ultraroute_decode_tokens_per_second_bucket",
                "ultraroute_request_duration_seconds_bucket", "ultraroute_tokens_total", "ultraroute_cost_usd_total",
                "ultraroute_fallbacks_total", "ultraroute_retries_total", "ultraroute_endpoint_in_flight",
                "ultraroute_endpoint_circuit_open", "ultraroute_route_selection_seconds_bucket",
                "ultraroute_redis_errors_total"}
    assert required <= exposed, sorted(required - exposed)
    assert required <= queried, sorted(required - queried)


def test_the_readme_section_names_every_metric() -> None:
    section = Path(ROOT / "README.md").read_text()
    for family in ("ultraroute_requests_total", "ultraroute_ttft_seconds", "ultraroute_fallbacks_total",
                   "ultraroute_endpoint_in_flight", "ultraroute_redis_errors_total"):
        assert family in section
    assert "one worker" in section.lower()
