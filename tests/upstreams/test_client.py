"""The provider's key: attached to every upstream request, and taken out of anything sent back.

`redact()` is checked directly; then over real loopback sockets against a simulated provider that
quotes the key in its errors, with every logger (the upstream client's included) at DEBUG.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Any

import httpx
import orjson
import pytest
from pydantic import SecretStr

from gateway.config import Provider, build_catalogue, parse_catalogue
from gateway.errors import UpstreamError, error_body
from gateway.simulator import Simulator
from gateway.simulator.config import parse_sim_config
from gateway.upstreams import Outgoing
from gateway.upstreams.attempt import open_attempt
from gateway.upstreams.client import REDACTED, Upstreams, redact
from gateway.upstreams.stream import Meter
from tests.upstreams.test_aiohttp_tuned import sse_server_response, stream_from_raw_server

KEY = "sk-live-0123456789abcdefXYZ"


def provider(key: str | None) -> Provider:
    return Provider(name="p", base_url="http://p.test/v1", region="us", data_collection="deny", headers={},
                    api_key=SecretStr(key) if key is not None else None, key_missing=False, max_connections=8,
                    max_keepalive_connections=8, connect_timeout_s=1.0)


def test_redact_takes_out_the_key_and_long_fragments_of_it() -> None:
    p = provider(KEY)
    assert KEY not in repr(p)  # SecretStr
    assert redact(f"Incorrect API key provided: {KEY}.", p) == f"Incorrect API key provided: {REDACTED}."
    # A truncated echo still identifies the key from 12 characters on; a shorter prefix is public.
    assert redact(f"key {KEY[:15]}... and {KEY[:12]}", p) == f"key {REDACTED}... and {REDACTED}"
    assert redact(f"keys start with {KEY[:8]}", p) == f"keys start with {KEY[:8]}"
    assert redact(f"{KEY}{KEY}", p) == REDACTED * 2
    body: dict[str, Any] = {"message": KEY, "code": 401, "param": None, "hint": [f"got {KEY}", 3],
                            KEY: "as a key"}
    assert redact(body, p) == {"message": REDACTED, "code": 401, "param": None, "hint": [f"got {REDACTED}", 3],
                               REDACTED: "as a key"}


def test_redact_without_a_key_changes_nothing() -> None:
    text = "Incorrect API key provided: none"
    assert redact(text, provider(None)) is text and redact(text, provider("")) is text


@pytest.mark.parametrize("fault", [{"error_rate": 1.0, "error_status": 500}, {"error_event_rate": 1.0}])
async def test_echoed_key_is_redacted_and_never_logged_over_real_sockets(
        caplog: pytest.LogCaptureFixture, fault: dict[str, Any]) -> None:
    sim_config = parse_sim_config({"admin_port": 0, "endpoints": {"echo": {
        "port": 0, "ttft_ms": 5, "ttft_jitter": 0, "faults": {**fault, "echo_key_in_errors": True}}}})
    caplog.set_level(logging.DEBUG)  # the root logger: aiohttp's and the gateway's own
    async with Simulator(sim_config) as sim:
        file = parse_catalogue({
            "providers": {"echo": {"base_url": sim.base_url("echo"), "api_key_env": "ECHO_KEY"}},
            "models": {"m": {"endpoints": [{"provider": "echo", "model": "up", "price": {"input": 1, "output": 1}}]}},
        }, "test")
        catalogue = build_catalogue(file, "test", {"ECHO_KEY": KEY})
        endpoint = catalogue.models["m"][0]
        upstreams = Upstreams(catalogue.providers)
        body = orjson.dumps({"model": "up", "messages": [{"role": "user", "content": "hi"}], "stream": True})
        try:
            # The simulator does quote the key: unredacted, it would travel on.
            raw = await upstreams.open(endpoint, body)
            assert KEY in (await raw.aread()).decode()
            with pytest.raises(UpstreamError) as info:
                await open_attempt(upstreams, endpoint, Outgoing(body, "/chat/completions"),
                                   Meter(t_sent=time.perf_counter()), 5.0, 5.0)
        finally:
            await upstreams.aclose()
    err = info.value
    assert REDACTED in err.message and KEY[:12] not in f"{err} {error_body(err).decode()}"
    # Debug logging was on for the upstream client (aiohttp; it was httpcore before, which logged every request).
    assert logging.getLogger("aiohttp.client").isEnabledFor(logging.DEBUG)
    assert KEY[:12] not in caplog.text
    assert all(KEY[:12] not in str(r.args) for r in caplog.records)



def test_successor_keeps_the_pools_of_unchanged_providers_and_retires_the_rest() -> None:
    same, changed, removed = (replace(provider("k"), name=n) for n in ("same", "changed", "removed"))
    old = Upstreams({p.name: p for p in (same, changed, removed)},
                    lambda p: httpx.MockTransport(lambda request: httpx.Response(200)))
    new_changed = replace(changed, base_url="http://elsewhere.test/v1")
    added = replace(provider(None), name="added")
    following, retired = old.successor({"same": same, "changed": new_changed, "added": added})
    assert old._test_clients is not None and following._test_clients is not None
    assert following._test_clients["same"] is old._test_clients["same"]  # streams and connections carry on
    assert following._test_clients["changed"] is not old._test_clients["changed"]
    assert str(following._test_clients["changed"].base_url).startswith("http://elsewhere.test")
    assert set(following._test_clients) == {"same", "changed", "added"}
    assert retired._test_clients is not None and set(retired._test_clients) == {"changed", "removed"}
    assert following._providers["changed"] is new_changed  # its requests (PostTarget) are made for the new URL


async def test_the_request_asks_for_an_identity_body_once() -> None:
    """The relay passes a provider's bytes on as they are, so it must not be sent compressed ones."""
    heads: list[bytes] = []
    await stream_from_raw_server(sse_server_response(1), heads=heads)
    lines = [line.lower() for line in heads[0].split(b"\r\n")]
    assert [line for line in lines if line.startswith(b"accept-encoding:")] == [b"accept-encoding: identity"]
