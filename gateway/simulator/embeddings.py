"""`POST /v1/embeddings` on a simulated endpoint: deterministic small vectors after the profile's TTFT.

Does: validate the body (model, input), apply the endpoint's terminal faults (error, hang) like a
chat request, wait the sampled TTFT (the whole answer's latency), and answer with one vector per
input (`structured.embedding`), as floats or, for `encoding_format: "base64"` (the OpenAI SDK's
default), as little-endian float32 in base64. Counted in the endpoint's stats like chat requests.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import TYPE_CHECKING, Any

import orjson

from gateway.simulator.chat_request import ApiError, rate_limited
from gateway.simulator.http11 import HttpConnection, Request
from gateway.simulator.structured import EMBEDDING_DIMENSIONS, embedding, embedding_data

if TYPE_CHECKING:
    from gateway.simulator.endpoint import Endpoint


def _inputs(body: Any) -> list[str]:
    value = body.get("input") if isinstance(body, dict) else None
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return list(value)
    if isinstance(value, list) and value and all(type(v) is int for v in value):
        return [" ".join(map(str, value))]
    if isinstance(value, list) and value and all(isinstance(v, list) and all(type(t) is int for t in v)
                                                 for v in value):
        return [" ".join(map(str, v)) for v in value]
    raise ApiError(400, "'input' must be a string or an array of strings.", "invalid_request_error",
                   "invalid_value", "input")


def embeddings_body(raw: bytes, model_check: str | None) -> bytes:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise ApiError(400, "We could not parse the JSON body of your request.", "invalid_request_error",
                       "invalid_json") from None
    inputs = _inputs(body)
    model = body.get("model")
    if not isinstance(model, str) or (model_check is not None and model != model_check):
        raise ApiError(404, f"The model `{model}` does not exist.", "invalid_request_error", "model_not_found",
                       "model", outcome="model_not_found")
    dims = body.get("dimensions") or EMBEDDING_DIMENSIONS
    as_base64 = body.get("encoding_format") == "base64"
    tokens = sum(math.ceil(len(text) / 4) for text in inputs)
    data = [{"object": "embedding", "index": i, "embedding": embedding_data(embedding(text, dims), as_base64)}
            for i, text in enumerate(inputs)]
    return orjson.dumps({"object": "list", "data": data, "model": model,
                         "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})


async def serve_embeddings(endpoint: Endpoint, req: Request, conn: HttpConnection) -> None:
    profile = endpoint.profile
    attempt = endpoint._stats.begin(time.time())
    loop = asyncio.get_running_loop()
    try:
        try:
            answer = embeddings_body(req.body, profile.model)
            if endpoint.active >= profile.capacity:
                raise rate_limited(profile, f"Rate limit reached: {profile.capacity} concurrent requests")
        except ApiError as err:
            conn.send(err.status, err.body, err.headers)
            attempt.status, attempt.outcome = err.status, err.outcome
            return
        plan = endpoint._draw(profile)
        attempt.ttft_ms = plan.ttft_s * 1000.0
        endpoint.active += 1
        try:
            if plan.fault == "error":
                status = profile.faults.error_status
                err = rate_limited(profile, "Rate limit reached (simulated)") if status == 429 else ApiError(
                    status, f"Simulated upstream error {status}", "server_error", "server_error", outcome="error")
                conn.send(err.status, err.body, err.headers)
                attempt.status, attempt.outcome = err.status, err.outcome
                return
            if plan.fault == "hang":
                attempt.outcome = "hung"
                await loop.create_future()  # until the client disconnects
            await asyncio.sleep(plan.ttft_s)
            conn.send(200, answer, [("x-simulator-endpoint", endpoint.name)])
            attempt.status, attempt.outcome = 200, "ok"
        except asyncio.CancelledError:
            attempt.cancelled = True
            if attempt.outcome == "in_progress":
                attempt.outcome = "cancelled"
        finally:
            endpoint.active -= 1
    finally:
        endpoint._stats.finish(attempt, loop.time() - req.arrived)
