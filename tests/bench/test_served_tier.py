"""`ultraroute bench` reports the tier that served each target, as the provider said it: through a
real gateway to an Anthropic endpoint asked for fast mode that silently serves standard, the report
says "asked fast, served standard in N/N" and results.json counts it per level."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.cli import main
from gateway.simulator.testing import SimProcess, make_sim_config
from tests.harness import GatewayProcess, catalogue_for


def test_a_silent_downgrade_is_reported_per_tier(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = {"ttft_ms": 20, "ttft_jitter": 0, "tokens_per_second": 2000, "output_tokens": 16,
               "faults": {"downgrade_to": "standard"}}
    with SimProcess(make_sim_config({"claude": profile})) as sim:
        catalogue = catalogue_for(sim, {"opus": [{"sim": "claude", "api": "anthropic", "tier": "fast",
                                                  "service_tier": "fast", "id": "anthropic/fast"}]},
                                  gateway={"breaker_failures": 1000})
        with GatewayProcess(catalogue) as gateway:
            code = main(["bench", "--base-url", gateway.base_url, "--model", "opus", "--target", "fast:speed=fast",
                         "--levels", "1", "--requests", "2", "--max-tokens", "8", "--out", str(tmp_path),
                         "--no-progress"])
    assert code == 0
    [level] = json.loads((tmp_path / "results.json").read_text())["levels"]
    assert level["served_tiers"] == {"standard": level["requests"]}
    assert f"fast: asked fast, served standard in {level['requests']}/{level['requests']}" in capsys.readouterr().out
