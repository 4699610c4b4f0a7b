"""Simulated OpenAI-compatible providers for tests and benchmarks of the gateway.

Each endpoint listens on its own loopback port and answers `POST /v1/chat/completions` with a
profile's latency, speed, limits and faults; one admin port controls and observes them. See
`config.py` for the `sim.yaml` schema, `admin.py` for the admin API and `testing.py` for pytest
helpers that run the simulator as a subprocess.

Does: re-export the public API. Does not: start anything on import.
"""

from __future__ import annotations

from gateway.simulator.config import (
    EndpointProfile,
    FaultsConfig,
    SimConfig,
    SimConfigError,
    load_sim_config,
)
from gateway.simulator.server import Simulator, run

__all__ = [
    "EndpointProfile",
    "FaultsConfig",
    "SimConfig",
    "SimConfigError",
    "Simulator",
    "load_sim_config",
    "run",
]
