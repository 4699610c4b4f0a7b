"""Shared by the observability tests: one simulator and one gateway process for the whole package.

Model `m` has a fast tier (`fast`: TTFT 200 ms) and a standard tier (`std`: TTFT 800 ms); model `m2`
has one endpoint (`idle`) that no test sends traffic to. The `fast` provider has a key (from the
environment, as in production) so the access-log tests can check it never shows up.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from gateway.simulator.testing import SimProcess, make_sim_config
from tests.harness import GatewayProcess, catalogue_for

PROFILES = {  # TTFT in seconds, as the simulator is told
    "fast": 0.200,
    "std": 0.800,
}
KEY_ENV = "OBS_FAST_API_KEY"
SECRET_KEY = f"sk-obs-{uuid.uuid4().hex}"


@pytest.fixture(scope="package")
def sim() -> Iterator[SimProcess]:
    config = make_sim_config({
        "fast": {"ttft_ms": PROFILES["fast"] * 1000, "ttft_jitter": 0.05, "tokens_per_second": 400,
                 "output_tokens": 20},
        "std": {"ttft_ms": PROFILES["std"] * 1000, "ttft_jitter": 0.05, "tokens_per_second": 200,
                "output_tokens": 20},
        "idle": {"ttft_ms": 100, "tokens_per_second": 300, "output_tokens": 10},
    })
    with SimProcess(config) as process:
        yield process


@pytest.fixture(scope="package")
def gateway(sim: SimProcess) -> Iterator[GatewayProcess]:
    catalogue = catalogue_for(sim, {
        "m": [{"sim": "fast", "tier": "fast", "price": {"input": 1.0, "output": 8.0}},
              {"sim": "std", "tier": "standard", "price": {"input": 0.3, "output": 1.2}}],
        "m2": [{"sim": "idle", "tier": "standard"}],
    })
    catalogue["providers"]["fast"]["api_key_env"] = KEY_ENV
    with GatewayProcess(catalogue, env={KEY_ENV: SECRET_KEY}) as process:
        yield process
