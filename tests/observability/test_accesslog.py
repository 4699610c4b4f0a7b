"""`gateway.observability.accesslog`: one JSON line per request, with no prompt text and never a key.

Unit tests of the line and its queueing, then the real thing: a gateway process whose provider has a
key, requests whose prompts carry a canary, and its output read back line by line.
"""

from __future__ import annotations

import io
import logging
import time
import uuid
from types import SimpleNamespace
from typing import Any

import httpx
import orjson
import pytest

from gateway.config import build_catalogue, parse_catalogue
from gateway.context import Attempt
from gateway.dispatch import Served
from gateway.errors import AllCandidatesFailed, ModelNotFound, UpstreamError
from gateway.observability.accesslog import AccessLog
from gateway.telemetry.sample import AttemptSample, Outcome
from tests.harness import GatewayProcess
from tests.observability.conftest import SECRET_KEY

FIELDS = {"ts", "request_id", "api", "key", "model", "endpoint", "provider", "tier", "attempts", "fallback", "status",
          "outcome",
          "ttft_ms", "ttfat_ms", "duration_ms", "decode_tps", "tokens", "cost_usd", "usage_estimated",
          "dropped", "transport", "served_tier"}


def served_request() -> tuple[Served, AttemptSample]:
    data = {"providers": {"fw": {"base_url": "http://fw.test/v1"}},
            "models": {"m": {"endpoints": [{"provider": "fw", "model": "up", "tier": "fast", "id": "fw/fast",
                                            "price": {"input": 1, "output": 2}}]}}}
    endpoint = build_catalogue(parse_catalogue(data, "t"), "t", env={}).endpoints()[0]
    failed = Attempt("m/gq/x", "gq/x", "fast", Outcome.SERVER_ERROR, 503, "upstream_5xx", 0.05)
    served = Served(SimpleNamespace(endpoint=endpoint, served_tier="fast"), (failed,), time.time(), 0)  # type: ignore[arg-type]
    sample = AttemptSample(endpoint_key=endpoint.key, started_at=time.time(), outcome=Outcome.OK, status=200,
                           ttft_s=0.2104, ttfat_s=0.25, decode_tps=401.26, e2e_s=0.4, input_tokens=12,
                           output_tokens=30, cost_usd=0.00007)
    return served, sample


def lines_of(stream: io.StringIO) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in stream.getvalue().splitlines()]


@pytest.fixture
def log() -> Any:
    stream = io.StringIO()
    access = AccessLog(stream, logger_name=f"ultraroute.access.test-{uuid.uuid4().hex}")
    access.start()
    yield access, stream
    access.stop()


def test_one_json_line_per_served_request(log: Any) -> None:
    access, stream = log
    served, sample = served_request()
    access.served("req-1", served, sample, 200, None, "key_abc", usage_estimated=True)
    access.stop()  # flushes the queue
    [line] = lines_of(stream)
    assert set(line) == FIELDS
    assert line["key"] == "key_abc"  # the key's id: spend per client can be audited from the log
    assert line["request_id"] == "req-1" and line["endpoint"] == "fw/fast" and line["tier"] == "fast"
    assert line["attempts"] == 2 and line["fallback"] == [{"endpoint": "gq/x", "reason": "upstream_5xx"}]
    assert line["ttft_ms"] == 210.4 and line["decode_tps"] == 401.3 and line["tokens"]["output"] == 30
    assert line["status"] == 200 and line["outcome"] == "ok" and line["cost_usd"] == pytest.approx(0.00007)
    assert line["usage_estimated"] is True
    assert line["dropped"] == [] and line["transport"] == "http"


def test_a_websocket_response_names_its_transport(log: Any) -> None:
    access, stream = log
    served, sample = served_request()
    access.served("req-5", served, sample, 200, None, api="responses", transport="websocket")
    access.failed("req-6", ModelNotFound("nope"), "nope", api="responses", transport="websocket")
    access.stop()
    lines = lines_of(stream)
    assert [(line["api"], line["transport"]) for line in lines] == [("responses", "websocket")] * 2


