"""Tests of gateway.simulator.config: schema, defaults, file errors, admin patch merging."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.simulator.config import (
    EndpointProfile,
    SimConfigError,
    load_sim_config,
    merge_profile,
    parse_sim_config,
)

EXAMPLE = """
host: 127.0.0.1
admin_port: 9100
seed: 7
endpoints:
  fireworks-standard:
    port: 9101
    model: null
    ttft_ms: 600
    ttft_jitter: 0.1
    tokens_per_second: 150
    slowdown_per_user: 0.0092
    capacity: 256
    retry_after_s: 1.0
    output_tokens: 64
    reasoning_tokens: 0
    context_length: 131072
    accepts_prefix: false
    tick_ms: 10
    faults:
      error_rate: 0.0
      error_status: 503
      hang_rate: 0.0
      drop_rate: 0.0
      drop_after_tokens: 20
      stall_rate: 0.0
      malformed_rate: 0.0
      error_event_rate: 0.0
      no_done_rate: 0.0
      refuse: false
  tiny:
    port: 9102
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sim.yaml"
    path.write_text(text)
    return path


def test_full_example_loads(tmp_path: Path) -> None:
    config = load_sim_config(write(tmp_path, EXAMPLE))
    assert config.seed == 7
    assert config.admin_port == 9100
    assert set(config.endpoints) == {"fireworks-standard", "tiny"}
    tiny = config.endpoints["tiny"]
    assert tiny == EndpointProfile(port=9102)
    assert tiny.faults.error_status == 503
    assert tiny.tick_ms == 10


def test_default_slowdown_matches_published_points() -> None:
    # "1 user 112 tok/s, 64 users 71 tok/s"
    profile = EndpointProfile(port=1, tokens_per_second=112)
    assert profile.rate_at(1) == pytest.approx(112)
    assert profile.rate_at(64) == pytest.approx(71, rel=0.01)
    assert profile.rate_at(0) == pytest.approx(112)


def test_unknown_key_is_rejected_with_file_and_key_path(tmp_path: Path) -> None:
    path = write(tmp_path, "endpoints:\n  a:\n    port: 1\n    faults:\n      eror_rate: 0.5\n")
    with pytest.raises(SimConfigError) as info:
        load_sim_config(path)
    message = str(info.value)
    assert str(path) in message
    assert "endpoints.a.faults.eror_rate" in message


def test_bad_values_name_the_key(tmp_path: Path) -> None:
    path = write(tmp_path, "endpoints:\n  a:\n    port: 1\n    faults:\n      drop_rate: 1.5\n")
    with pytest.raises(SimConfigError, match=r"endpoints\.a\.faults\.drop_rate"):
        load_sim_config(path)
    path = write(tmp_path, "endpoints:\n  a:\n    port: 1\n    tokens_per_second: 0\n")
    with pytest.raises(SimConfigError, match=r"endpoints\.a\.tokens_per_second"):
        load_sim_config(path)


def test_missing_file_invalid_yaml_and_non_mapping(tmp_path: Path) -> None:
    with pytest.raises(SimConfigError, match="cannot read"):
        load_sim_config(tmp_path / "nope.yaml")
    with pytest.raises(SimConfigError, match="invalid YAML"):
        load_sim_config(write(tmp_path, "endpoints: [unclosed"))
    with pytest.raises(SimConfigError, match="mapping"):
        load_sim_config(write(tmp_path, "- a\n- b\n"))


def test_ports_must_be_distinct_and_names_url_safe() -> None:
    with pytest.raises(SimConfigError, match="reuses port"):
        parse_sim_config({"admin_port": 5, "endpoints": {"a": {"port": 5}}})
    with pytest.raises(SimConfigError, match="reuses port"):
        parse_sim_config({"endpoints": {"a": {"port": 7}, "b": {"port": 7}}})
    with pytest.raises(SimConfigError, match="must match"):
        parse_sim_config({"endpoints": {"a/b": {"port": 7}}})
    with pytest.raises(SimConfigError, match="endpoints"):
        parse_sim_config({"endpoints": {}})
    # Port 0 means "any free port" and may repeat.
    parse_sim_config({"admin_port": 0, "endpoints": {"a": {"port": 0}, "b": {"port": 0}}})


def test_models_are_frozen() -> None:
    profile = EndpointProfile(port=1)
    with pytest.raises(ValueError):
        profile.ttft_ms = 5  # type: ignore[misc]


def test_merge_profile_deep_merges_faults() -> None:
    profile = EndpointProfile(port=1, faults={"drop_rate": 0.5, "drop_after_tokens": 3})
    merged = merge_profile(profile, {"ttft_ms": 5, "faults": {"error_rate": 1.0}})
    assert merged.ttft_ms == 5
    assert merged.faults.error_rate == 1.0
    assert merged.faults.drop_rate == 0.5  # untouched keys survive
    assert merged.faults.drop_after_tokens == 3
    assert profile.ttft_ms == 600  # the original is unchanged


def test_merge_profile_validates_and_protects_port() -> None:
    profile = EndpointProfile(port=1)
    with pytest.raises(SimConfigError, match=r"endpoints\.x: faults\.hang_rate"):
        merge_profile(profile, {"faults": {"hang_rate": 2}}, "endpoints.x")
    with pytest.raises(SimConfigError, match="bogus"):
        merge_profile(profile, {"bogus": 1})
    with pytest.raises(SimConfigError, match="port"):
        merge_profile(profile, {"port": 2})
    assert merge_profile(profile, {"port": 1}) == profile
    with pytest.raises(SimConfigError, match="object"):
        merge_profile(profile, [1, 2])


def test_shipped_example_config_is_valid() -> None:
    path = Path(__file__).resolve().parents[2] / "gateway" / "simulator" / "sim.example.yaml"
    config = load_sim_config(path)
    assert config.endpoints["fireworks-standard"] == EndpointProfile(port=9101)
    assert config.endpoints["flaky"].faults.drop_rate == 0.05


def test_prefill_is_free_and_decode_ignores_context_by_default() -> None:
    profile = EndpointProfile(port=0)
    assert profile.prefill_s(60_000, 0, 1) == 0.0
    assert profile.rate_at(1, 60_000) == profile.rate_at(1) == profile.tokens_per_second


def test_prefill_prices_uncached_and_cached_tokens_at_their_rates_and_load() -> None:
    profile = EndpointProfile(port=0, prefill_tokens_per_second=4000, cached_prefill_tokens_per_second=40_000,
                              slowdown_per_user=0.5)
    assert profile.prefill_s(10_000, 8_000, 1) == 2_000 / 4000 + 8_000 / 40_000
    assert profile.prefill_s(10_000, 8_000, 3) == 2 * (2_000 / 4000 + 8_000 / 40_000)  # 1 + 0.5 x 2


def test_decode_slows_as_the_context_grows() -> None:
    profile = EndpointProfile(port=0, tokens_per_second=100, slowdown_per_user=0.0,
                              decode_slowdown_per_1k_context=0.01)
    assert profile.rate_at(1, 50_000) == 100 / 1.5


def test_prompt_cache_is_patched_key_by_key() -> None:
    profile = EndpointProfile(port=0, prompt_cache={"ttl_s": 300})
    patched = merge_profile(profile, {"prompt_cache": {"max_entries": 10}, "port": 0})
    assert (patched.prompt_cache.ttl_s, patched.prompt_cache.max_entries) == (300, 10)
    with pytest.raises(SimConfigError, match=r"prompt_cache\.ttl_s"):
        merge_profile(profile, {"prompt_cache": {"ttl_s": -1}})
