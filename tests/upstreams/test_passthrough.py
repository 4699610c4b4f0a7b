"""End to end: same API in and out is lossless. A Messages client (official `anthropic` SDK) on an
`anthropic` endpoint and a Responses client (official `openai` SDK) on an `openai-responses`
endpoint get pass-through: the body as sent (unknown fields too; `model`, the gateway's fields and
the endpoint's `speed` aside), the client's betas merged with the gateway's, and the answer's blocks
and items unchanged -- thinking with its signature, reasoning with encrypted_content -- streamed or
not, while the gateway still measures every request."""

from __future__ import annotations

import uuid

import anthropic
import openai
import pytest

from gateway.simulator.native_payloads import signature
from gateway.simulator.testing import SimProcess
from gateway.upstreams.anthropic import FAST_BETA
from tests.apis.test_e2e_messages import claude_code, replay
from tests.harness import GatewayProcess
from tests.upstreams.conftest import RESPONSES_TOOL, access_lines, chat, claude, sent

HELLO = [{"role": "user", "content": "Say hello"}]
SYSTEM = [{"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}]
INTERLEAVED = "interleaved-thinking-2025-05-14"
WEB_SEARCH = {"type": "web_search_20250305", "name": "web_search", "max_uses": 2}


def test_messages_body_unknown_fields_and_betas_pass_through(gw: GatewayProcess, sim: SimProcess) -> None:
    unknown = {"context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]}, "brand_new_field": [1, 2]}
    claude(gw).messages.create(model="c", max_tokens=6, system=SYSTEM, messages=HELLO,  # type: ignore[arg-type]
                               thinking={"type": "enabled", "budget_tokens": 1024}, metadata={"user_id": "u1"},
                               extra_body={**unknown, "speed": "fast", "provider": {"sort": "latency"}},
                               extra_headers={"anthropic-beta": INTERLEAVED})
    body = sent(sim, "claude-fast", "/messages")
    assert body == {"model": "claude-opus-4-6", "max_tokens": 6, "system": SYSTEM, "messages": HELLO,
                    "thinking": {"type": "enabled", "budget_tokens": 1024}, "metadata": {"user_id": "u1"},
                    **unknown, "stream": True, "speed": "fast"}  # the endpoint's speed; no `provider`
    assert sim.requests("claude-fast")[-1]["headers"]["anthropic-beta"] == f"{INTERLEAVED},{FAST_BETA}"


def test_messages_stream_keeps_thinking_signatures_and_is_measured(gw: GatewayProcess, sim: SimProcess) -> None:
    request_id = f"pt-{uuid.uuid4().hex[:12]}"
    with claude(gw).messages.stream(model="a", max_tokens=64, messages=HELLO,  # type: ignore[arg-type]
                                    extra_headers={"x-request-id": request_id}) as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_message()
    thinking, text = final.content
    assert thinking.type == "thinking" and thinking.signature == signature(thinking.thinking)
    assert text.type == "text" and len(text.text.split()) == 8 and final.model == "a"
    assert kinds.count("content_block_start") == 2 and kinds[-1] == "message_stop"
    line = access_lines(gw, {request_id})[request_id]
    assert line["tokens"]["output"] == 11 and line["ttft_ms"] > 0 and line["served_tier"] == "standard"
    # The conversation continues with the thinking block sent back intact.
    claude(gw).messages.create(model="a", max_tokens=4, messages=[  # type: ignore[arg-type]
        *HELLO, {"role": "assistant", "content": final.content}, {"role": "user", "content": "More"}])
    assert sent(sim, "claude", "/messages")["messages"][1]["content"][0] == {
        "type": "thinking", "thinking": thinking.thinking, "signature": thinking.signature}


def test_messages_json_answer_keeps_thinking_and_tool_use(gw: GatewayProcess) -> None:
    message = claude(gw).messages.create(model="a", max_tokens=64, messages=HELLO)  # type: ignore[arg-type]
    thinking, text = message.content
    assert thinking.type == "thinking" and thinking.signature == signature(thinking.thinking)
    assert text.type == "text" and message.stop_reason == "end_turn" and message.usage.speed == "standard"
    tool = {"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}
    used = claude(gw).messages.create(model="a", max_tokens=64, messages=HELLO, tools=[tool])  # type: ignore[arg-type, list-item]
    assert used.stop_reason == "tool_use" and used.content[-1].type == "tool_use" and used.content[-1].input


def test_responses_pass_through_keeps_reasoning_items(gw: GatewayProcess, sim: SimProcess) -> None:
    sim.patch("gpt", reasoning_tokens=3)
    c = chat(gw)
    extra = {"prompt_cache_key": "k1", "brand_new_field": {"a": 1}}
    response = c.responses.create(model="r", input="Say hello", include=["reasoning.encrypted_content"],
                                  reasoning={"effort": "low"}, truncation="auto", extra_body=extra)
    reasoning, message = response.output
    assert reasoning.type == "reasoning" and reasoning.encrypted_content == signature(reasoning.summary[0].text)
    assert message.type == "message" and response.model == "r" and response.service_tier == "default"
    body = sent(sim, "gpt", "/responses")
    assert body == {"model": "gpt-5", "input": "Say hello", "include": ["reasoning.encrypted_content"],
                    "reasoning": {"effort": "low"}, "truncation": "auto", **extra, "stream": True, "store": False}
    with c.responses.stream(model="r", input=[{"role": "user", "content": "Say hello"}, reasoning.model_dump(
            exclude_none=True)], include=["reasoning.encrypted_content"]) as stream:  # type: ignore[list-item]
        kinds = [e.type for e in stream]
        final = stream.get_final_response()
    assert kinds[0] == "response.created" and "response.reasoning_summary_text.delta" in kinds
    assert final.output[0].type == "reasoning" and final.output[0].encrypted_content  # type: ignore[union-attr]
    assert sent(sim, "gpt", "/responses")["input"][1]["encrypted_content"] == reasoning.encrypted_content


def test_a_streamed_pass_through_response_is_stored_and_continued(gw: GatewayProcess, sim: SimProcess) -> None:
    c = chat(gw)
    with c.responses.stream(model="r", input="Remember the word cobalt", store=True) as stream:
        first = stream.get_final_response()
    assert sent(sim, "gpt", "/responses")["store"] is False  # the gateway keeps the conversation, not the upstream
    follow = c.responses.create(model="r", input="Which word?", previous_response_id=first.id)
    assert follow.output_text
    history = sent(sim, "gpt", "/responses")["input"]  # translated: the stored turns, then the new one
    assert history[0] == {"role": "user", "content": "Remember the word cobalt"}
    assert history[1]["role"] == "assistant" and history[1]["content"] == first.output_text
    assert history[-1] == {"role": "user", "content": "Which word?"}


def test_claude_code_is_passed_through_untouched_and_translated_elsewhere_with_drops_named(
        gw: GatewayProcess, sim: SimProcess) -> None:
    """What the lenient Messages adapter drops for a chat endpoint (the system turn aside: thinking,
    cache_control, context_management, output_config, ...) an anthropic endpoint gets as sent,
    and nothing is named dropped; on a chat endpoint the same request is translated, drops named."""
    body, headers = claude_code("claude_code_messages.json")
    got, _ = replay(claude(gw), body, headers, "a")  # type: ignore[arg-type]
    assert "x-ultraroute-dropped" not in got and got["x-ultraroute-endpoint"] == "claude"
    assert sent(sim, "claude", "/messages") == {**body, "model": "claude-sonnet-4-6", "max_tokens": 16}
    assert sim.requests("claude")[-1]["headers"]["anthropic-beta"] == headers["anthropic-beta"]  # no fast mode here

    got, _ = replay(claude(gw), body, headers, "o")  # type: ignore[arg-type]
    assert got["x-ultraroute-endpoint"] == "open-flex"
    assert {"cache_control", "context_management"} <= set(got["x-ultraroute-dropped"].split(", "))
    translated = sent(sim, "open", "/chat/completions")
    assert "context_management" not in translated and "thinking" not in translated


def test_forcing_a_server_tool_is_served_by_an_anthropic_endpoint_and_refused_by_a_translation(
        gw: GatewayProcess, sim: SimProcess) -> None:
    ask = {"max_tokens": 8, "messages": HELLO, "tools": [WEB_SEARCH],
           "tool_choice": {"type": "tool", "name": "web_search"}}
    raw = claude(gw).messages.with_raw_response.create(model="a", **ask)  # type: ignore[call-overload]
    assert raw.http_response.status_code == 200 and "x-ultraroute-dropped" not in raw.headers
    assert sent(sim, "claude", "/messages")["tools"] == [WEB_SEARCH]  # Anthropic runs it
    with pytest.raises(anthropic.BadRequestError) as refused:
        claude(gw).messages.create(model="o", **ask)  # type: ignore[call-overload]
    assert "tools.web_search" in refused.value.message and "'web_search'" in refused.value.message
    # A plan with both, the chat host first: only the endpoint passed the body as sent is tried.
    first_open = {"speed": "fast", "provider": {"order": ["open", "claude-fast"]}}
    raw = claude(gw).messages.with_raw_response.create(model="c", **ask, extra_body=first_open)  # type: ignore[call-overload]
    assert raw.headers["x-ultraroute-endpoint"] == "claude-fast"
    # Nor is it hedged there: claude-fast's first token takes longer than the hedge waits.
    hedged = {"speed": "fast", "provider": {"order": ["claude-fast", "open"], "hedge_after_ms": 1}}
    raw = claude(gw).messages.with_raw_response.create(model="c", **ask, extra_body=hedged)  # type: ignore[call-overload]
    assert raw.headers["x-ultraroute-endpoint"] == "claude-fast"
    assert not [r for r in sim.requests("open") if r["path"] == "/chat/completions"]


def test_forcing_a_built_in_tool_is_served_by_an_openai_responses_endpoint(gw: GatewayProcess,
                                                                           sim: SimProcess) -> None:
    responses = chat(gw).responses
    tools = [{"type": "web_search"}, RESPONSES_TOOL]
    raw = responses.with_raw_response.create(model="r", input="Hi", tools=tools,  # type: ignore[arg-type]
                                             tool_choice={"type": "web_search"}, text={"verbosity": "low"})
    assert raw.http_response.status_code == 200 and "x-ultraroute-dropped" not in raw.headers
    body = sent(sim, "gpt", "/responses")
    assert body["tools"] == tools and body["tool_choice"] == {"type": "web_search"}
    assert body["text"] == {"verbosity": "low"}
    with pytest.raises(openai.BadRequestError) as refused:
        responses.create(model="o", input="Hi", tools=tools, tool_choice={"type": "web_search"})  # type: ignore[arg-type]
    assert "tools.web_search" in refused.value.message


def test_the_responses_websocket_passes_through_to_an_openai_responses_endpoint(gw: GatewayProcess,
                                                                                 sim: SimProcess) -> None:
    """Over the Responses WebSocket too: the frame's body as sent (what a translation drops kept), the upstream's
    own events (its reasoning item with encrypted_content) as frames; the answer is kept in the
    connection's memory, so the next response continues it (translated: its history is the gateway's)."""
    sim.patch("gpt", reasoning_tokens=3)
    with chat(gw).responses.connect() as conn:
        conn.response.create(model="r", input="Say hello", include=["reasoning.encrypted_content"], store=False,
                             truncation="auto")
        first = []
        for event in conn:
            first.append(event)
            if event.type in ("response.completed", "response.failed", "error"):
                break
        assert first[-1].type == "response.completed", [e.type for e in first]
        body = sent(sim, "gpt", "/responses")
        assert body["truncation"] == "auto" and body["include"] == ["reasoning.encrypted_content"]
        reasoning = first[-1].response.output[0]
        assert reasoning.type == "reasoning" and reasoning.encrypted_content == signature(reasoning.summary[0].text)
        conn.response.create(model="r", input="Again", previous_response_id=first[-1].response.id, store=False)
        second = []
        for event in conn:
            second.append(event)
            if event.type in ("response.completed", "response.failed", "error"):
                break
    assert second[-1].type == "response.completed", [e.type for e in second]
    assert sent(sim, "gpt", "/responses")["input"][-1] == {"role": "user", "content": "Again"}
