"""deploy/k8s/: every manifest validates against the Kubernetes schemas (kubernetes-validate, strict, with
the schemas it bundles: no network), and the manifests agree with the gateway they deploy."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gateway.app import create_app
from gateway.config import GatewayFile, load_catalogue
from gateway.policy import BUILTIN_POLICIES, load_policies
from tests.harness import ROOT

K8S = ROOT / "deploy" / "k8s"
KUBERNETES_VERSION = "1.30.0"  # pinned: the schemas come with kubernetes-validate, offline
FILES = sorted(K8S.glob("*.yaml")) + sorted((K8S / "examples").glob("*.yaml"))


def documents() -> list[tuple[str, dict[str, Any]]]:
    return [(f"{p.relative_to(K8S)}#{i}", d) for p in FILES for i, d in enumerate(yaml.safe_load_all(p.read_text()))
            if d is not None]


def by_kind(kind: str) -> list[dict[str, Any]]:
    return [d for _, d in documents() if d["kind"] == kind]


def gateway_container() -> dict[str, Any]:
    (deployment,) = [d for d in by_kind("Deployment") if d["metadata"]["name"] == "ultraroute"]
    return deployment["spec"]["template"]["spec"]["containers"][0]


@pytest.mark.parametrize(("where", "doc"), documents(), ids=[w for w, _ in documents()])
def test_manifest_is_valid_kubernetes(where: str, doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)  # raises, naming the path, if not


def test_validation_rejects_a_broken_manifest() -> None:
    """The check can fail: an unknown field (strict) and a wrong type are both refused."""
    deployment = by_kind("Deployment")[0]
    deployment["spec"]["replicaz"] = 2
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)
    deployment = by_kind("Deployment")[0]
    deployment["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)


def test_every_piece_the_deployment_needs_is_there() -> None:
    kinds = {d["kind"] for _, d in documents()}
    assert {"Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget", "ConfigMap",
            "StatefulSet", "Secret"} <= kinds
    (hpa,) = by_kind("HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2" and hpa["spec"]["scaleTargetRef"]["name"] == "ultraroute"
    container = gateway_container()
    assert container["resources"]["requests"] and container["resources"]["limits"]
    # no secret value anywhere but in Secret objects, and those hold only blanks
    for secret in by_kind("Secret"):
        assert all(v == "" for v in secret["stringData"].values())


def test_probes_and_shutdown_fit_the_gateway() -> None:
    container = gateway_container()
    pod = by_kind("Deployment")[0]["spec"]["template"]["spec"]
    routes = {r.path for r in create_app_routes()}
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert container[probe]["httpGet"]["path"] in routes, probe
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"  # the one that turns 503 while draining
    pre_stop = int(container["lifecycle"]["preStop"]["exec"]["command"][-1])
    # issue 16's drain: streams may run shutdown_grace_s (30 s) after at least shutdown_delay_s of 503s
    fields = GatewayFile.model_fields
    grace = float(fields["shutdown_grace_s"].default) if "shutdown_grace_s" in fields else 30.0
    delay = float(fields["shutdown_delay_s"].default) if "shutdown_delay_s" in fields else 0.0
    assert pod["terminationGracePeriodSeconds"] > pre_stop + max(grace, delay)
    (pdb,) = by_kind("PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"] == by_kind("Deployment")[0]["spec"]["selector"]["matchLabels"]


def create_app_routes() -> list[Any]:
    from gateway.config import load_config

    config = load_config(ROOT / "providers.yaml", BUILTIN_POLICIES, env={})
    return [r for r in create_app(config).routes if "GET" in getattr(r, "methods", set())]


def test_configmaps_hold_a_valid_catalogue_and_the_built_in_policies(tmp_path: Path) -> None:
    (catalogue_map,) = [d for d in by_kind("ConfigMap") if d["metadata"]["name"] == "ultraroute-catalogue"]
    (policies_map,) = [d for d in by_kind("ConfigMap") if d["metadata"]["name"] == "ultraroute-policies"]
    (tmp_path / "providers.yaml").write_text(catalogue_map["data"]["providers.yaml"])
    catalogue, _ = load_catalogue(tmp_path / "providers.yaml", env={})  # raises, naming file and key, if invalid
    assert catalogue.models
    # every provider key the catalogue names comes from the Secret
    env = {e["name"]: e for e in gateway_container()["env"]}
    wanted = {p["api_key_env"] for p in yaml.safe_load(catalogue_map["data"]["providers.yaml"])["providers"].values()
              if p.get("api_key_env")}
    assert wanted
    for var in wanted | {"ULTRAROUTE_ADMIN_KEY"}:
        assert env[var]["valueFrom"]["secretKeyRef"]["name"] == "ultraroute-secrets", var
    # the policies ConfigMap is the built-in set, unchanged (one source of truth: gateway/policies/)
    assert policies_map["data"] == {p.name: p.read_text() for p in sorted(BUILTIN_POLICIES.glob("*.yaml"))}
    policy_dir = tmp_path / "policies"
    policy_dir.mkdir()
    for name, text in policies_map["data"].items():
        (policy_dir / name).write_text(text)
    assert set(load_policies(policy_dir).policies) >= {"fastest", "cheapest"}
    mounts = {m["name"]: m["mountPath"] for m in gateway_container()["volumeMounts"]}
    command = gateway_container()["command"]
    assert command[command.index("--config") + 1] == f"{mounts['catalogue']}/providers.yaml"
    assert command[command.index("--policies") + 1] == mounts["policies"]


def test_prometheus_scrape_config_finds_the_gateway_pods() -> None:
    """The relabelling keeps exactly the annotated gateway pods and scrapes the annotated port and path.
    (Debian's promtool is built without Kubernetes discovery, so the rules are checked here, with the
    same anchored regular expressions Prometheus applies.)"""
    (scrape,) = [d for d in by_kind("ConfigMap") if d["metadata"]["name"] == "ultraroute-prometheus"]
    (job,) = yaml.safe_load(scrape["data"]["prometheus.yml"])["scrape_configs"]
    assert job["kubernetes_sd_configs"] == [{"role": "pod"}]
    template = by_kind("Deployment")[0]["spec"]["template"]
    meta = {"__address__": "10.1.2.3:9999", "__meta_kubernetes_namespace": "ultraroute",
            "__meta_kubernetes_pod_name": "ultraroute-abc"}
    meta |= {f"__meta_kubernetes_pod_label_{_label(k)}": v for k, v in template["metadata"]["labels"].items()}
    meta |= {f"__meta_kubernetes_pod_annotation_{_label(k)}": v for k, v in template["metadata"]["annotations"].items()}
    target = _relabel(job["relabel_configs"], meta)
    assert target is not None
    port = gateway_container()["ports"][0]["containerPort"]
    assert (target["__address__"], target["__metrics_path__"]) == (f"10.1.2.3:{port}", "/metrics")
    redis_pod = by_kind("StatefulSet")[0]["spec"]["template"]["metadata"]["labels"]
    assert _relabel(job["relabel_configs"], {"__address__": "10.1.2.4:6379", **{
        f"__meta_kubernetes_pod_label_{_label(k)}": v for k, v in redis_pod.items()}}) is None  # not annotated


def _label(name: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def _relabel(rules: list[dict[str, Any]], labels: dict[str, str]) -> dict[str, str] | None:
    """Prometheus's `keep` and `replace` relabel actions (enough for this job); None if dropped."""
    labels = dict(labels)
    for rule in rules:
        value = rule.get("separator", ";").join(labels.get(s, "") for s in rule["source_labels"])
        match = re.fullmatch(rule.get("regex", "(.*)"), value)
        if rule.get("action", "replace") == "keep":
            if match is None:
                return None
        elif match is not None:
            labels[rule["target_label"]] = match.expand(rule.get("replacement", "$1").replace("$", "\\"))
    return labels
