"""The dispatch loop, with outcomes scripted at the transport seam (`httpx.MockTransport`).

End-to-end tests against the simulator cover the same behaviour over real sockets; these pin down
each branch of the loop cheaply and exactly.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import httpx
import orjson
import pytest

from gateway.config import Catalogue, load_catalogue
from gateway.context import Candidate, ChatRequest, Plan
from gateway.dispatch import Dispatcher, DispatchLimits
from gateway.errors import AllCandidatesFailed, GatewayError, UpstreamError, error_body
from gateway.health.board import HealthBoard
from gateway.record import Recorder
from gateway.relay import collect
from gateway.retry import RetryBudget
from gateway.routing.figures import Figures
from gateway.routing.router import Router
from gateway.shaper import Shaper
from gateway.telemetry import MemoryStore
from gateway.telemetry.sample import AttemptSample, Outcome
from gateway.upstreams.attempt import dropped_for, upstream_body
from gateway.upstreams.client import REDACTED, Upstreams

CATALOGUE = """
providers:
  a: {base_url: "http://a.test/v1", api_key_env: A_KEY}
  b: {base_url: "http://b.test/v1"}
models:
  m:
    endpoints:
      - {provider: a, model: up-a, tier: fast, price: {input: 1, output: 2}, extra_body: {service_tier: x}}
      - {provider: b, model: up-b, price: {input: 1, output: 2}}
