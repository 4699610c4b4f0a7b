from __future__ import annotations

from pathlib import Path

import pytest

from gateway.bench.cost import Pricing
from gateway.bench.targets import (
    BenchConfigError,
    build_targets,
    load_targets_file,
    parse_price_specs,
    parse_target_spec,
)


def test_spec_with_speed_only_body_and_a_url_with_colons() -> None:
    draft = parse_target_spec(
        "ultra:speed=ultrafast,only=fireworks/ultrafast,only=groq/fast,base_url=http://h:8080/v1,"
        "body.temperature=0.2,body.service_tier=priority,api_key_env=KEY,endpoint=fireworks/ultrafast"
    )
    assert draft.name == "ultra"
    assert draft.base_url == "http://h:8080/v1"
    assert draft.api_key_env == "KEY" and draft.endpoint == "fireworks/ultrafast"
    assert draft.body == {"temperature": 0.2, "service_tier": "priority", "speed": "ultrafast",
                          "provider": {"only": ["fireworks/ultrafast", "groq/fast"]}}


def test_bare_name() -> None:
    draft = parse_target_spec("std")
    assert draft.name == "std" and draft.body == {} and draft.base_url is None


@pytest.mark.parametrize("spec", ["", "bad name:speed=fast", "a:speed=warp", "a:nokey", "a:colour=red",
                                  "a:speed="])
def test_bad_specs(spec: str) -> None:
    with pytest.raises(BenchConfigError):
        parse_target_spec(spec)


def test_price_specs() -> None:
    prices = parse_price_specs(["ultra=2.40/9.60", "std=0.30/1.20"], ["dedicated=25"])
    assert prices["ultra"] == Pricing(input=2.40, output=9.60, source="--price")
    assert prices["dedicated"].hourly_cost == 25.0 and prices["dedicated"].kind == "hourly"
    for bad in (["x=1"], ["x=a/b"], ["x1/2"], ["x=-1/2"]):
        with pytest.raises(BenchConfigError):
            parse_price_specs(bad, [])
    with pytest.raises(BenchConfigError):
        parse_price_specs(["x=1/2"], ["x=3"])  # two pricing kinds for one target


def test_build_applies_defaults_and_prices() -> None:
    drafts = [parse_target_spec("a:speed=fast"), parse_target_spec("b:base_url=http://other/v1/,model=m2")]
    a, b = build_targets(drafts, base_url="http://gw/v1", model="m", api_key_env="K",
                         prices={"a": Pricing(hourly_cost=3.0)})
    assert (a.base_url, a.model, a.api_key_env, a.body) == ("http://gw/v1", "m", "K", {"speed": "fast"})
    assert a.pricing == Pricing(hourly_cost=3.0)
    assert (b.base_url, b.model, b.pricing) == ("http://other/v1", "m2", None)


def test_build_errors() -> None:
    with pytest.raises(BenchConfigError, match="needs a base_url"):
        build_targets([parse_target_spec("a")], base_url=None, model="m", api_key_env=None, prices={})
    with pytest.raises(BenchConfigError, match="unique"):
        build_targets([parse_target_spec("a"), parse_target_spec("a")], base_url="http://x", model="m",
                      api_key_env=None, prices={})
    with pytest.raises(BenchConfigError, match="unknown targets"):
        build_targets([parse_target_spec("a")], base_url="http://x", model="m", api_key_env=None,
                      prices={"zz": Pricing(hourly_cost=1)})
    with pytest.raises(BenchConfigError, match="http"):
        build_targets([parse_target_spec("a")], base_url="ftp://x", model="m", api_key_env=None, prices={})


def test_targets_file(tmp_path: Path) -> None:
    path = tmp_path / "targets.yaml"
    path.write_text(
        "base_url: http://127.0.0.1:8080/v1\n"
        "model: deepseek-v4.1-flash\n"
        "catalogue: providers.yaml\n"
        "targets:\n"
        "  - {name: ultra, only: [fireworks/ultrafast], price: {input: 2.4, output: 9.6}}\n"
        "  - {name: std, speed: standard, body: {temperature: 0}}\n"
        "  - {name: own, base_url: 'https://api.example.com/v1', model: m, api_key_env: EX_KEY,\n"
        "     hourly_cost: 25}\n"
    )
    parsed, drafts = load_targets_file(path)
    assert parsed.catalogue == "providers.yaml" and parsed.model == "deepseek-v4.1-flash"
    ultra, std, own = build_targets(drafts, base_url=parsed.base_url, model=parsed.model, api_key_env=None,
                                    prices={})
    assert ultra.body == {"provider": {"only": ["fireworks/ultrafast"]}}
    assert ultra.only == ("fireworks/ultrafast",)
    assert ultra.pricing == Pricing(input=2.4, output=9.6, source="targets.yaml")
    assert std.body == {"temperature": 0, "speed": "standard"} and std.pricing is None
    assert own.pricing is not None and own.pricing.hourly_cost == 25
    assert (own.base_url, own.api_key_env) == ("https://api.example.com/v1", "EX_KEY")


@pytest.mark.parametrize("text, message", [
    ("targets: []\n", "targets"),
    ("targets:\n  - {name: a, colour: red}\n", "colour"),
    ("targets:\n  - {name: a, speed: warp}\n", "speed"),
    ("targets:\n  - {name: a, price: {input: 1, output: 2}, hourly_cost: 3}\n", "not both"),
    ("targets: [\n", "not valid YAML"),
])
def test_targets_file_errors_name_the_file_and_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(text)
    with pytest.raises(BenchConfigError, match=message) as err:
        load_targets_file(path)
    assert str(err.value).startswith("t.yaml: ")  # the file, then the key path, as every config error
