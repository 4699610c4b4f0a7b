"""Tests of gateway.simulator.admin: every admin route, against an in-process Simulator."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from gateway.simulator import Simulator
from gateway.simulator.config import parse_sim_config

HELLO = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
async def sim() -> AsyncIterator[Simulator]:
    config = parse_sim_config(
        {
            "admin_port": 0,
            "endpoints": {
                "a": {
                    "port": 0,
                    "ttft_ms": 1,
                    "ttft_jitter": 0,
                    "output_tokens": 2,
                    "tokens_per_second": 1000,
                },
                "b": {"port": 0, "ttft_ms": 1, "output_tokens": 2, "faults": {"refuse": True}},
            },
        }
    )
    async with Simulator(config) as simulator:
        yield simulator


@pytest.fixture
async def admin(sim: Simulator) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=sim.admin_url + "/admin") as client:
        yield client


async def test_health_and_listing(sim: Simulator, admin: httpx.AsyncClient) -> None:
    assert (await admin.get("/health")).json() == {"ok": True}
    listing = (await admin.get("/endpoints")).json()
    assert set(listing) == {"a", "b"}
    assert listing["a"]["base_url"] == sim.base_url("a")
    assert listing["a"]["profile"]["port"] == sim.endpoints["a"].port != 0
    assert listing["b"]["profile"]["faults"]["refuse"] is True
    assert "attempts" not in listing["a"]["stats"]
    one = (await admin.get("/endpoints/a")).json()
    assert one["profile"] == listing["a"]["profile"]


async def test_stats_record_attempts(sim: Simulator, admin: httpx.AsyncClient) -> None:
    async with httpx.AsyncClient() as client:
        assert (await client.post(sim.base_url("a") + "/chat/completions", json=HELLO)).status_code == 200
    stats = (await admin.get("/endpoints/a/stats")).json()
    assert {k: stats[k] for k in ("requests", "active", "max_active", "completed", "cancelled")} == {
        "requests": 1,
        "active": 0,
        "max_active": 1,
        "completed": 1,
        "cancelled": 0,
    }
    (attempt,) = stats["attempts"]
    assert attempt["status"] == 200 and attempt["outcome"] == "ok" and attempt["tokens"] == 2
    assert attempt["prefix_tokens"] == 0 and attempt["stream"] is False
    assert attempt["first_byte_ms"] >= 1.0
    assert sim.stats("a")["requests"] == 1  # the in-process API agrees


async def test_patch_merges_validates_and_toggles_refuse(sim: Simulator, admin: httpx.AsyncClient) -> None:
    new = (await admin.patch("/endpoints/a", json={"ttft_ms": 7, "faults": {"drop_rate": 0.25}})).json()
    assert new["ttft_ms"] == 7 and new["faults"]["drop_rate"] == 0.25 and new["faults"]["error_status"] == 503
    bad = await admin.patch("/endpoints/a", json={"faults": {"drop_rate": 3}})
    assert bad.status_code == 400 and "faults.drop_rate" in bad.json()["error"]["message"]
    assert (await admin.patch("/endpoints/a", content=b"{oops")).status_code == 400
    assert (await admin.patch("/endpoints/a", json={"port": 1})).status_code == 400
    assert sim.endpoints["a"].profile.ttft_ms == 7  # failed patches changed nothing

    async with httpx.AsyncClient() as client:
        with pytest.raises(httpx.ConnectError):
            await client.post(sim.base_url("b") + "/chat/completions", json=HELLO)
        await admin.patch("/endpoints/b", json={"faults": {"refuse": False}})
        response = await client.post(sim.base_url("b") + "/chat/completions", json=HELLO)
        assert response.status_code == 200


async def test_reset_clears_stats_and_optionally_profiles(sim: Simulator, admin: httpx.AsyncClient) -> None:
    async with httpx.AsyncClient() as client:
        await client.post(sim.base_url("a") + "/chat/completions", json=HELLO)
        second = (await client.post(sim.base_url("a") + "/chat/completions", json=HELLO)).json()
        assert second["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
        await admin.patch("/endpoints/a", json={"capacity": 5})
        await admin.patch("/endpoints/b", json={"faults": {"refuse": False}})

        assert (await admin.post("/reset")).json() == {"ok": True}
        assert (await admin.get("/endpoints/a/stats")).json()["requests"] == 0
        assert sim.endpoints["a"].profile.capacity == 5
        third = (await client.post(sim.base_url("a") + "/chat/completions", json=HELLO)).json()
        assert third["usage"]["prompt_tokens_details"]["cached_tokens"] == 0  # prefix cache cleared

        await admin.post("/endpoints/a/reset", json={"profiles": True})
        assert sim.endpoints["a"].profile.capacity == 256
        assert sim.endpoints["b"].profile.faults.refuse is False  # only "a" was reset
        await admin.post("/reset", json={"profiles": True})
        assert sim.endpoints["b"].profile.faults.refuse is True
        with pytest.raises(httpx.ConnectError):
            await client.post(sim.base_url("b") + "/chat/completions", json=HELLO)


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/endpoints/zzz", 404),
        ("GET", "/endpoints/zzz/stats", 404),
        ("GET", "/nothing", 404),
        ("DELETE", "/endpoints/a", 404),
        ("POST", "/health", 404),
    ],
)
async def test_unknown_routes(admin: httpx.AsyncClient, method: str, path: str, status: int) -> None:
    response = await admin.request(method, path)
    assert response.status_code == status
    assert "error" in response.json()
    assert (await admin.post("/reset", content=b"[1]")).status_code == 400
