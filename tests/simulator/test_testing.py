"""Tests of gateway.simulator.testing: config building, SimProcess life cycle and helpers, the
fixtures, and that one simulator process cheaply drives hundreds of concurrent streams."""

from __future__ import annotations

import asyncio
import socket
import statistics
import time

import httpx
import orjson
import pytest

from gateway.simulator import testing
from gateway.simulator.config import parse_sim_config
from gateway.simulator.testing import SimFactory, SimProcess, make_sim_config


def test_make_sim_config_fills_free_ports() -> None:
    config = make_sim_config({"a": {"ttft_ms": 5}, "b": {"port": 12345}}, seed=9)
    assert config["seed"] == 9
    assert config["endpoints"]["b"]["port"] == 12345
    ports = {config["admin_port"], config["endpoints"]["a"]["port"], 12345}
    assert len(ports) == 3 and all(ports)
    assert config["endpoints"]["a"]["ttft_ms"] == 5
    parse_sim_config(config)  # valid as is


def test_free_ports_are_below_the_ephemeral_range() -> None:
    """Outgoing connections take their ports from the ephemeral range: a port picked there could be taken
    before the server meant for it binds."""
    end = testing.ephemeral_ports_start()
    ports = [testing.free_port() for _ in range(20)]
    assert all(testing.FIRST_FREE_PORT <= port < end for port in ports), (ports, end)
    assert len(set(ports)) > 1  # picked at random, not one port handed to every caller


def test_sim_process_refuses_port_zero_and_reports_start_up_failures() -> None:
    with pytest.raises(ValueError, match="make_sim_config"):
        SimProcess({"admin_port": 0, "endpoints": {"a": {"port": 0}}})
    # An endpoint port that is already taken makes the child exit; the error carries its log.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(RuntimeError, match="exited"):
            SimProcess(make_sim_config({"a": {"port": port}})).start()


def test_sim_process_life_cycle_and_admin_helpers() -> None:
    config = make_sim_config({"a": {"ttft_ms": 5, "ttft_jitter": 0.0, "output_tokens": 3}})
    with SimProcess(config) as sim:
        assert sim.base_url("a") == f"http://127.0.0.1:{config['endpoints']['a']['port']}/v1"
        assert sim.admin_url == f"http://127.0.0.1:{config['admin_port']}"
        assert "simulator ready" in sim.log_text()
        assert (
            httpx.post(
                sim.base_url("a") + "/chat/completions",
                json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
            ).status_code
            == 200
        )
        assert sim.stats("a")["completed"] == 1
        assert sim.patch("a", capacity=0)["capacity"] == 0
        assert sim.endpoints()["a"]["profile"]["capacity"] == 0
        with pytest.raises(RuntimeError, match="400"):
            sim.patch("a", capacity=-1)
        sim.reset(profiles=True)
        assert sim.endpoints()["a"]["profile"]["capacity"] == 256
        assert sim.stats("a")["requests"] == 0
        assert sim.cpu_seconds() > 0
        proc = sim.proc
    assert proc is not None and proc.returncode == 0  # SIGTERM is a clean shutdown


def test_sim_factory_fixture_stops_what_it_started(sim_factory: SimFactory) -> None:
    sim = sim_factory({"x": {}}, seed=5)
    assert sim.config.seed == 5
    assert httpx.get(sim.admin_url + "/admin/health").json() == {"ok": True}


async def test_hundreds_of_concurrent_streams_are_cheap(sim_factory: SimFactory) -> None:
    n, tokens = 300, 64
    sim = sim_factory(
        {
            "load": {
                "ttft_ms": 200,
                "ttft_jitter": 0.1,
                "tokens_per_second": 200,
                "slowdown_per_user": 0.0,
                "output_tokens": tokens,
                "capacity": 400,
            }
        }
    )
    port = sim.config.endpoints["load"].port
    payload = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "go"}], "stream": True})
    request = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
    request += b"content-length: %d\r\n\r\n%b" % (len(payload), payload)

    async def one() -> tuple[int, bool]:
        # A bare socket client: httpx would spend far more CPU here than the simulator does.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request)
        data = b""
        while not data.endswith(b"\r\n0\r\n\r\n"):
            chunk = await reader.read(65536)
            if not chunk:
                break
            data += chunk
        writer.close()
        return data.count(b'"content"'), b"data: [DONE]" in data

    cpu_before = sim.cpu_seconds()
    t0 = time.perf_counter()
    results = await asyncio.wait_for(asyncio.gather(*(one() for _ in range(n))), 60)
    wall = time.perf_counter() - t0
    cpu = sim.cpu_seconds() - cpu_before
    stats = sim.stats("load")
    print(
        f"\n{n} streams x {tokens} tokens: wall {wall:.2f} s, simulator CPU {cpu:.2f} s, "
        f"max_active {stats['max_active']}"
    )
    assert results == [(tokens, True)] * n
    assert (stats["completed"], stats["cancelled"], stats["rate_limited"]) == (n, 0, 0)
    # TTFT jitter: lognormal around the median, reproducible from the seed.
    ttfts = [a["ttft_ms"] for a in stats["attempts"]]
    assert statistics.median(ttfts) == pytest.approx(200, rel=0.05)
    assert 0.05 < statistics.pstdev(ttfts) / 200 < 0.2


def test_make_sim_config_never_gives_two_endpoints_one_port(monkeypatch: pytest.MonkeyPatch) -> None:
    # The kernel may hand out a just-closed port again: the second ask must not reuse it.
    ports = iter([5000, 5000, 5001, 5000, 5001, 5002])
    monkeypatch.setattr(testing, "free_port", lambda host="127.0.0.1": next(ports))
    config = make_sim_config({"a": {}, "b": {}})
    assert [config["admin_port"], config["endpoints"]["a"]["port"], config["endpoints"]["b"]["port"]] == [
        5000, 5001, 5002]
