"""The catalogue loader: valid files load; every error names the file and the key path."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gateway.config import ConfigError, Tier, load_catalogue, load_config

ROOT = Path(__file__).resolve().parent.parent


def write(tmp_path: Path, data: object, name: str = "providers.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return path


def minimal() -> dict:
    return {
        "providers": {"fw": {"base_url": "http://127.0.0.1:1/v1", "api_key_env": "FW_KEY"}},
        "models": {
            "m": {
                "aliases": ["m-alias"],
                "endpoints": [
                    {"provider": "fw", "model": "up-std", "tier": "standard",
                     "price": {"input": 0.3, "cached_input": 0.006, "output": 1.2}},
                    {"provider": "fw", "model": "up-fast", "tier": "fast", "hourly_cost": 25.0},
                ],
            }
        },
    }


def test_shipped_catalogues_load() -> None:
    for name in ("providers.yaml", "providers.demo.yaml"):
        catalogue, _ = load_catalogue(ROOT / name, env={})
        assert catalogue.endpoints(), name
    catalogue, _ = load_catalogue(ROOT / "providers.yaml", env={})
    flash = {e.id: e for e in catalogue.models["deepseek-v4.1-flash"]}
    assert flash["fireworks/ultrafast"].price.output == 9.60
    assert flash["baseten/fast"].price.cached_input == 0.014
    assert catalogue.resolve_model("deepseek-flash") == "deepseek-v4.1-flash"


def test_resolves_ids_keys_regions_and_availability(tmp_path: Path) -> None:
    catalogue, _ = load_catalogue(write(tmp_path, minimal()), env={"FW_KEY": "secret-value"})
    std, fast = catalogue.models["m"]
    assert (std.id, std.key, std.tier) == ("fw/standard", "m/fw/standard", Tier.STANDARD)
    assert fast.hourly_cost == 25.0 and fast.price is None
    assert std.region == "global" and std.available
    assert "secret-value" not in repr(std)  # a key never shows in a repr, hence never in a log
    catalogue, _ = load_catalogue(write(tmp_path, minimal()), env={})
    assert not catalogue.models["m"][0].available


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda d: d["models"]["m"]["endpoints"][1].update(price={"input": 1, "output": -1}),
         "providers.yaml: models.m.endpoints[1].price.output: must be >= 0"),
        (lambda d: d["models"]["m"]["endpoints"][0].update(colour="red"),
         "providers.yaml: models.m.endpoints[0].colour: unknown key"),
        (lambda d: d["models"]["m"]["endpoints"][0].update(tier="warp"),
         "providers.yaml: models.m.endpoints[0].tier: Input should be 'standard', 'fast' or 'ultrafast'"),
        (lambda d: d["models"]["m"]["endpoints"][0].update(provider="nope"),
         "providers.yaml: models.m.endpoints[0].provider: unknown provider 'nope'"),
        (lambda d: d["models"]["m"]["endpoints"][1].update(tier="standard"),
         "providers.yaml: models.m.endpoints[1].id: 'fw/standard' is not unique"),
        (lambda d: d["models"]["m"]["endpoints"][0].pop("price"),
         "providers.yaml: models.m.endpoints[0]: set exactly one of price or hourly_cost"),
        (lambda d: d["providers"]["fw"].update(base_url="ftp://x"),
         "providers.yaml: providers.fw.base_url:"),
        (lambda d: d.pop("models"), "providers.yaml: models: required key is missing"),
        (lambda d: d["providers"]["fw"].update(api="gemini"),
         "providers.yaml: providers.fw.api: Input should be 'openai', 'anthropic' or 'openai-responses'"),
        (lambda d: (d["providers"]["fw"].update(api="anthropic"),
                    d["models"]["m"]["endpoints"][0].update(apis=["chat", "embeddings"])),
         "providers.yaml: models.m.endpoints[0].apis: a provider with api 'anthropic' serves chat only"),
        (lambda d: d["models"]["m"]["endpoints"][0].update(service_tier=""),
         "providers.yaml: models.m.endpoints[0].service_tier:"),
    ],
)
def test_errors_name_file_and_key_path(tmp_path: Path, mutate, expected: str) -> None:
    data = minimal()
    mutate(data)
    with pytest.raises(ConfigError) as info:
        load_catalogue(write(tmp_path, data), env={})
    assert expected in str(info.value)


def test_provider_api_and_service_tier(tmp_path: Path) -> None:
    data = minimal()
    data["providers"]["claude"] = {"base_url": "https://api.anthropic.com/v1", "api": "anthropic"}
    data["models"]["m"]["endpoints"].append({"provider": "claude", "model": "claude-opus-4-6", "tier": "fast",
                                             "service_tier": "fast", "price": {"input": 30, "output": 150}})
    catalogue, _ = load_catalogue(write(tmp_path, data), env={})
    std, _, fast = catalogue.models["m"]
    assert std.api == "openai" and std.service_tier is None
    assert fast.api == "anthropic" and fast.service_tier == "fast"


def test_yaml_syntax_error_names_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"providers.yaml: not valid YAML \(line 3"):
        load_catalogue(write(tmp_path, "providers:\n  a: [1, 2\nmodels: {}\n"), env={})


def test_config_reads_redis_url_and_policies(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, minimal()), ROOT / "policies", env={"REDIS_URL": "redis://x"})
    assert config.redis_url == "redis://x"
    assert "default" in config.policies.policies


def test_cli_check_prints_one_clear_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gateway.cli import main

    data = minimal()
    data["models"]["m"]["endpoints"][1]["price"] = {"input": 1, "output": -2}
    data["models"]["m"]["endpoints"][1].pop("hourly_cost")
    assert main(["check", str(write(tmp_path, data))]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: providers.yaml: models.m.endpoints[1].price.output: must be >= 0"]


def test_long_context_rates_apply_to_a_request_whose_input_is_above_the_threshold() -> None:
    from gateway.config import PriceFile

    price = PriceFile(input=1.0, cached_input=0.1, output=4.0,
                      long_context={"above_tokens": 272_000, "input": 2.0, "cached_input": 0.2, "output": 6.0})
    assert price.rates(272_000) == (1.0, 0.1, 4.0)
    assert price.rates(272_001) == (2.0, 0.2, 6.0)
    assert price.cost(300_000, 200_000, 1_000) == pytest.approx((100_000 * 2.0 + 200_000 * 0.2 + 1_000 * 6.0) / 1e6)
    assert price.cost(1_000, 0, 1_000) == pytest.approx((1_000 * 1.0 + 1_000 * 4.0) / 1e6)
