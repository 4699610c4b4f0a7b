"""Fixtures for the simulator's own tests: re-export the project-wide simulator fixtures."""

from __future__ import annotations

from gateway.simulator.testing import module_sim_factory, sim_factory

__all__ = ["module_sim_factory", "sim_factory"]