"""

Handler = Callable[[httpx.Request], httpx.Response]


def sse(*events: object) -> bytes:
    return b"".join(b"data: " + (e if isinstance(e, bytes) else orjson.dumps(e)) + b"\n\n" for e in events)


def token(text: str) -> dict:
    return {"id": "x", "created": 1, "model": "up", "choices": [{"index": 0, "delta": {"content": text}}]}


OK_STREAM = sse(token("hi"), token(" there"), {"choices": [], "usage": {"prompt_tokens": 3,
                                                                       "completion_tokens": 2}}, b"[DONE]")


@pytest.fixture
def catalogue(tmp_path: Path) -> Catalogue:
    path = tmp_path / "providers.yaml"
    path.write_text(CATALOGUE)
    return load_catalogue(path, env={"A_KEY": "sk-test-secret"})[0]


def request() -> ChatRequest:
    return ChatRequest(request_id="r", body={"model": "m", "messages": [{"role": "user", "content": "x"}]},
                       model="m", stream=False, include_usage=False, prompt_chars=1)


async def run(catalogue: Catalogue, handlers: dict[str, Handler], budget_s: float = 2.0,
              health: HealthBoard | None = None, router: Callable[[MemoryStore], Router] | None = None,
              plan: Plan | None = None, hedge_after_ms: float | None = None):
    seen: list[httpx.Request] = []

    def factory(provider):  # one MockTransport per provider, as Upstreams builds one client each
        def handle(req: httpx.Request) -> httpx.Response:
            seen.append(req)
            return handlers[provider.name](req)
        return httpx.MockTransport(handle)

    upstreams = Upstreams(catalogue.providers, factory)
    store = MemoryStore()
    health = health or HealthBoard()
    recorder = Recorder(store, router(store) if router else Router(catalogue, store), health)
    none = Figures(None, None, None, 0, 0, "none")
    plan = plan or Plan(model="m", candidates=tuple(Candidate(e, none, 0) for e in catalogue.models["m"]))
    limits = DispatchLimits(stall_timeout_s=5.0, ttft_budget_min_s=budget_s, ttft_budget_max_s=budget_s)
    dispatcher = Dispatcher(upstreams, recorder, health, store, limits, RetryBudget())
    try:
        served = await dispatcher.dispatch(request(), plan, hedge_after_ms)
        completion = await collect(served.stream, "m")
        await served.stream.aclose()
        return served, completion, seen, store
    finally:
        await upstreams.aclose()


def respond(status: int, body: bytes, headers: dict[str, str] | None = None) -> httpx.Response:
    # A stream, not `content=`: a real network response arrives unread.
    return httpx.Response(status, stream=httpx.ByteStream(body), headers=headers or {})


def stream_response(body: bytes) -> Handler:
    return lambda req: respond(200, body, {"content-type": "text/event-stream"})


def error(status: int, code: str | None = None, headers: dict[str, str] | None = None) -> Handler:
    body = orjson.dumps({"error": {"message": f"boom {status}", "type": "x", "code": code, "param": None}})
    return lambda req: respond(status, body, headers)


def test_upstream_body_rewrites_model_and_always_streams(catalogue: Catalogue) -> None:
    body = orjson.loads(upstream_body(request(), catalogue.models["m"][0]))
    assert body["model"] == "up-a" and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True} and body["service_tier"] == "x"


async def test_first_endpoint_serves(catalogue: Catalogue) -> None:
    served, completion, seen, _ = await run(catalogue, {"a": stream_response(OK_STREAM)})
    assert served.attempts == () and completion["choices"][0]["message"]["content"] == "hi there"
    assert seen[0].headers["authorization"] == "Bearer sk-test-secret"
    assert seen[0].url == "http://a.test/v1/chat/completions"


@pytest.mark.parametrize(("status", "outcome", "tries_at_a"), [
    (429, Outcome.RATE_LIMITED, 1),  # another candidate is left: fail over at once
    (503, Outcome.SERVER_ERROR, 1),  # unavailable: fail over at once
    (500, Outcome.SERVER_ERROR, 2),  # a single 500: one more try at the same endpoint
    (401, Outcome.SERVER_ERROR, 1),  # our key is refused: misconfigured, never retried
])
async def test_fails_over_on_retryable_or_misconfigured(catalogue: Catalogue, status: int,
                                                        outcome: Outcome, tries_at_a: int) -> None:
    served, _, seen, store = await run(catalogue, {"a": error(status), "b": stream_response(OK_STREAM)})
    assert [a.outcome for a in served.attempts] == [outcome] * tries_at_a
    assert served.stream.endpoint.id == "b/standard" and len(seen) == tries_at_a + 1
    assert store.in_flight("m/a/fast") == 0  # every begin() was paired with a record()


async def test_client_error_returns_at_once(catalogue: Catalogue) -> None:
    with pytest.raises(UpstreamError) as info:
        await run(catalogue, {"a": error(400, "invalid_value"), "b": stream_response(OK_STREAM)})
    assert info.value.status == 400 and info.value.code == "invalid_value"


async def test_context_length_exceeded_moves_to_a_larger_context_only(catalogue: Catalogue) -> None:
    # Neither endpoint declares a context length: none is known to be larger, so the error comes back.
    with pytest.raises(AllCandidatesFailed) as info:
        await run(catalogue, {"a": error(400, "context_length_exceeded"), "b": stream_response(OK_STREAM)})
    assert info.value.status == 400 and info.value.code == "context_length_exceeded"


async def test_error_event_in_200_stream_fails_over(catalogue: Catalogue) -> None:
    bad = sse({"error": {"message": "overloaded", "code": 503}})
    served, _, _, _ = await run(catalogue, {"a": stream_response(bad), "b": stream_response(OK_STREAM)})
    assert served.attempts[0].status == 503 and served.stream.endpoint.id == "b/standard"


async def test_all_failed_carries_every_failure_and_renders_the_last(catalogue: Catalogue) -> None:
    with pytest.raises(AllCandidatesFailed) as info:
        await run(catalogue, {"a": error(429, headers={"retry-after": "3"}), "b": error(503)})
    err = info.value
    assert [e.status for _, e in err.failures] == [429, 503] and err.status == 503
    assert err.last.retry_after_s is None
    assert "all candidates failed" in err.message and err.headers()["x-should-retry"] == "false"


async def test_malformed_chunk_is_skipped(catalogue: Catalogue) -> None:
    body = sse(token("a"), b"{not json", token("b"), b"[DONE]")
    served, completion, _, _ = await run(catalogue, {"a": stream_response(body)})
    assert completion["choices"][0]["message"]["content"] == "ab" and served.stream.meter.malformed == 1


async def test_first_token_budget(catalogue: Catalogue) -> None:
    class Silent(httpx.AsyncByteStream):
        async def __aiter__(self):
            await asyncio.sleep(10)
            yield b""

    silent = lambda req: httpx.Response(200, stream=Silent())  # noqa: E731
    served, _, _, _ = await run(catalogue, {"a": silent, "b": stream_response(OK_STREAM)}, budget_s=0.2)
    assert served.attempts[0].outcome is Outcome.TIMEOUT and served.attempts[0].duration_s < 2.0  # not the 10 s


def echoing_key(where: str, status: int) -> Handler:
    """A careless provider: its error quotes the key it was sent, whole and as a fragment."""
    def handle(req: httpx.Request) -> httpx.Response:
        key = req.headers["authorization"].removeprefix("Bearer ")
        error = {"message": f"Incorrect API key provided: {key}", "type": "x", "code": status, "param": None,
                 "hint": [f"keys look like {key[:13]}..."]}
        if where == "http":
            return respond(status, orjson.dumps({"error": error}))
        before = [token("hi")] if where == "mid_stream" else []
        return respond(200, sse(*before, {"error": error}), {"content-type": "text/event-stream"})
    return handle


@pytest.mark.parametrize(("where", "status"), [("http", 400), ("http", 500), ("event", 400), ("event", 503),
                                               ("mid_stream", 502)])
async def test_a_key_the_provider_echoes_never_reaches_the_error(catalogue: Catalogue, where: str,
                                                                  status: int) -> None:
    seen: list[httpx.Request] = []
    echo = echoing_key(where, status)

    def a(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        return echo(req)

    with pytest.raises(GatewayError) as info:  # a's own error, or AllCandidatesFailed once "b" failed too
        await run(catalogue, {"a": a, "b": error(503)})
    assert seen and "sk-test-secret" in seen[0].headers["authorization"]  # the key did go out
    err = info.value
    errors = [err, *(e for _, e in getattr(err, "failures", ()))]
    echoed = [e for e in errors if isinstance(e, UpstreamError) and e.body and "hint" in e.body]
    assert echoed and REDACTED in error_body(echoed[0]).decode()
    for e in errors:
        shown = f"{e} {error_body(e).decode()} {getattr(e, 'body', None)}"
        assert "sk-test-secr" not in shown, shown  # neither the key nor its first 12 characters


async def test_a_429_that_says_come_back_soon_is_waited_for_before_leaving_the_model(catalogue: Catalogue) -> None:
    answers = iter([error(429, headers={"retry-after-ms": "300"}), stream_response(OK_STREAM)])
    start = time.perf_counter()
    served, _, seen, _ = await run(catalogue, {"a": error(429, headers={"retry-after": "30"}),
                                               "b": lambda req: next(answers)(req)})
    elapsed = time.perf_counter() - start
    # a: too long to wait; b: 300 ms, waited for once the model had no other endpoint, then served.
    assert served.stream.endpoint.id == "b/standard" and len(seen) == 3 and 0.3 <= elapsed < 1.5
    assert [a.endpoint_id for a in served.attempts] == ["a/fast", "b/standard"]


async def test_the_429_of_a_capacity_probe_does_not_cool_the_endpoint_down(catalogue: Catalogue) -> None:
    a = catalogue.models["m"][0]
    rate_limited = AttemptSample(a.key, 0.0, Outcome.RATE_LIMITED, 429, None, None, None, 0.0, in_flight_at_start=1)

    def probing(store: MemoryStore) -> Router:  # learned: a takes 1; 30 s later the limit grows: a probe
        router = Router(catalogue, store)
        router.observe(rate_limited)
        speed = router.speed_model(a.key)
        assert speed is not None and speed.capacity(time.monotonic() + 30.0) == 2
        store.begin(a.key)  # the one a takes, in flight: this request is the second
        return router

    handlers = {"a": error(429, headers={"retry-after": "5"}), "b": stream_response(OK_STREAM)}
    probed, fresh = HealthBoard(), HealthBoard()
    served, _, _, _ = await run(catalogue, handlers, health=probed, router=probing)
    assert served.stream.endpoint.id == "b/standard"
    assert probed.cooldown_left(a) == 0  # the limit the router keeps to stands: a still takes one
    await run(catalogue, handlers, health=fresh)
    assert fresh.cooldown_left(a) > 4  # a 429 that is news: the endpoint waits as it was told


async def test_a_429_is_tried_again_once_only(catalogue: Catalogue) -> None:
    with pytest.raises(AllCandidatesFailed):
        await run(catalogue, {"a": error(503), "b": error(429, headers={"retry-after-ms": "100"})})


async def test_unsupported_parameter_moves_on_content_policy_does_not(catalogue: Catalogue) -> None:
    served, _, _, _ = await run(catalogue, {"a": error(400, "unsupported_parameter"), "b": stream_response(OK_STREAM)})
    assert served.stream.endpoint.id == "b/standard"
    with pytest.raises(UpstreamError) as info:
        await run(catalogue, {"a": error(400, "content_policy_violation"), "b": stream_response(OK_STREAM)})
    assert info.value.code == "content_policy_violation"


async def test_usage_is_estimated_when_the_upstream_sends_none(catalogue: Catalogue) -> None:
    served, completion, _, _ = await run(catalogue, {"a": stream_response(sse(token("hi"), token(" there"),
                                                                                  b"[DONE]"))})
    assert completion["usage"] == {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3, "estimated": True}
    assert served.stream.meter.usage_estimated


def test_a_field_kept_for_a_capability_reaches_only_endpoints_that_have_it(catalogue: Catalogue) -> None:
    asked = request()._replace(body={**request().body, "reasoning_effort": "high"}, dropped=("tools.web_search",),
                    capability_fields=(("reasoning_effort", "reasoning", "thinking"),))
    reasons = replace(catalogue.models["m"][0], capabilities=frozenset({"reasoning"}))
    plain = replace(catalogue.models["m"][0], capabilities=frozenset())
    assert orjson.loads(upstream_body(asked, reasons))["reasoning_effort"] == "high"
    assert "reasoning_effort" not in orjson.loads(upstream_body(asked, plain))
    assert dropped_for(asked, reasons) == ("tools.web_search",)
    assert dropped_for(asked, plain) == ("tools.web_search", "thinking")


def test_a_message_field_kept_for_a_capability_is_removed_from_every_message(catalogue: Catalogue) -> None:
    turns = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yes", "reasoning_content": "hmm"}]
    asked = request()._replace(body={**request().body, "messages": turns},
                    capability_fields=(("messages.reasoning_content", "reasoning", "input.reasoning"),))
    reasons = replace(catalogue.models["m"][0], capabilities=frozenset({"reasoning"}))
    plain = replace(catalogue.models["m"][0], capabilities=frozenset())
    assert orjson.loads(upstream_body(asked, reasons))["messages"][1]["reasoning_content"] == "hmm"
    assert orjson.loads(upstream_body(asked, plain))["messages"] == [
        {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yes"}]
    assert turns[1]["reasoning_content"] == "hmm"  # the request's own body is kept for the next endpoint
    assert dropped_for(asked, plain) == ("input.reasoning",)
    also = asked._replace(dropped=("input.reasoning",))  # an item with nothing readable was dropped as well
    assert dropped_for(also, plain) == ("input.reasoning",)


def test_an_endpoint_without_stream_usage_is_not_asked_for_it(catalogue: Catalogue) -> None:
    quiet = replace(catalogue.models["m"][1], stream_usage=False)
    assert "stream_options" not in orjson.loads(upstream_body(request(), quiet))


async def test_a_stream_without_usage_is_estimated_at_the_endpoint_s_tokens_per_chunk(catalogue: Catalogue) -> None:
    """A host that packs four tokens in a chunk: once one of its answers has shown that with usage, a
    stream of it that sends none (one that broke, say) is estimated -- and so charged, and counted
    against max_tokens -- at four tokens a chunk, not one (issue 32, item 8)."""
    four = sse(token("a b c d"), token(" e f g h"), {"choices": [], "usage": {"prompt_tokens": 3,
                                                                            "completion_tokens": 8}}, b"[DONE]")
    bare = sse(token("a b c d"), token(" e f g h"), token(" i j k l"), b"[DONE]")
    bodies = iter([four, bare])
    upstreams = Upstreams(catalogue.providers, lambda provider: httpx.MockTransport(
        lambda req: respond(200, next(bodies), {"content-type": "text/event-stream"})))
    store = MemoryStore()
    health = HealthBoard()
    recorder = Recorder(store, Router(catalogue, store), health)
    none = Figures(None, None, None, 0, 0, "none")
    plan = Plan(model="m", candidates=(Candidate(catalogue.models["m"][0], none, 0),))
    dispatcher = Dispatcher(upstreams, recorder, health, store, DispatchLimits(stall_timeout_s=5.0), RetryBudget())
    try:
        usages = []
        for _ in range(2):
            served = await dispatcher.dispatch(request(), plan)
            usages.append((await collect(served.stream, "m"))["usage"])
            sample = recorder.record(served.stream.endpoint, served.stream.meter, Outcome.OK, 200,
                                     served.started_at, served.in_flight_at_start)
    finally:
        await upstreams.aclose()
    assert usages[0]["completion_tokens"] == 8 and "estimated" not in usages[0]
    assert usages[1] == {"prompt_tokens": 1, "completion_tokens": 12, "total_tokens": 13, "estimated": True}
    assert sample.output_tokens == 12 and sample.cost_usd == pytest.approx((1 * 1 + 12 * 2) / 1e6)


FALLBACK_CATALOGUE = """
providers:
  a: {base_url: "http://a.test/v1"}
  b: {base_url: "http://b.test/v1"}
