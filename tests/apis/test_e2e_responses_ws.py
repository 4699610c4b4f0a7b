"""End to end: the Responses WebSocket (`GET /v1/responses` upgraded) with the official `openai` SDK's
`client.responses.connect()` (and, for Codex's frames, a plain `websockets` client), against real
gateway processes in front of the simulator; what the upstream received is read back from it.

`quick` answers at once; `slow` takes ~2 s per response (20 tokens at 10 tok/s), long enough for a
second frame or a SIGTERM to arrive while it runs; `broken` drops its stream after 3 tokens.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from openai.lib.responses_websocket import ResponsesWebSocketLimits, ResponsesWebSocketSession
from prometheus_client.parser import text_string_to_metric_families
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from gateway.simulator.testing import SimProcess, make_sim_config
from tests.harness import ROOT, GatewayProcess, catalogue_for

QUICK = {"ttft_ms": 20, "ttft_jitter": 0, "tokens_per_second": 2000, "output_tokens": 12}
SLOW = {"ttft_ms": 20, "ttft_jitter": 0, "tokens_per_second": 10, "output_tokens": 20, "tick_ms": 100,
        "slowdown_per_user": 0}
BROKEN = {**QUICK, "faults": {"drop_rate": 1.0, "drop_after_tokens": 3}}  # the stream breaks after 3 tokens
FIXTURES = ROOT / "tests" / "fixtures" / "agents"  # what Codex CLI 0.169.0 really sent (README there)
HANDSHAKE = {"host", "connection", "upgrade", "sec-websocket-version", "sec-websocket-key", "sec-websocket-extensions"}
TERMINAL = ("response.completed", "response.incomplete", "response.failed", "error")
WEATHER_TOOL = {"type": "function", "name": "get_weather", "description": "Weather in a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                               "required": ["city"]}}


@pytest.fixture(scope="module")
def ws_sim() -> Iterator[SimProcess]:
    with SimProcess(make_sim_config({"quick": QUICK, "slow": SLOW, "broken": BROKEN})) as sim:
        yield sim


def _catalogue(sim: SimProcess, **gateway: Any) -> dict[str, Any]:
    return catalogue_for(sim, {"m": [{"sim": "quick"}], "slow": [{"sim": "slow"}], "broken": [{"sim": "broken"}]},
                         gateway={"explore_rate": 0.0, **gateway})


class Keyed(GatewayProcess):
    key: str


@pytest.fixture(scope="module")
def ws_gateway(ws_sim: SimProcess) -> Iterator[Keyed]:
    gw = Keyed(_catalogue(ws_sim), open_access=False)
    gw.key = gw.create_key()
    with gw:
        yield gw


def client(gw: GatewayProcess, key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url, api_key=key, max_retries=0)


def until_done(conn: Any) -> list[Any]:
    """The events of one response, up to its terminal event (or an `error` event refusing it)."""
    events = []
    for event in conn:
        events.append(event)
        if event.type in TERMINAL:
            return events
    raise AssertionError(f"the connection closed after {[e.type for e in events]}")


def text_of(events: list[Any]) -> str:
    return "".join(e.delta for e in events if e.type == "response.output_text.delta")


def metric(gw: GatewayProcess, name: str, **labels: str) -> float:
    families = text_string_to_metric_families(httpx.get(f"{gw.url}/metrics", timeout=30).text)
    return sum(s.value for f in families for s in f.samples
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


def wait_for_metric(gw: GatewayProcess, name: str, value: float) -> None:
    deadline = time.monotonic() + 20
    while metric(gw, name) != value:
        assert time.monotonic() < deadline, f"{name} stayed at {metric(gw, name)}, not {value}"
        time.sleep(0.05)


def test_two_responses_on_one_connection_continue_with_store_false(ws_gateway: Keyed, ws_sim: SimProcess) -> None:
    with client(ws_gateway, ws_gateway.key).responses.connect() as conn:
        conn.response.create(model="m", input="Say hello", instructions="Be brief.", store=False)
        first = until_done(conn)
        conn.response.create(model="m", input="And again?", previous_response_id=first[-1].response.id, store=False)
        second = until_done(conn)
    assert [e.sequence_number for e in first] == list(range(len(first)))
    assert first[-1].type == second[-1].type == "response.completed"
    assert second[-1].response.previous_response_id == first[-1].response.id != second[-1].response.id
    # The upstream got the whole conversation, kept in the connection's memory (nothing was stored);
    # `instructions` are not carried over, as OpenAI documents for `previous_response_id`.
    sent = ws_sim.requests("quick")[-1]["body"]
    assert sent["messages"] == [{"role": "user", "content": "Say hello"},
                                {"role": "assistant", "content": text_of(first)},
                                {"role": "user", "content": "And again?"}]
    stored = httpx.get(f"{ws_gateway.base_url}/responses/{first[-1].response.id}", timeout=30,
                       headers={"authorization": f"Bearer {ws_gateway.key}"})
    assert stored.status_code == 404  # store: false: only this connection could continue it ...
    with client(ws_gateway, ws_gateway.key).responses.connect() as other:
        other.response.create(model="m", input="Go on", previous_response_id=first[-1].response.id)
        [missing] = until_done(other)
    assert missing.status == 404 and missing.error.code == "previous_response_not_found"  # ... not another
    assert missing.error.param == "previous_response_id"


def test_a_named_lane_of_the_sdk_session_gets_its_events(ws_gateway: Keyed) -> None:
    """The SDK's lanes route events by the `stream_id` the create named, which the gateway echoes."""
    limits = ResponsesWebSocketLimits(max_lanes=4, max_events_per_lane=256, max_events=512,
                                      max_bytes_per_lane=1 << 20, max_bytes=1 << 21)
    with client(ws_gateway, ws_gateway.key).responses.connect() as conn, \
            ResponsesWebSocketSession(conn, limits=limits) as session:
        lane = session.lane("conversation")
        lane.send({"type": "response.create", "model": "m", "input": "Say hello", "store": False})
        first = lane.get_final_response(timeout=60)
        lane.send({"type": "response.create", "model": "m", "input": "Again", "previous_response_id": first.id})
        second = lane.get_final_response(timeout=60)
    assert first.status == second.status == "completed" and second.previous_response_id == first.id
    assert first.output_text and second.output_text


