"""Tests of gateway.simulator.server: the in-process Simulator and the blocking `run` entry point."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml

from gateway.simulator import Simulator
from gateway.simulator.config import parse_sim_config
from gateway.simulator.testing import make_sim_config

REPO = Path(__file__).resolve().parents[2]


async def test_in_process_start_stop_and_port_zero() -> None:
    config = parse_sim_config({"admin_port": 0, "endpoints": {"a": {"port": 0, "ttft_ms": 5000}}})
    sim = Simulator(config)
    await sim.start()
    try:
        assert sim.base_url("a").startswith("http://127.0.0.1:") and sim.base_url("a").endswith("/v1")
        assert not sim.base_url("a").startswith("http://127.0.0.1:0/")
        async with httpx.AsyncClient(timeout=5) as client:
            assert (await client.get(sim.admin_url + "/admin/health")).json() == {"ok": True}
            pending = asyncio.create_task(
                client.post(
                    sim.base_url("a") + "/chat/completions",
                    json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
                )
            )
            while sim.stats("a")["active"] == 0:
                await asyncio.sleep(0.01)
            await sim.stop()  # aborts the in-flight request
            with pytest.raises(httpx.HTTPError):
                await pending
    finally:
        await sim.stop()
    stats = sim.stats("a")
    assert (stats["active"], stats["cancelled"]) == (0, 1)


async def test_in_process_patch_and_reset() -> None:
    config = parse_sim_config({"admin_port": 0, "endpoints": {"a": {"port": 0}}})
    async with Simulator(config) as sim:
        assert (await sim.patch("a", {"faults": {"error_rate": 1.0}})).faults.error_rate == 1.0
        await sim.reset(profiles=True)
        assert sim.endpoints["a"].profile.faults.error_rate == 0.0


def test_run_prints_urls_and_stops_on_sigint(tmp_path: Path) -> None:
    config = make_sim_config({"one": {}, "two": {}})
    path = tmp_path / "sim.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, pathlib; from gateway.simulator import run; run(pathlib.Path(sys.argv[1]))",
            str(path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline().strip() for _ in range(4)]
        port_one, port_two = config["endpoints"]["one"]["port"], config["endpoints"]["two"]["port"]
        assert lines == [
            f"endpoint one http://127.0.0.1:{port_one}/v1",
            f"endpoint two http://127.0.0.1:{port_two}/v1",
            f"admin http://127.0.0.1:{config['admin_port']}",
            "simulator ready",
        ]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_module_entry_point_reports_config_errors(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("endpoints:\n  a:\n    port: 1\n    speed: 3\n")
    result = subprocess.run(
        [sys.executable, "-m", "gateway.simulator", str(path)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=30,
    )
    assert result.returncode == 2
    assert f"{path}: endpoints.a.speed" in result.stderr
