"""Precedence: body > headers > model suffix > named policy > the default policy."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from gateway.config import GatewayFile
from gateway.errors import InvalidRequest, ModelNotFound
from gateway.parse import parse_chat_request
from gateway.policy import PercentileThreshold, Sort, Speed, load_policies
from gateway.preferences import resolve

POLICIES = load_policies(Path(__file__).resolve().parent.parent / "policies")


def prefs(body: dict, headers: dict[str, str] | None = None):
    full = {"model": "m", "messages": [{"role": "user", "content": "x"}], **body}
    request = parse_chat_request(orjson.dumps(full), headers or {}, "r", GatewayFile())
    return resolve(request, headers or {}, POLICIES)


def test_default_policy() -> None:
    p = prefs({})
    assert (p.policy_name, p.sort, p.speed, p.allow_fallbacks) == ("default", None, None, True)


def test_suffixes() -> None:
    assert prefs({"model": "m:nitro"}).sort is Sort.THROUGHPUT
    assert prefs({"model": "m:floor"}).sort is Sort.PRICE
    assert prefs({"model": "m:fast"}).speed is Speed.FAST
    with pytest.raises(ModelNotFound, match="not a routing suffix"):
        prefs({"model": "m:warp"})


def test_precedence_body_over_header_over_suffix_over_policy() -> None:
    agent = {"x-ultraroute-policy": "coding-agent"}
    p = prefs({}, agent)
    assert (p.sort, p.speed, p.sticky) == (Sort.THROUGHPUT, Speed.FAST, True)
    assert p.min_throughput == PercentileThreshold(p50=100)
    assert prefs({"model": "m:floor"}, agent).sort is Sort.PRICE  # suffix over policy
    assert prefs({"model": "m:ultrafast"}, {**agent, "x-ultraroute-speed": "standard"}).speed is Speed.STANDARD
    assert prefs({"speed": "ultrafast"}, {"x-ultraroute-speed": "standard"}).speed is Speed.ULTRAFAST
    assert prefs({"provider": {"sort": "latency"}}, agent).sort is Sort.LATENCY  # body over all
    assert prefs({"service_tier": "priority"}).speed is Speed.FAST
    assert prefs({"provider": {"sort": {"by": "ttft", "partition": "none"}}}).sort is Sort.LATENCY


def test_unknown_policy_and_bad_header() -> None:
    with pytest.raises(InvalidRequest) as info:
        prefs({}, {"x-ultraroute-policy": "nope"})
    assert info.value.param == "x-ultraroute-policy"
    with pytest.raises(InvalidRequest):
        prefs({}, {"x-ultraroute-speed": "warp"})


def test_shipped_policies() -> None:
    assert {"default", "fastest", "cheapest", "low-latency", "eu-only", "coding-agent"} <= set(POLICIES.policies)
    assert POLICIES.get("eu-only").regions == ("eu",)


def test_policy_errors_name_file_and_key(tmp_path: Path) -> None:
    from gateway.config import ConfigError

    (tmp_path / "broken.yaml").write_text("sort: fastest\n")
    with pytest.raises(ConfigError, match=r"^broken.yaml: sort: "):
        load_policies(tmp_path)
    (tmp_path / "broken.yaml").write_text("speed: fast\ncolour: red\n")
    with pytest.raises(ConfigError, match=r"^broken.yaml: colour: unknown key"):
        load_policies(tmp_path)