def test_an_error_event_leaves_the_connection_usable(ws_gateway: Keyed) -> None:
    with client(ws_gateway, ws_gateway.key).responses.connect() as conn:
        conn.response.create(model="no-such-model", input="hi")
        [error] = until_done(conn)
        conn.send({"type": "response.nonsense"})  # type: ignore[misc, typeddict-item]
        [unknown] = until_done(conn)
        conn.response.create(model="m", input="hi")
        served = until_done(conn)
    assert error.type == "error" and error.status == 404 and error.error.code == "model_not_found"
    assert error.error.param == "model" and error.error.type == "invalid_request_error"
    assert unknown.status == 400 and unknown.error.code == "unknown_event_type"
    assert served[-1].type == "response.completed" and text_of(served)


def test_a_stream_broken_mid_way_ends_with_an_error_event(ws_gateway: Keyed) -> None:
    with client(ws_gateway, ws_gateway.key).responses.connect() as conn:
        conn.response.create(model="broken", input="hi")
        events = until_done(conn)
        events += until_done(conn)  # after the `error` event: response.failed
        conn.response.create(model="m", input="hi again")
        served = until_done(conn)
    [error] = [e for e in events if e.type == "error"]
    assert text_of(events) and events[-1].type == "response.failed"  # some text went out first
    assert error.status == 502 and error.error.code == error.code and error.error.message == error.message
    assert served[-1].type == "response.completed"


def test_a_second_create_while_one_runs_is_refused(ws_gateway: Keyed) -> None:
    with client(ws_gateway, ws_gateway.key).responses.connect() as conn:
        conn.response.create(model="slow", input="Tell me a story")
        conn.response.create(model="m", input="Me too")
        events = until_done(conn)
        while events[-1].type == "error":  # the refusal arrives while the first response streams
            events += until_done(conn)
    errors = [e for e in events if e.type == "error"]
    assert [(e.status, e.error.code) for e in errors] == [(400, "response_in_progress")]
    assert events[-1].type == "response.completed" and len(text_of(events).split()) == SLOW["output_tokens"]


