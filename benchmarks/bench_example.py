"""The README's `ultraroute bench` sample run and chart, reproduced on simulated providers.

Run by hand (not a test): `.venv/bin/python benchmarks/bench_example.py [--out bench-results]`.
Starts the demo's simulated providers (`sim.demo.yaml`, on free ports) plus one "dedicated"
endpoint rented by the hour, and a gateway on `providers.demo.yaml`, then runs the bench exactly
as the README shows it against `make demo` (three tiers of deepseek-v4.1-flash through the gateway,
pinned by `provider.only`, prices from the catalogue, and the dedicated box directly with
`--hourly-cost`), and
copies the chart to `docs/bench-example.png`. Takes about three minutes; the machine is shared, so
figures move a little from run to run.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gateway.cli import main  # noqa: E402
from gateway.simulator.testing import SimProcess, make_sim_config  # noqa: E402
from tests.harness import GatewayProcess  # noqa: E402

# A self-hosted replica on a rented GPU: moderate speed, priced per hour, not per token.
DEDICATED = {"ttft_ms": 300, "tokens_per_second": 140, "capacity": 64, "model": "deepseek-v4p1-flash"}
HOURLY_USD = 8.0


def bench_args(gateway_url: str, dedicated_url: str, out: str) -> list[str]:
    return [
        "bench", "--base-url", gateway_url, "--model", "deepseek-v4.1-flash",
        # Each tier pinned to its endpoint with provider.only (and speed, which the router requires to
        # serve a fast tier at all), so the figures are the tier's own, not the router's choices.
        "--target", "ultra:speed=ultrafast,only=fireworks/ultrafast",
        "--target", "fast:speed=fast,only=baseten/fast", "--target", "std:only=fireworks/standard",
        "--target", f"dedicated:base_url={dedicated_url},model=deepseek-v4p1-flash",
        "--hourly-cost", f"dedicated={HOURLY_USD:g}", "--catalogue", str(ROOT / "providers.demo.yaml"),
        "--compare", "ultra", "std", "--compare", "fast", "std",
        "--levels", "1,4,16,64", "--requests", "16", "--max-tokens", "200", "--out", out,
    ]


def run(out: str, chart: Path) -> int:
    demo = yaml.safe_load((ROOT / "sim.demo.yaml").read_text())
    endpoints = {name: {**profile, "port": 0} for name, profile in demo["endpoints"].items()}
    old_ports = {f":{profile['port']}/": name for name, profile in demo["endpoints"].items()}
    endpoints["dedicated"] = DEDICATED
    with SimProcess(make_sim_config(endpoints, seed=demo.get("seed", 0))) as sim:
        catalogue = yaml.safe_load((ROOT / "providers.demo.yaml").read_text())
        for provider in catalogue["providers"].values():
            name = next(n for port, n in old_ports.items() if port in provider["base_url"] + "/")
            provider["base_url"] = sim.base_url(name)
        with GatewayProcess(catalogue) as gateway:
            code = main(bench_args(gateway.base_url, sim.base_url("dedicated"), out))
    chart.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(Path(out) / "chart.png", chart)
    print(f"chart copied to {chart}")
    return code


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench-results")
    parser.add_argument("--chart", default=str(ROOT / "docs" / "bench-example.png"))
    args = parser.parse_args()
    sys.exit(run(args.out, Path(args.chart)))
