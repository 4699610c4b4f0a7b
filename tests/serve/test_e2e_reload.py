"""Reloading the catalogue without a restart: SIGHUP and `POST /admin/reload`, end to end.

A valid new file serves new requests at once while a stream that started before the reload runs to
its end on the old configuration (even though its provider was removed); stats of endpoints that
still exist are kept. An invalid file is refused with the same `<file>: <key>: <problem>` message as
at start-up (logged for SIGHUP; the admin route's 400), and the old configuration keeps serving.
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from gateway.config import ConfigError, load_config
from gateway.simulator.testing import SimProcess, make_sim_config
from tests.harness import GatewayProcess, catalogue_for

FAST = {"ttft_ms": 5, "ttft_jitter": 0, "tokens_per_second": 2000, "output_tokens": 4}
SLOW = {"ttft_ms": 20, "ttft_jitter": 0, "tokens_per_second": 30, "output_tokens": 150, "tick_ms": 100}
USER = [{"role": "user", "content": "Hello"}]
ADMIN_KEY = "admin-" + "r" * 30
http = httpx.Client(timeout=60)  # generous: the machine may be busy, and no assertion here is about time


@pytest.fixture(scope="module")
def sim() -> Any:
    with SimProcess(make_sim_config({"a": SLOW, "b": FAST, "c": FAST})) as s:
        yield s


def _first(sim: SimProcess) -> dict[str, Any]:
    return catalogue_for(sim, {"m": [{"sim": "a"}], "k": [{"sim": "c"}]})


def _second(sim: SimProcess) -> dict[str, Any]:
    """Provider `a` is gone, `m` is served by the new endpoint `b`; `k` is unchanged."""
    return catalogue_for(sim, {"m": [{"sim": "b"}], "k": [{"sim": "c"}]})


def _invalid(sim: SimProcess) -> dict[str, Any]:
    bad = _second(sim)
    bad["models"]["m"]["endpoints"][0]["price"]["output"] = -1
    return bad


def _startup_message(gw: GatewayProcess, catalogue: dict[str, Any]) -> str:
    """What `ultraroute serve` would say about this file at start-up."""
    path = gw.dir / "check" / gw.config.name
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump(catalogue))
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    return str(refused.value)


def _wait_log(gw: GatewayProcess, text: str, count: int = 1, timeout_s: float = 15) -> None:
    deadline = time.monotonic() + timeout_s
    while gw.logs().count(text) < count:
        assert time.monotonic() < deadline, f"no {text!r} in the log: {gw.logs()[-2000:]}"
        time.sleep(0.05)


def _served_by(gw: GatewayProcess, model: str) -> str:
    r = http.post(f"{gw.base_url}/chat/completions", json={"model": model, "messages": USER})
    assert r.status_code == 200, r.text
    return r.headers["x-ultraroute-endpoint"]


def _endpoint_stats(gw: GatewayProcess) -> dict[str, int]:
    data = http.get(f"{gw.base_url}/endpoints").json()["data"]
    return {e["key"]: e["stats"]["requests"] for e in data}


def _sighup(gw: GatewayProcess) -> None:
    assert gw.proc is not None
    gw.proc.send_signal(signal.SIGHUP)


def test_sighup_reloads_without_failing_a_stream_and_refuses_an_invalid_file(sim: SimProcess) -> None:
    with GatewayProcess(_first(sim)) as gw:
        for _ in range(3):
            assert _served_by(gw, "k") == "c"

        # An invalid file: refused with the start-up message, and the old catalogue keeps serving.
        expected = _startup_message(gw, _invalid(sim))
        assert "price.output: must be >= 0" in expected
        gw.config.write_text(yaml.safe_dump(_invalid(sim)))
        _sighup(gw)
        _wait_log(gw, "configuration refused")
        assert expected in gw.logs()
        assert _served_by(gw, "m") == "a"

        # A valid file, while a stream on the endpoint it removes is in flight.
        async def scenario() -> tuple[list[str], str, str | None, float, float]:
            client = openai.AsyncOpenAI(base_url=gw.base_url, api_key="unused", max_retries=0)
            stream = await client.chat.completions.create(model="m", messages=USER, stream=True)
            pieces, finish = [], None
            async for chunk in stream:
                if chunk.choices:
                    pieces.append(chunk.choices[0].delta.content or "")
                    finish = chunk.choices[0].finish_reason or finish
                if len(pieces) == 2:  # the stream is well under way: reload now
                    gw.config.write_text(yaml.safe_dump(_second(sim)))
                    _sighup(gw)
                    await asyncio.to_thread(_wait_log, gw, "configuration reloaded")
                    reloaded = time.monotonic()
                    after = await asyncio.to_thread(_served_by, gw, "m")
            return pieces, after, finish, reloaded, time.monotonic()

        pieces, after, finish, reloaded, ended = asyncio.run(scenario())
        assert after == "b"  # the next request after the reload: the new endpoint
        assert finish == "stop" and len("".join(pieces).split()) >= 148, pieces  # the old stream, whole
        stats = _endpoint_stats(gw)
        logs = gw.logs()
    assert stats["k/c"] >= 3 and stats["m/b"] == 1 and "m/a" not in stats, stats  # k's stats were kept
    assert "endpoints added: m/b; removed: m/a" in logs
    assert ended - reloaded > 1.0  # the old stream was still delivering well after the reload
    assert "Traceback" not in logs, logs[-3000:]


def test_admin_reload_answers_what_changed_or_the_error(sim: SimProcess, tmp_path: Path) -> None:
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "quick.yaml").write_text(yaml.safe_dump({"sort": "throughput"}))
    gw = GatewayProcess(_first(sim), env={"ULTRAROUTE_ADMIN_KEY": ADMIN_KEY}, policies=policies)
    admin = {"authorization": f"Bearer {ADMIN_KEY}"}
    route = {"model": "m", "messages": USER, "max_tokens": 4}
    cheap = {"x-ultraroute-policy": "cheap"}
    with gw:
        assert http.post(f"{gw.url}/admin/reload").status_code == 401
        assert http.post(f"{gw.base_url}/route", json=route, headers=cheap).status_code == 400  # no such policy

        expected = _startup_message(gw, _invalid(sim))
        gw.config.write_text(yaml.safe_dump(_invalid(sim)))
        refused = http.post(f"{gw.url}/admin/reload", headers=admin)
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["message"] == expected
        assert refused.json()["error"]["code"] == "invalid_configuration"
        assert _served_by(gw, "m") == "a"

        gw.config.write_text(yaml.safe_dump(_second(sim)))
        (policies / "cheap.yaml").write_text(yaml.safe_dump({"sort": "price"}))
        done = http.post(f"{gw.url}/admin/reload", headers=admin)
        assert done.status_code == 200, done.text
        assert done.json() | {"source": None} == {"object": "reload", "source": None, "added": ["m/b"],
                                                  "removed": ["m/a"], "restart_needed": []}
        assert _served_by(gw, "m") == "b"
        models = {m["id"]: m["endpoints"] for m in http.get(f"{gw.base_url}/models").json()["data"]}
        assert models == {"m": ["b"], "k": ["c"]}
        assert http.post(f"{gw.base_url}/route", json=route, headers=cheap).status_code == 200  # policies re-read
        spec = http.get(f"{gw.url}/openapi.json").json()["paths"]["/admin/keys"]["post"]["requestBody"]
        assert "cheap" in spec["content"]["application/json"]["schema"]["properties"]["policy"]["anyOf"][0]["enum"]
        logs = gw.logs()
    assert expected in logs and "Traceback" not in logs