def test_a_client_that_leaves_mid_response_stops_it(ws_gateway: Keyed) -> None:
    cancelled = metric(ws_gateway, "ultraroute_requests_total", endpoint="slow", status="cancelled")
    with client(ws_gateway, ws_gateway.key).responses.connect() as conn:
        conn.response.create(model="slow", input="Tell me a story")
        while conn.recv().type != "response.output_text.delta":
            pass
    deadline = time.monotonic() + 20  # the upstream attempt is closed and recorded as cancelled
    while metric(ws_gateway, "ultraroute_requests_total", endpoint="slow", status="cancelled") != cancelled + 1:
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_limits_apply_per_response(ws_gateway: Keyed) -> None:
    limited = ws_gateway.create_key("--rpm", "1")
    with client(ws_gateway, limited).responses.connect() as conn:
        conn.response.create(model="m", input="one")
        first = until_done(conn)
        conn.response.create(model="m", input="two")
        [refused] = until_done(conn)
    assert first[-1].type == "response.completed"
    assert refused.status == 429 and refused.error.code == "rate_limit_exceeded"


def test_an_upgrade_without_a_key_is_refused(ws_gateway: Keyed) -> None:
    for key in ("", "sk-wrong"):
        headers = {"authorization": f"Bearer {key}"} if key else {}
        with pytest.raises(InvalidStatus) as refused:
            connect(f"ws://127.0.0.1:{ws_gateway.port}/v1/responses", additional_headers=headers).close()
        response = refused.value.response
        assert response.status_code == 401
        assert json.loads(response.body)["error"]["code"] == ("missing_api_key" if not key else "invalid_api_key")
    with pytest.raises(InvalidStatus):  # the SDK's client sees the same refusal
        client(ws_gateway, "sk-wrong").responses.connect().__enter__()


def test_metrics_count_connections_and_responses(ws_gateway: Keyed) -> None:
    gauge = "ultraroute_websocket_connections"
    wait_for_metric(ws_gateway, gauge, 0)  # the earlier tests' connections have closed
    ok = metric(ws_gateway, "ultraroute_client_requests_total", api="responses", status="2xx")
    bad = metric(ws_gateway, "ultraroute_client_requests_total", api="responses", status="4xx")
    with client(ws_gateway, ws_gateway.key).responses.connect() as conn:
        wait_for_metric(ws_gateway, gauge, 1)
        with client(ws_gateway, ws_gateway.key).responses.connect():
            wait_for_metric(ws_gateway, gauge, 2)
        for _ in range(2):
            conn.response.create(model="m", input="count me")
            assert until_done(conn)[-1].type == "response.completed"
        conn.response.create(model="no-such-model", input="and me")
        assert until_done(conn)[-1].type == "error"
        wait_for_metric(ws_gateway, gauge, 1)
    wait_for_metric(ws_gateway, gauge, 0)
    assert metric(ws_gateway, "ultraroute_client_requests_total", api="responses", status="2xx") == ok + 2
    assert metric(ws_gateway, "ultraroute_client_requests_total", api="responses", status="4xx") == bad + 1
    deadline = time.monotonic() + 20  # the access log is written in batches, from a thread
    while not {("responses", 200), ("responses", 404)} <= {(ln["api"], ln["status"]) for ln in ws_lines(ws_gateway)}:
        assert time.monotonic() < deadline, ws_lines(ws_gateway)
        time.sleep(0.05)


def ws_lines(gw: GatewayProcess) -> list[dict[str, Any]]:
    return [json.loads(line) for line in gw.logs().splitlines() if '"transport":"websocket"' in line]


