"""End to end: provider keys never leave the gateway -- not in logs, errors, headers or its APIs.

Every simulated provider has its own distinctive key in the gateway's environment, and several
quote it back in their errors (`echo_key_in_errors`), as careless real providers do. Streaming and
non-streaming traffic, through httpx and the openai SDK, meets every fault: 500s, 401s, 429s, error
events, hangs, dropped and stalled streams, malformed chunks and refused connections. Everything a
client or operator can see is captured -- every response's status, headers and body, the SDK's
exceptions, /v1/endpoints, /v1/models, /v1/route, /metrics and the gateway's whole log at
`--log-level debug` -- and scanned for the keys and for their first 12 characters.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from gateway.simulator.testing import SimProcess, make_sim_config
from gateway.upstreams.client import REDACTED
from tests.harness import GatewayProcess, catalogue_for

USER = [{"role": "user", "content": "Tell me a secret."}]
PROFILE = {"ttft_ms": 30, "ttft_jitter": 0, "tokens_per_second": 1000, "output_tokens": 8}
ECHO = {"echo_key_in_errors": True}
SIMS: dict[str, dict[str, Any]] = {
    "err500": {"faults": {**ECHO, "error_rate": 1.0, "error_status": 500}},
    "event": {"faults": {**ECHO, "error_event_rate": 1.0}},
    "unauth": {"faults": {**ECHO, "error_rate": 1.0, "error_status": 401}},
    "limited": {"capacity": 0, "retry_after_s": 0.1, "faults": ECHO},
    "hang": {"faults": {**ECHO, "hang_rate": 1.0}},
    "drop": {"output_tokens": 20, "faults": {**ECHO, "drop_rate": 1.0, "drop_after_tokens": 3}},
    "stall": {"output_tokens": 20, "faults": {**ECHO, "stall_rate": 1.0, "drop_after_tokens": 2}},
    "malformed": {"faults": {**ECHO, "malformed_rate": 1.0, "no_done_rate": 0.5}},
    "refused": {"faults": {"refuse": True}},
    "ok": {"faults": ECHO},
}
# Random first: the first 12 characters are distinctive too, so finding them anywhere means a leak.
KEYS = {name: f"sk-{uuid.uuid4().hex}-live-{name}" for name in SIMS}
KEY_ENV = {name: f"SECRETS_TEST_KEY_{name.upper()}" for name in SIMS}
MODELS: dict[str, list[dict[str, Any]]] = {
    **{f"solo-{name}": [{"sim": name}] for name in SIMS},
    "mix": [{"sim": "err500", "id": "a"}, {"sim": "event", "id": "b"}, {"sim": "unauth", "id": "c"},
            {"sim": "limited", "id": "d"}, {"sim": "ok", "id": "e"}],
}


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    with SimProcess(make_sim_config({name: {**PROFILE, **p} for name, p in SIMS.items()})) as process:
        yield process


def gateway_for(sim: SimProcess) -> GatewayProcess:
    # Circuits stay closed, so every request reaches its faulty provider and gets the echo back.
    catalogue = catalogue_for(sim, MODELS, gateway={"breaker_failures": 10_000, "stall_timeout_s": 0.5,
                                                     "ttft_budget_min_s": 0.5, "ttft_budget_max_s": 0.5})
    for name, provider in catalogue["providers"].items():
        provider["api_key_env"] = KEY_ENV[name]
    env = {KEY_ENV[name]: key for name, key in KEYS.items()}
    return GatewayProcess(catalogue, env=env, log_level="debug")


def chat_traffic(gateway: GatewayProcess, model: str, seen: list[tuple[str, str]]) -> None:
    """One request of each kind: httpx JSON and SSE (with the routing metadata), SDK JSON and stream."""
    url = f"{gateway.base_url}/chat/completions"
    meta = {"x-ultraroute-metadata": "enabled"}
    with httpx.Client(timeout=30) as client:
        r = client.post(url, json={"model": model, "messages": USER}, headers=meta)
        seen.append((f"{model} json", f"{r.status_code} {r.headers.multi_items()} {r.text}"))
        parts: list[bytes] = []
        with client.stream("POST", url, json={"model": model, "messages": USER, "stream": True},
                           headers=meta) as r:
            try:
                parts.extend(r.iter_raw())
            except httpx.HTTPError as exc:
                parts.append(repr(exc).encode())
            seen.append((f"{model} sse", f"{r.status_code} {r.headers.multi_items()} {b''.join(parts)!r}"))
    sdk = openai.OpenAI(base_url=gateway.base_url, api_key="client-key-not-checked", max_retries=0, timeout=30)
    for stream in (False, True):
        where = f"{model} sdk stream={stream}"
        try:
            if stream:
                chunks = sdk.chat.completions.create(model=model, messages=USER, stream=True)  # type: ignore[arg-type]
                seen.extend((where, chunk.model_dump_json()) for chunk in chunks)
            else:
                completion = sdk.chat.completions.create(model=model, messages=USER)  # type: ignore[arg-type]
                seen.append((where, completion.model_dump_json()))
        except openai.APIError as exc:
            seen.append((where, f"{exc!s} {exc!r} {exc.body!r}"))
            response = getattr(exc, "response", None)
            if isinstance(response, httpx.Response):
                seen.append((where, f"{response.headers.multi_items()} {response.text}"))


def api_views(gateway: GatewayProcess, seen: list[tuple[str, str]]) -> None:
    with httpx.Client(base_url=gateway.url, timeout=10) as client:
        views = [client.get(path) for path in ("/v1/endpoints", "/v1/endpoints?window_s=60", "/v1/models",
                                               "/metrics", "/healthz", "/dashboard")]
        views += [client.post("/v1/route", json={"model": model, "messages": USER}) for model in MODELS]
    for r in views:
        assert r.status_code == 200, (r.request.url, r.text)
        seen.append((f"{r.request.method} {r.request.url.path}", f"{r.headers.multi_items()} {r.text}"))


def leaks(text: str) -> list[str]:
    """The providers whose key, or its first 12 characters, appear in `text`."""
    return [name for name, key in KEYS.items() if key[:12] in text]


def test_provider_keys_never_leave_the_gateway(sim: SimProcess) -> None:
    seen: list[tuple[str, str]] = []
    with gateway_for(sim) as gateway:
        for model in MODELS:
            chat_traffic(gateway, model, seen)
        api_views(gateway, seen)
    # Stopped: the access log's queue is flushed and the shutdown is logged too.
    seen.append(("gateway log", gateway.logs()))

    found = [(where, leaks(text)) for where, text in seen if leaks(text)]
    assert not found, f"provider keys leaked: {found}"
    # Not vacuous: providers did quote a key, the gateway redacted it, and clients saw the result.
    client_side = " ".join(text for where, text in seen if where != "gateway log")
    assert f"Incorrect API key provided: {REDACTED}" in client_side  # err500, event, limited
    assert "upstream_auth_failed" in client_side  # the 401's text is dropped altogether
    assert "('x-ultraroute-endpoint', 'e')" in client_side  # "mix" failed over to the healthy provider
    assert all(sim.stats(name)["requests"] >= 4 for name in ("err500", "event", "hang", "drop", "stall"))
