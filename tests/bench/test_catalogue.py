from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gateway.bench.catalogue import price_targets
from gateway.bench.cost import Pricing
from gateway.bench.targets import BenchConfigError, Target

CATALOGUE = {
    "providers": {
        "fireworks": {"base_url": "https://fw.example/v1", "api_key_env": "FW_KEY_NOT_SET"},
        "rented": {"base_url": "https://gpu.example/v1"},
    },
    "models": {
        "flash": {
            "aliases": ["flash-alias"],
            "endpoints": [
                {"provider": "fireworks", "model": "fw/flash", "tier": "standard",
                 "price": {"input": 0.3, "output": 1.2}},
                {"provider": "fireworks", "model": "fw/flash", "tier": "ultrafast",
                 "price": {"input": 2.4, "output": 9.6}},
                {"provider": "rented", "model": "box/flash", "tier": "fast", "hourly_cost": 25.0},
            ],
        },
    },
}


@pytest.fixture
def catalogue(tmp_path: Path) -> Path:
    path = tmp_path / "providers.yaml"
    path.write_text(yaml.safe_dump(CATALOGUE))
    return path


def _target(name: str, model: str = "flash", **fields: object) -> Target:
    return Target(name=name, base_url="http://gw/v1", model=model, **fields)  # type: ignore[arg-type]


def test_prices_by_endpoint_only_speed_and_upstream_model(catalogue: Path) -> None:
    targets = [
        _target("by-endpoint", endpoint="fireworks/ultrafast"),
        _target("by-only", body={"provider": {"only": ["fireworks/standard"]}}),
        _target("by-provider-name", body={"provider": {"only": ["rented"]}}),
        _target("by-speed", model="flash-alias", body={"speed": "fast"}),
        _target("direct", model="box/flash"),  # a provider's own model id, called directly
        _target("given", body={"speed": "fast"}, pricing=Pricing(input=9, output=9)),
    ]
    priced, notes = price_targets(targets, catalogue)
    by_name = {t.name: t.pricing for t in priced}
    assert notes == []
    assert (by_name["by-endpoint"].input, by_name["by-endpoint"].output) == (2.4, 9.6)
    assert by_name["by-endpoint"].source == "providers.yaml: flash/fireworks/ultrafast"
    assert by_name["by-only"].output == 1.2
    assert by_name["by-provider-name"].hourly_cost == 25.0
    assert by_name["by-speed"].hourly_cost == 25.0
    assert by_name["direct"].hourly_cost == 25.0
    assert by_name["given"] == Pricing(input=9, output=9)  # the command line wins


def test_ambiguous_or_unknown_stays_unpriced_with_a_note(catalogue: Path) -> None:
    priced, notes = price_targets([_target("plain"), _target("other", model="nope")], catalogue)
    assert [t.pricing for t in priced] == [None, None]
    assert "plain: cannot tell which endpoint" in notes[0]
    assert "other: model 'nope' is not in providers.yaml" in notes[1]


def test_unknown_endpoint_id_is_an_error(catalogue: Path) -> None:
    with pytest.raises(BenchConfigError, match="fireworks/warp"):
        price_targets([_target("x", endpoint="fireworks/warp")], catalogue)


def test_bad_catalogue_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "providers.yaml"
    path.write_text("providers: {}\nmodels: {m: {endpoints: []}}\n")
    with pytest.raises(BenchConfigError, match=r"providers\.yaml"):
        price_targets([_target("x")], path)