models:
  m:
    endpoints: [{provider: a, model: up-a, price: {input: 1, output: 2}}]
  f:
    endpoints: [{provider: b, model: up-b, price: {input: 1, output: 2}}]
"""


@pytest.mark.parametrize("hedged", [False, True])
async def test_a_fallback_model_is_sent_its_own_request_hedged_or_not(tmp_path: Path, hedged: bool) -> None:
    path = tmp_path / "providers.yaml"
    path.write_text(FALLBACK_CATALOGUE)
    cat = load_catalogue(path, env={})[0]
    own = request()._replace(body={**request().body, "max_tokens": 7})  # a `fallbacks` entry's max_tokens
    none = Figures(None, None, None, 0, 0, "none")
    plan = Plan(model="m", candidates=(Candidate(cat.models["m"][0], none, 0), Candidate(cat.models["f"][0], none, 0)),
                model_requests={"f": own})

    async def slow(req: httpx.Request) -> httpx.Response:
        await asyncio.sleep(1.0)  # no token before the hedge starts the fallback model's endpoint
        return respond(200, OK_STREAM, {"content-type": "text/event-stream"})

    handlers = {"a": slow if hedged else error(503), "b": stream_response(OK_STREAM)}
    served, _, seen, _ = await run(cat, handlers, plan=plan, hedge_after_ms=50 if hedged else None)
    assert served.stream.endpoint.model == "f"
    sent = {req.url.host: orjson.loads(req.content) for req in seen}
    assert "max_tokens" not in sent["a.test"]  # the model asked for: the request as asked
    assert sent["b.test"]["max_tokens"] == 7 and sent["b.test"]["model"] == "up-b"


async def test_a_probe_takes_its_turn_at_the_providers_rate_limit_or_is_not_sent(tmp_path: Path) -> None:
    # Unshaped, a probe spent a request the shaper had promised a client's, which then met a 429.
    path = tmp_path / "limited.yaml"
    path.write_text(CATALOGUE.replace('a: {base_url: "http://a.test/v1", api_key_env: A_KEY}',
                                      'a: {base_url: "http://a.test/v1", api_key_env: A_KEY, '
                                      'rate_limits: {requests_per_minute: 6, burst_s: 30}}'))
    cat = load_catalogue(path, env={"A_KEY": "sk-test-secret"})[0]
    a = cat.models["m"][0]
    seen: list[httpx.Request] = []

    def handle(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        return respond(200, OK_STREAM, {"content-type": "text/event-stream"})

    upstreams = Upstreams(cat.providers, lambda provider: httpx.MockTransport(handle))
    store, health = MemoryStore(), HealthBoard()
    limits = DispatchLimits(stall_timeout_s=5.0, ttft_budget_min_s=0.2, ttft_budget_max_s=0.2)
    dispatcher = Dispatcher(upstreams, Recorder(store, Router(cat, store), health), health, store, limits,
                            RetryBudget())
    shaper = dispatcher.shaper = Shaper(list(cat.providers.values()))
    await shaper.start()
    try:
        assert (await dispatcher.probe(a)).outcome is Outcome.OK  # the burst (3, less a little) admits it
        assert len(seen) == 1
        while await shaper.acquire(a, 1):  # the clients take the rest
            pass
        started = time.perf_counter()
        sample = await dispatcher.probe(a)
        assert sample.outcome is Outcome.RATE_LIMITED and len(seen) == 1  # not sent
        assert 0.15 <= time.perf_counter() - started < 1.0  # it waited its turn for the first-token budget
    finally:
        await shaper.stop()
        await upstreams.aclose()
