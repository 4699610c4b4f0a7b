"""End to end: `POST /v1/responses` with the official `openai` SDK (only base_url changed), in front of
the simulator; what the upstream received is read back from the simulator."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from pydantic import BaseModel

from gateway.simulator.testing import SimProcess
from tests.apis.conftest import FAST, FELL_BACK_FROM_FAST, KeyedGateway, access_line, last_request

FIXTURES = Path(__file__).parents[1] / "fixtures" / "agents"
SPAWN = {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents.", "tools": [
    {"type": "function", "name": "spawn_agent", "description": "Spawn a sub-agent.",
     "parameters": {"type": "object", "properties": {"task": {"type": "string"}}, "required": ["task"]}}]}
WEATHER_TOOL = {"type": "function", "name": "get_weather", "description": "Weather in a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                               "required": ["city"], "additionalProperties": False}, "strict": True}


def client(gw: KeyedGateway, key: str | None = None) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url, api_key=key or gw.key, max_retries=0)


def test_plain_with_instructions_and_routing_headers(api_gateway: KeyedGateway, api_sim: SimProcess) -> None:
    raw = client(api_gateway).responses.with_raw_response.create(
        model="m", input="Say hello", instructions="Be brief.", max_output_tokens=5, extra_body=FAST)
    response = raw.parse()
    assert response.object == "response" and response.status == "incomplete"  # cut at max_output_tokens
    assert response.incomplete_details is not None and response.incomplete_details.reason == "max_output_tokens"
    assert len(response.output_text.split()) == 5 and response.usage is not None and response.usage.output_tokens == 5
    assert raw.headers["x-ultraroute-endpoint"] == "fast" and raw.headers["x-ultraroute-tier"] == "fast"
    sent = last_request(api_sim, "fast", "/chat/completions")
    assert sent["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello"}]
    assert sent["max_tokens"] == 5 and sent["stream"] is True


def test_streamed_events_in_order(api_gateway: KeyedGateway) -> None:
    events = list(client(api_gateway).responses.create(model="m", input="Tell me", stream=True, extra_body=FAST))
    kinds = [e.type for e in events]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    completed = events[-1].response
    assert kinds.count("response.output_text.delta") == 12 and completed.output_text == deltas
    assert completed.usage is not None and completed.usage.output_tokens == 12


def test_stream_helper_accumulates_the_final_response(api_gateway: KeyedGateway) -> None:
    with client(api_gateway).responses.stream(model="m", input="Tell me more", extra_body=FAST) as stream:
        text = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
        final = stream.get_final_response()
    assert final.status == "completed" and final.output_text == text and len(text.split()) == 12


def test_function_tool_round_trip(api_gateway: KeyedGateway, api_sim: SimProcess) -> None:
    c = client(api_gateway)
    question = {"role": "user", "content": "Weather in Paris?"}
    first = c.responses.create(model="m", input=[question], tools=[WEATHER_TOOL], extra_body=FAST)  # type: ignore[list-item]
    [call] = [item for item in first.output if item.type == "function_call"]
    assert call.name == "get_weather" and set(json.loads(call.arguments)) == {"city"}
    answer = {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21 C"}
    second = c.responses.create(model="m", input=[question, *first.output, answer],  # type: ignore[list-item]
                                tools=[WEATHER_TOOL], extra_body=FAST)  # type: ignore[list-item]
    assert second.output_text and not [i for i in second.output if i.type == "function_call"]
    sent = last_request(api_sim, "fast", "/chat/completions")
    assert sent["tools"][0]["function"]["name"] == "get_weather"
    assert sent["messages"][1]["tool_calls"][0]["id"] == call.call_id
    assert sent["messages"][2] == {"role": "tool", "tool_call_id": call.call_id, "content": "sunny, 21 C"}


def test_streamed_function_call_arguments(api_gateway: KeyedGateway) -> None:
    events = list(client(api_gateway).responses.create(model="m", input="Weather?", tools=[WEATHER_TOOL],  # type: ignore[list-item]
                                                       stream=True, extra_body=FAST))
    deltas = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    [done] = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert done.arguments == deltas and "city" in json.loads(deltas)
    assert events[-1].type == "response.completed" and events[-1].response.output[0].type == "function_call"


class City(BaseModel):
    name: str
    population: int
    coastal: bool


def test_json_schema_format(api_gateway: KeyedGateway, api_sim: SimProcess) -> None:
    parsed = client(api_gateway).responses.parse(model="m", input="A city, please", text_format=City,
                                                 extra_body=FAST)
    assert isinstance(parsed.output_parsed, City)
    sent = last_request(api_sim, "fast", "/chat/completions")
    assert sent["response_format"]["type"] == "json_schema"
    assert sent["response_format"]["json_schema"]["name"] == "City"
    assert set(sent["response_format"]["json_schema"]["schema"]["properties"]) == {"name", "population", "coastal"}


@pytest.mark.usefixtures("failing_fast")
def test_fallback_from_a_failing_fast_tier(api_gateway: KeyedGateway) -> None:
    raw = client(api_gateway).responses.with_raw_response.create(model="m", input="Hi", extra_body=FAST)
    assert raw.parse().output_text
    assert raw.headers["x-ultraroute-endpoint"] == "std" and raw.headers["x-ultraroute-tier"] == "standard"
    assert FELL_BACK_FROM_FAST.match(raw.headers["x-ultraroute-fallback"]), raw.headers


def test_errors_in_openai_shape(api_gateway: KeyedGateway) -> None:
    c = client(api_gateway)
    with pytest.raises(openai.NotFoundError) as unknown:
        c.responses.create(model="no-such-model", input="Hi")
    assert unknown.value.body["code"] == "model_not_found"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as invalid:  # forcing a tool the gateway drops: naming both
        c.responses.create(model="m", input="Hi", tools=[{"type": "web_search"}], tool_choice={"type": "web_search"})
    assert invalid.value.body["param"] == "tool_choice" and "tools.web_search" in invalid.value.body["message"]  # type: ignore[index]
    with pytest.raises(openai.RateLimitError) as limited:
        client(api_gateway, api_gateway.spent_key()).responses.create(model="m", input="Hi")
    assert limited.value.body["code"] == "rate_limit_exceeded" and "retry-after" in limited.value.response.headers  # type: ignore[index]
    with pytest.raises(openai.AuthenticationError):
        client(api_gateway, "ur-wrong").responses.create(model="m", input="Hi")


def codex_request(name: str) -> tuple[dict[str, Any], dict[str, str]]:
    """A request Codex CLI 0.169.0 sent (tests/fixtures/agents/), for model `m`: its body and the headers
    of its own (session-id, x-codex-*, originator, ...), without the ones the SDK sets."""
    fixture = json.loads((FIXTURES / name).read_text())
    skip = {"authorization", "content-length", "content-type", "host", "accept", "user-agent"}
    headers = {k: v for k, v in fixture["headers"].items() if k.lower() not in skip}
    return {**fixture["body"], "model": "m"}, headers


def test_a_codex_request_is_served_and_what_was_dropped_is_named(api_gateway: KeyedGateway,
                                                                 api_sim: SimProcess) -> None:
    body, headers = codex_request("codex_responses_http.json")
    # and headers other Codex versions send: only x-ultraroute-* headers are held to a list
    headers |= {"OpenAI-Beta": "responses=experimental", "version": "0.169.0", "conversation_id": "c-1"}
    c = client(api_gateway)
    raw = c.post("/responses", body={**body, **FAST}, cast_to=httpx.Response, options={"headers": headers})
    assert raw.status_code == 200 and raw.headers["content-type"].startswith("text/event-stream")
    assert raw.headers["x-ultraroute-dropped"] == "tools.web_search, reasoning.summary"
    events = [json.loads(line[6:]) for line in raw.text.splitlines() if line.startswith("data: ")]
    [call] = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert call["type"] == "function_call" and call["name"] == "exec_command"  # the sim calls the first tool
    assert events[-1]["type"] == "response.completed"
    # The endpoint that served (an agent-sized prompt is routed by predicted end-to-end time, so "fast"
    # may be passed over when earlier tests' faults left it with errors), its last request with tools:
    # the shared gateway may have probed it (a 1-token completion) since.
    served = raw.headers["x-ultraroute-endpoint"]
    sent = next(r["body"] for r in reversed(api_sim.requests(served))
                if r["path"] == "/chat/completions" and "tools" in r["body"])
    assert [t["function"]["name"] for t in sent["tools"]][4:9] == [
        "multi_agent_v1__close_agent", "multi_agent_v1__resume_agent", "multi_agent_v1__send_input",
        "multi_agent_v1__spawn_agent", "multi_agent_v1__wait_agent"]
    assert [m["role"] for m in sent["messages"]] == ["system", "system", "user", "user"]
    assert not {"include", "client_metadata", "reasoning", "store"} & set(sent)
    assert access_line(api_gateway, raw.headers["x-request-id"])["dropped"] == ["tools.web_search", "reasoning.summary"]



def test_a_namespaced_tool_call_round_trip(api_gateway: KeyedGateway, api_sim: SimProcess) -> None:
    c = client(api_gateway)
    question = {"role": "user", "content": "Spawn a helper."}
    tools: Any = [SPAWN, {"type": "web_search"}]
    raw = c.responses.with_raw_response.create(model="m", input=[question], tools=tools, extra_body=FAST)
    assert raw.headers["x-ultraroute-dropped"] == "tools.web_search"
    [call] = [item for item in raw.parse().output if item.type == "function_call"]
    assert (call.name, call.namespace) == ("spawn_agent", "multi_agent_v1") and "task" in json.loads(call.arguments)
    assert last_request(api_sim, "fast", "/chat/completions")["tools"][0]["function"]["name"] == (
        "multi_agent_v1__spawn_agent")
    answer = {"type": "function_call_output", "call_id": call.call_id, "output": "spawned"}
    events = list(c.responses.create(model="m", input=[question, call, answer], tools=tools,  # type: ignore[list-item]
                                     stream=True, extra_body=FAST))
    assert events[-1].type == "response.completed" and events[-1].response.output_text
    sent = last_request(api_sim, "fast", "/chat/completions")
    assert sent["messages"][1]["tool_calls"] == [{"id": call.call_id, "type": "function", "function": {
        "name": "multi_agent_v1__spawn_agent", "arguments": call.arguments}}]
    assert sent["messages"][2] == {"role": "tool", "tool_call_id": call.call_id, "content": "spawned"}


def test_a_streamed_namespaced_call_names_its_namespace(api_gateway: KeyedGateway) -> None:
    events = list(client(api_gateway).responses.create(model="m", input="Spawn one.", tools=[SPAWN],  # type: ignore[list-item]
                                                       stream=True, extra_body=FAST))
    added = [e.item for e in events if e.type == "response.output_item.added"]
    done = events[-1].response.output
    assert [(i.name, i.namespace) for i in (*added, *done)] == [("spawn_agent", "multi_agent_v1")] * 2  # type: ignore[union-attr]


def test_reasoning_sent_back_reaches_only_endpoints_that_reason(api_gateway: KeyedGateway,
                                                                api_sim: SimProcess) -> None:
    body, _ = codex_request("codex_responses_http_tool_result.json")
    body = {**body, "stream": False, "reasoning": {"effort": "low", "summary": "auto"}}
    c = client(api_gateway)
    plain = c.post("/responses", body={**body, **FAST}, cast_to=httpx.Response)
    assert plain.status_code == 200
    assert plain.headers["x-ultraroute-dropped"] == ("tools.web_search, reasoning.summary, reasoning.effort, "
                                                     "input.reasoning")
    sent = last_request(api_sim, "fast", "/chat/completions")
    assert "reasoning_effort" not in sent and not any("reasoning_content" in m for m in sent["messages"])
    reasons = c.post("/responses", body={**body, "model": "q"}, cast_to=httpx.Response)
    assert reasons.headers["x-ultraroute-dropped"] == "tools.web_search, reasoning.summary"
    sent = last_request(api_sim, "quiet", "/chat/completions")
    assert sent["reasoning_effort"] == "low"
    [turn] = [m for m in sent["messages"] if m.get("tool_calls")]
    assert turn["reasoning_content"] == "run it"


def test_a_streamed_incomplete_answer_carries_estimated_usage(api_gateway: KeyedGateway) -> None:
    """`q` sends no usage in its streams (llama.cpp's server): the last event has the gateway's estimate,
    the usage the key is charged, marked as estimated."""
    events = list(client(api_gateway).responses.create(model="q", input="Tell me a story", max_output_tokens=3,
                                                       stream=True))
    last = events[-1]
    assert last.type == "response.incomplete" and last.response.usage is not None
    usage = last.response.usage
    assert usage.output_tokens == 3 and usage.input_tokens > 0 and usage.total_tokens == usage.input_tokens + 3
    assert usage.model_extra == {"estimated": True}
    unary = client(api_gateway).responses.create(model="q", input="Tell me a story", max_output_tokens=3)
    assert unary.usage is not None and unary.usage.output_tokens == 3 and unary.usage.model_extra == {"estimated": True}


def test_a_stream_that_breaks_ends_failed_with_the_usage_charged(api_gateway: KeyedGateway,
                                                                 api_sim: SimProcess) -> None:
    api_sim.patch("quiet", faults={"drop_rate": 1.0, "drop_after_tokens": 4})
    try:
        events = list(client(api_gateway).responses.create(model="q", input="Tell me a story", stream=True))
    finally:
        api_sim.patch("quiet", faults={"drop_rate": 0.0})
    assert [e.type for e in events[-2:]] == ["error", "response.failed"]
    usage = events[-1].response.usage  # type: ignore[union-attr]
    assert usage is not None and usage.output_tokens == 4 and usage.input_tokens > 0
    assert usage.model_extra == {"estimated": True}