def test_codex_frames_warm_up_then_continue_a_tool_loop(ws_gateway: Keyed, ws_sim: SimProcess) -> None:
    """What Codex sends over its WebSocket (its headers; `stream`, `generate: false`, `client_metadata`,
    `prompt_cache_key`, `include`; then `previous_response_id` with only the new items)."""
    headers = {"authorization": f"Bearer {ws_gateway.key}", "openai-beta": "responses_websockets=2026-02-06",
               "originator": "codex_exec", "session-id": "s-1", "x-codex-turn-metadata": "{}",
               "x-client-request-id": "s-1", "x-codex-window-id": "s-1:0"}
    common = {"type": "response.create", "model": "m", "stream": True, "tools": [WEATHER_TOOL], "tool_choice": "auto",
              "parallel_tool_calls": True, "reasoning": {"summary": "auto"}, "store": False,
              "include": ["reasoning.encrypted_content"], "prompt_cache_key": "s-1", "client_metadata": {"x": "y"}}
    developer = {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Be helpful."}]}
    question = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]}
    before = len(ws_sim.requests("quick"))
    with connect(f"ws://127.0.0.1:{ws_gateway.port}/v1/responses", additional_headers=headers) as ws:

        def turn(**fields: Any) -> list[dict[str, Any]]:
            ws.send(json.dumps({**common, **fields}))
            events = []
            while not events or events[-1]["type"] not in TERMINAL:
                events.append(json.loads(ws.recv()))
            return events

        warm = turn(input=[developer], generate=False)
        assert [e["type"] for e in warm] == ["response.created", "response.in_progress", "response.completed"]
        assert warm[-1]["response"]["output"] == [] and len(ws_sim.requests("quick")) == before  # no upstream call
        asked = turn(input=[question], previous_response_id=warm[-1]["response"]["id"])
        [call] = [item for item in asked[-1]["response"]["output"] if item["type"] == "function_call"]
        answer = {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny, 21 C"}
        done = turn(input=[answer], previous_response_id=asked[-1]["response"]["id"])
        ws.send(json.dumps({"type": "response.processed", "response_id": done[-1]["response"]["id"]}))
    assert done[-1]["type"] == "response.completed"
    sent = ws_sim.requests("quick")[-1]["body"]["messages"]
    assert sent[0] == {"role": "system", "content": "Be helpful."} and sent[1]["content"] == "Weather in Paris?"
    assert sent[2]["tool_calls"][0]["id"] == call["call_id"]
    assert sent[3] == {"role": "tool", "tool_call_id": call["call_id"], "content": "sunny, 21 C"}


def test_codex_captured_frames_replayed(ws_gateway: Keyed, ws_sim: SimProcess) -> None:
    """The upgrade and the three frames Codex CLI 0.169.0 sent in a real run (warm-up, turn, tool
    result: its nine tools, built-in and namespace ones included), replayed with this gateway's key,
    model and ids."""
    upgrade = json.loads((FIXTURES / "codex_responses_ws_upgrade.json").read_text())["headers"]
    headers = {k: v for k, v in upgrade.items() if k.lower() not in HANDSHAKE}
    headers["Authorization"] = f"Bearer {ws_gateway.key}"
    warm, turn, result = (json.loads((FIXTURES / f"codex_responses_ws_{name}.json").read_text())["frame"]
                          for name in ("prewarm_frame", "frame", "tool_result_frame"))
    for frame in (warm, turn, result):
        frame["model"] = "m"
    before = len(ws_sim.requests("quick"))
    with connect(f"ws://127.0.0.1:{ws_gateway.port}/v1/responses", additional_headers=headers) as ws:

        def send(frame: dict[str, Any]) -> dict[str, Any]:
            ws.send(json.dumps(frame))
            while (event := json.loads(ws.recv()))["type"] not in TERMINAL:
                pass
            assert event["type"] == "response.completed", event
            return event["response"]  # type: ignore[no-any-return]

        assert send(warm)["output"] == [] and len(ws_sim.requests("quick")) == before  # generate: false
        asked = send(turn)
        [call] = [item for item in asked["output"] if item["type"] == "function_call"]
        result["previous_response_id"] = asked["id"]
        result["input"][0]["call_id"] = call["call_id"]
        send(result)
    sent = ws_sim.requests("quick")[-1]["body"]["messages"]
    assert [m["role"] for m in sent][-2:] == ["assistant", "tool"]  # the turn, from the connection's memory
    assert sent[-2]["tool_calls"][0]["id"] == sent[-1]["tool_call_id"] == call["call_id"]
    assert sent[-1]["content"] == result["input"][0]["output"]
    assert "Run echo agent-ok" in json.dumps(sent)  # the turn's own input is part of it


@pytest.fixture(scope="module")
def limits_gateway(ws_sim: SimProcess) -> Iterator[GatewayProcess]:
    gw = GatewayProcess(_catalogue(ws_sim, max_body_bytes=4096, websocket_idle_s=2, websocket_max_age_s=6))
    with gw:
        yield gw


def test_a_frame_over_max_body_bytes_gets_an_error_event(limits_gateway: GatewayProcess) -> None:
    with client(limits_gateway).responses.connect() as conn:  # open mode: no key needed
        conn.response.create(model="m", input="x" * 5000)
        [too_large] = until_done(conn)
        conn.response.create(model="m", input="small")
        served = until_done(conn)
    assert too_large.status == 413 and too_large.error.code == "payload_too_large"
    assert served[-1].type == "response.completed"


def test_idle_and_old_connections_are_closed(limits_gateway: GatewayProcess) -> None:
    with client(limits_gateway).responses.connect() as idle, pytest.raises(ConnectionClosed) as closed:
        idle.recv()  # nothing sent: closed after websocket_idle_s
    assert closed.value.rcvd is not None
    assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (1000, "idle timeout")
    served = 0
    # A plain client here: the SDK's first parse of its event types can take longer than the idle timeout.
    with connect(f"ws://127.0.0.1:{limits_gateway.port}/v1/responses") as busy, \
            pytest.raises(ConnectionClosed) as aged:
        while True:  # a response every 0.2 s keeps it from idling; its age ends it
            busy.send(json.dumps({"type": "response.create", "model": "m", "input": "still here"}))
            while (event := json.loads(busy.recv()))["type"] not in TERMINAL:
                pass
            served += event["type"] == "response.completed"
            time.sleep(0.2)
    assert aged.value.rcvd is not None and aged.value.rcvd.code == 1000
    assert aged.value.rcvd.reason == "maximum connection age reached" and served >= 2


def test_sigterm_finishes_the_response_in_flight_then_closes_1001(ws_sim: SimProcess) -> None:
    gw = GatewayProcess(_catalogue(ws_sim, shutdown_grace_s=30)).start()
    try:
        with client(gw).responses.connect() as busy, client(gw).responses.connect() as idle:
            busy.response.create(model="slow", input="Tell me a story")
            events = [busy.recv()]
            while events[-1].type != "response.output_text.delta":
                events.append(busy.recv())
            assert gw.proc is not None
            gw.proc.send_signal(signal.SIGTERM)
            with pytest.raises(ConnectionClosed) as idle_closed:
                idle.recv()  # idle: closed at once
            with pytest.raises(InvalidStatus) as refused:  # and no new connection is taken
                connect(f"ws://127.0.0.1:{gw.port}/v1/responses").close()
            assert refused.value.response.status_code == 503
            assert json.loads(refused.value.response.body)["error"]["code"] == "shutting_down"
            busy.response.create(model="m", input="one more?")  # the drain has begun: refused
            events += until_done(busy)
            while events[-1].type == "error":
                events += until_done(busy)
            with pytest.raises(ConnectionClosed) as busy_closed:
                busy.recv()  # then the connection is closed
        assert idle_closed.value.rcvd is not None and idle_closed.value.rcvd.code == 1001
        assert [(e.status, e.error.code) for e in events if e.type == "error"] == [(503, "shutting_down")]
        assert events[-1].type == "response.completed" and len(text_of(events).split()) == SLOW["output_tokens"]
        assert busy_closed.value.rcvd is not None and busy_closed.value.rcvd.code == 1001
        assert gw.proc.wait(timeout=60) == 0
    finally:
        gw.stop()


def test_sigterm_past_the_grace_ends_the_response_with_an_error_event_then_1001(ws_sim: SimProcess) -> None:
    gw = GatewayProcess(_catalogue(ws_sim, shutdown_grace_s=0.5)).start()
    try:
        with client(gw).responses.connect() as conn:
            conn.response.create(model="slow", input="Tell me a long story")
            events = [conn.recv()]
            while events[-1].type != "response.output_text.delta":
                events.append(conn.recv())
            assert gw.proc is not None
            gw.proc.send_signal(signal.SIGTERM)
            events += until_done(conn)
            with pytest.raises(ConnectionClosed) as closed:
                conn.recv()
        assert events[-1].type == "error" and (events[-1].status, events[-1].error.code) == (503, "shutting_down")
        assert len(text_of(events).split()) < SLOW["output_tokens"]  # cut short, and said so
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1001
        assert gw.proc.wait(timeout=60) == 0
    finally:
        gw.stop()