def test_the_fields_the_endpoint_did_not_get_are_named(log: Any) -> None:
    access, stream = log
    served, sample = served_request()
    access.served("req-3", served, sample, 200, None, dropped=("tools.web_search", "context_management"))
    access.stop()
    [line] = lines_of(stream)
    assert line["dropped"] == ["tools.web_search", "context_management"]


def test_a_failure_is_logged_once(log: Any) -> None:
    access, stream = log
    served, sample = served_request()
    broken = UpstreamError("stream broke", status=502)
    access.served("req-2", served, sample, 502, broken)  # a non-streaming request broke after its first token
    access.failed("req-2", broken)  # ... and the app renders the same error: no second line
    access.failed("req-3", ModelNotFound("nope"), "nope")
    access.failed("req-4", AllCandidatesFailed([("a", UpstreamError("x", status=503)),
                                                ("b", UpstreamError("y", status=429))]), "m")
    access.stop()
    lines = lines_of(stream)
    assert [line["request_id"] for line in lines] == ["req-2", "req-3", "req-4"]
    assert lines[1]["status"] == 404 and lines[1]["error"] == "model_not_found" and lines[1]["attempts"] == 0
    assert lines[2]["attempts"] == 2 and lines[2]["endpoint"] == "b" and lines[2]["status"] == 429
    assert [line["model"] for line in lines] == ["m", "nope", "m"]  # failures name their model too


def test_a_deployment_logging_config_is_kept() -> None:
    logger = logging.getLogger(f"ultraroute.access.test-{uuid.uuid4().hex}")
    own = logging.StreamHandler(io.StringIO())
    logger.addHandler(own)
    access = AccessLog(io.StringIO(), logger_name=logger.name)
    access.start()
    assert logger.handlers == [own]
    access.stop()
    assert logger.handlers == [own]


def test_gateway_logs_each_request_once_without_prompt_or_key(gateway: GatewayProcess) -> None:
    canary = f"CANARY-{uuid.uuid4().hex}"
    messages = [{"role": "user", "content": f"My secret plan is {canary}."}]
    ids = {}
    with httpx.Client(base_url=gateway.base_url, timeout=30) as client:
        for i, body in enumerate([
            {"model": "m", "messages": messages, "speed": "fast", "provider": {"only": ["fast"]}},
            {"model": "m", "messages": messages, "stream": True, "provider": {"only": ["std"]}},
            {"model": "m", "messages": messages, "stream": True, "speed": "fast", "provider": {"only": ["fast"]}},
            {"model": "no-such-model", "messages": messages},
        ]):
            request_id = f"obs-{uuid.uuid4().hex[:12]}-{i}"
            r = client.post("/chat/completions", json=body, headers={"x-request-id": request_id})
            ids[request_id] = r.status_code
    assert list(ids.values()) == [200, 200, 200, 404]
    deadline = time.monotonic() + 5
    while True:  # the lines are written by a background thread
        text = gateway.logs()
        found = [orjson.loads(line) for line in text.splitlines()
                 if line.startswith("{") and any(rid in line for rid in ids)]
        if len(found) >= len(ids) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert sorted(line["request_id"] for line in found) == sorted(ids)  # exactly one line each
    by_id = {line["request_id"]: line for line in found}
    for request_id, status in ids.items():
        assert by_id[request_id]["status"] == status
        assert by_id[request_id]["model"] in ("m", "no-such-model")  # failed or not, the line names it
    served = [line for line in found if line["status"] == 200]
    assert {line["endpoint"] for line in served} == {"fast", "std"}
    assert all(line["ttft_ms"] > 0 and line["tokens"]["output"] > 0 and line["cost_usd"] > 0 for line in served)
    assert canary not in text  # no prompt text, anywhere in the gateway's output
    assert SECRET_KEY not in text and SECRET_KEY[-12:] not in text  # never a key, not even part of one
