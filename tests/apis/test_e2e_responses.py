"""End to end: `POST /v1/responses` with the official `openai` SDK (only base_url changed), in front of
the simulator; what the upstream received is read back from the simulator."""

from __future__ import annotations

import json

import openai
import pytest
from pydantic import BaseModel

from gateway.simulator.testing import SimProcess
from tests.apis.conftest import FAST, FELL_BACK_FROM_FAST, KeyedGateway, last_request

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
    with pytest.raises(openai.BadRequestError) as invalid:
        c.responses.create(model="m", input="Hi", tools=[{"type": "web_search"}])  # type: ignore[list-item]
    assert invalid.value.body["param"] == "tools[0]"  # type: ignore[index]
    with pytest.raises(openai.RateLimitError) as limited:
        client(api_gateway, api_gateway.limited).responses.create(model="m", input="Hi")
    assert limited.value.body["code"] == "rate_limit_exceeded" and "retry-after" in limited.value.response.headers  # type: ignore[index]
    with pytest.raises(openai.AuthenticationError):
        client(api_gateway, "ur-wrong").responses.create(model="m", input="Hi")
