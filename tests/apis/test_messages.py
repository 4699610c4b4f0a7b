"""`gateway.apis.messages`: an Anthropic Messages body -> the chat completions body (unit tests), and
the requests Claude Code really sends (tests/fixtures/agents/) through the adapter's parser."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from gateway.apis.messages import MessagesApi, translate
from gateway.config import GatewayFile, load_catalogue
from gateway.errors import InvalidRequest, Untranslatable
from gateway.policy import Speed
from gateway.upstreams.attempt import dropped_for, prompt_estimate, upstream_body

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "agents"
USER = [{"role": "user", "content": "x"}]
PRICE = {"price": {"input": 1.0, "output": 1.0}}


def fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text())  # type: ignore[no-any-return]


def chat_of(body: dict[str, Any], headers: dict[str, str] | None = None) -> dict[str, Any]:
    return translate(body, headers or {})[0]


def dropped_of(body: dict[str, Any]) -> tuple[str, ...]:
    return translate(body, {})[1].names()


def test_blocks_tools_and_options_are_translated() -> None:
    chat = chat_of({
        "model": "m", "max_tokens": 100, "system": [{"type": "text", "text": "Be "}, {"type": "text", "text": "kind."}],
        "stop_sequences": ["END"], "temperature": 0.5, "stream": True, "speed": "fast",
        "tools": [{"name": "f", "description": "does f", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Hi"},
                                         {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                      "data": "AA"}}]},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "..."}, {"type": "text", "text": "Ok."},
                                              {"type": "tool_use", "id": "t1", "name": "f", "input": {"x": 1}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "done"},
                                         {"type": "text", "text": "Thanks"}]},
        ]})
    assert chat == {
        "model": "m", "stream": True, "temperature": 0.5, "speed": "fast", "max_tokens": 100, "stop": ["END"],
        "messages": [
            {"role": "system", "content": "Be kind."},
            {"role": "user", "content": [{"type": "text", "text": "Hi"},
                                         {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}}]},
            {"role": "assistant", "content": "Ok.", "tool_calls": [
                {"id": "t1", "type": "function", "function": {"name": "f", "arguments": "{\"x\":1}"}}]},
            {"role": "tool", "tool_call_id": "t1", "content": "done"},
            {"role": "user", "content": "Thanks"}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"},
                                                    "description": "does f"}}],
        "tool_choice": "required", "parallel_tool_calls": False}


def test_a_system_turn_stays_where_it_stands() -> None:
    chat = chat_of({"model": "m", "max_tokens": 5, "system": "first", "messages": [
        {"role": "user", "content": "hi"},
        {"role": "system", "content": [{"type": "text", "text": "env", "cache_control": {"type": "ephemeral"}}]},
        {"role": "assistant", "content": "yes"}, {"role": "system", "content": "late"}]})
    assert [(m["role"], m["content"]) for m in chat["messages"]] == [
        ("system", "first"), ("user", "hi"), ("system", "env"), ("assistant", "yes"), ("system", "late")]


@pytest.mark.parametrize(("thinking", "output_config", "effort"), [
    ({"type": "adaptive"}, {"effort": "high"}, "high"),
    ({"type": "adaptive", "display": "omitted"}, None, None),  # the model's own default
    ({"type": "enabled", "budget_tokens": 2048}, None, "low"),
    ({"type": "enabled", "budget_tokens": 8000}, None, "medium"),
    ({"type": "enabled", "budget_tokens": 31999}, None, "high"),
    ({"type": "enabled", "budget_tokens": 31999}, {"effort": "low"}, "low"),  # the effort asked wins
    (None, {"effort": "max"}, "high"),
    (None, {"effort": "xhigh"}, "high"),
    ({"type": "disabled"}, None, None),
])
def test_thinking_and_effort_become_a_reasoning_effort(thinking: Any, output_config: Any, effort: str | None) -> None:
    body = {"model": "m", "max_tokens": 5, "messages": USER, "thinking": thinking, "output_config": output_config}
    assert chat_of(body).get("reasoning_effort") == effort


def test_reasoning_reaches_only_endpoints_that_reason(tmp_path: Path) -> None:
    path = tmp_path / "providers.yaml"
    path.write_text(yaml.safe_dump({"providers": {"p": {"base_url": "http://127.0.0.1:1/v1"}}, "models": {"m": {
        "endpoints": [{"provider": "p", "model": "u", "id": "thinks", "capabilities": ["reasoning"], **PRICE},
                      {"provider": "p", "model": "u", "id": "plain", **PRICE}]}}}))
    thinks, plain = load_catalogue(path)[0].models["m"]
    raw = orjson.dumps({"model": "m", "max_tokens": 5, "messages": USER, "thinking": {"type": "adaptive"},
                        "output_config": {"effort": "high"}, "context_management": {"edits": []}})
    chat = MessagesApi().parse(raw, {}, "r1", GatewayFile())
    assert orjson.loads(upstream_body(chat, thinks))["reasoning_effort"] == "high"
    assert "reasoning_effort" not in orjson.loads(upstream_body(chat, plain))
    assert dropped_for(chat, thinks) == ("context_management",)
    assert dropped_for(chat, plain) == ("context_management", "thinking", "output_config.effort")


def test_a_disabled_thinking_sends_no_effort() -> None:
    body = {"model": "m", "max_tokens": 5, "messages": USER, "thinking": {"type": "disabled"},
            "output_config": {"effort": "high"}}
    chat, into, kept = translate(body, {})
    assert "reasoning_effort" not in chat and kept == () and into.names() == ("output_config.effort",)


def test_what_has_no_chat_equivalent_is_dropped_and_named_once() -> None:
    body = {
        "model": "m", "max_tokens": 5, "top_k": 5, "container": "c", "mcp_servers": [{"url": "x"}],
        "service_tier": "auto", "context_management": {"edits": []}, "inference_geo": None,
        "system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}],
        "tools": [{"type": "web_search_20250305", "name": "web_search"}, {"type": "bash_20250124", "name": "bash"},
                  {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"},
                  {"name": "f", "input_schema": {"type": "object"}, "defer_loading": True,
                   "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": [
                {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "doc"},
                 "title": "T"},
                {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "AA"}},
                {"type": "search_result", "source": "s", "title": "t", "content": []},
                {"type": "image", "source": {"type": "file", "file_id": "f1"}}]},
            {"role": "assistant", "content": [
                {"type": "redacted_thinking", "data": "x"},
                {"type": "server_tool_use", "id": "s1", "name": "web_search"},
                {"type": "web_search_tool_result", "tool_use_id": "s1", "content": []},
                {"type": "text", "text": "ok"}]},
            {"role": "user", "content": "go on"}]}
    chat, into, _ = translate(body, {})
    assert chat["messages"][1] == {"role": "user", "content": "T\n\ndoc"}
    assert [t["function"]["name"] for t in chat["tools"]] == ["f"]
    assert into.names() == (
        "cache_control", "content.document", "content.search_result", "content.image.file", "content.redacted_thinking",
        "content.server_tool_use", "content.web_search_tool_result", "tools.web_search", "tools.bash",
        "tools.text_editor", "tools.defer_loading", "top_k", "container", "mcp_servers",
        "service_tier", "context_management")


def test_forcing_a_dropped_tool_is_a_refusal_kept_for_translation_only() -> None:
    """Kept on the translation, not raised: an anthropic endpoint, passed the body as sent, runs the
    server tool; only the endpoints that need the translation refuse it (dispatch.py)."""
    tools = [{"type": "web_search_20250305", "name": "web_search"}, {"name": "f", "input_schema": {}}]
    _, into, _ = translate({"model": "m", "max_tokens": 5, "messages": USER, "tools": tools,
                            "tool_choice": {"type": "tool", "name": "web_search"}})
    forced = into.refusal
    assert isinstance(forced, Untranslatable) and forced.param == "tool_choice"
    assert "'web_search'" in forced.message and "tools.web_search" in forced.message
    only_server = {"model": "m", "max_tokens": 5, "messages": USER, "tools": tools[:1]}
    # "any tool", where no tool the model can call is left
    assert isinstance(translate({**only_server, "tool_choice": {"type": "any"}})[1].refusal, Untranslatable)
    assert translate({**only_server, "tool_choice": {"type": "auto"}})[1].refusal is None
    chat = chat_of({**only_server, "tool_choice": {"type": "auto"}})
    assert "tools" not in chat and "tool_choice" not in chat  # nothing to choose from: not forwarded


def test_metadata_user_id_is_the_session_key_unless_the_client_names_one() -> None:
    body = {"model": "m", "max_tokens": 5, "messages": USER, "metadata": {"user_id": "u-1"}}
    assert MessagesApi().parse(orjson.dumps(body), {}, "r", GatewayFile()).session_key == "u-1"
    assert MessagesApi().parse(orjson.dumps(body), {"x-session-id": "s"}, "r", GatewayFile()).session_key == "s"
    assert chat_of({**body, "session_id": "mine"})["session_id"] == "mine"


def test_plain_text_turns_count_in_the_prompt_size() -> None:
    """A user or assistant turn of plain text is translated without `turn()` (translate's fast path):
    it still counts in the prompt's size, and a system turn or a malformed one still goes through it."""
    chat, into, _ = translate({"model": "m", "max_tokens": 5, "messages": [
        {"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi!"},
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "ok"}]}]})
    assert chat["messages"] == [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi!"},
                                {"role": "system", "content": "Be brief."}, {"role": "user", "content": "ok"}]
    assert into.chars == len("Hello") + len("Hi!") + len("Be brief.") + len("ok")
    with pytest.raises(InvalidRequest) as err:
        translate({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}, "hello"]})
    assert err.value.param == "messages[1].role"


@pytest.mark.parametrize(("body", "param"), [
    ({"model": "m", "messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
    ({"model": "m", "max_tokens": 5}, "messages"),
    ({"model": "m", "max_tokens": 5, "messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
    ({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": 7}]}]},
     "messages[0].content[0].type"),
    ({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "text"}]}]},
     "messages[0].content[0].text"),
    ({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
      "tool_choice": {"type": "sometimes"}}, "tool_choice.type"),
    ({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "temperature": "hot"},
     "temperature"),
    ({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "custom"}]},
     "tools[0]"),
])
def test_invalid_bodies_name_the_field(body: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        translate(body)
    assert err.value.param == param


@pytest.mark.parametrize("name", ["claude_code_messages.json", "claude_code_messages_tool_result.json"])
def test_what_claude_code_sends_is_served(name: str) -> None:
    captured = fixture(name)
    assert captured["path"] == "/v1/messages" and captured["query"] == "beta=true"
    headers = {k.lower(): v for k, v in captured["headers"].items()}
    raw = orjson.dumps(captured["body"])
    chat = MessagesApi().parse(raw, headers, "r1", GatewayFile())
    body = chat.body
    roles = [m["role"] for m in body["messages"]]
    assert roles[:3] == ["system", "user", "system"]  # the system blocks, then its in-messages system turn
    assert body["messages"][0]["content"].startswith("x-anthropic-billing-header")
    assert len(body["tools"]) == 12 and body["reasoning_effort"] == "medium" and body["stream"] is True
    assert chat.session_key == captured["body"]["metadata"]["user_id"]
    assert {"cache_control", "context_management", "tools.defer_loading"} <= set(chat.dropped)
    assert chat.capability_fields and "metadata" not in chat.dropped
    assert prompt_estimate(chat) > len(raw) // 8  # system, messages and tools all count
    if name.endswith("tool_result.json"):
        assert roles[3:] == ["assistant", "tool"] and "content.thinking" in chat.dropped
        assert body["messages"][3]["tool_calls"][0]["function"]["name"] == "Bash"
        assert body["messages"][4] == {"role": "tool", "tool_call_id": "toolu_1",
                                       "content": "(Bash completed with no output)"}


def test_the_names_dropped_are_bounded_and_header_safe() -> None:
    body = {"model": "m", "max_tokens": 5, "messages": USER, **{f"new field {i}\r\n": 1 for i in range(40)}}
    names = dropped_of(body)
    assert len(names) == 33 and names[-1] == "..." and names[0] == "new_field_0__"


def parse(body: dict[str, Any]):  # type: ignore[no-untyped-def]
    return MessagesApi().parse(orjson.dumps(body), {}, "r", GatewayFile())


def test_a_fallbacks_entry_s_own_fields_make_its_model_s_request() -> None:
    body = {"model": "m", "max_tokens": 100, "messages": USER, "thinking": {"type": "enabled", "budget_tokens": 9000},
            "output_config": {"effort": "low", "format": {"type": "json_schema", "schema": {"type": "object"}}},
            "fallbacks": [{"model": "plain"},
                          {"model": "short", "max_tokens": 7, "speed": "fast"},
                          {"model": "no-thinking", "thinking": None, "output_config": {"effort": None}, "speed": None},
                          {"model": "bare", "output_config": None}]}
    request = parse(body)
    assert request.fallback_models == ("plain", "short", "no-thinking", "bare")
    plain, short, no_thinking, bare = request.fallbacks
    assert (plain.model, plain.speed, plain.request) == ("plain", None, None)  # the request's own
    assert short.speed is Speed.FAST and no_thinking.speed is Speed.STANDARD and bare.speed is None
    assert short.request is not None and no_thinking.request is not None and bare.request is not None
    # For an anthropic endpoint, the body as sent with the entry's fields applied (and no fallbacks).
    assert short.request.client_body == {**{k: v for k, v in body.items() if k != "fallbacks"}, "max_tokens": 7}
    assert no_thinking.request.client_body["output_config"] == {"format": body["output_config"]["format"]}
    assert "thinking" not in no_thinking.request.client_body
    assert "output_config" not in bare.request.client_body and bare.request.client_body["thinking"]
    # For the others, its translation: max_tokens, reasoning and response_format follow the entry.
    assert short.request.body["max_tokens"] == 7 and short.request.body["reasoning_effort"] == "low"
    assert "reasoning_effort" not in no_thinking.request.body and no_thinking.request.body["response_format"]
    assert bare.request.body["reasoning_effort"] == "medium" and "response_format" not in bare.request.body
    assert request.body["max_tokens"] == 100 and request.client_body == body  # the request's own: as asked
    # The rest is the request's: model, stream, session, what it was asked as.
    assert short.request.model == "m" and short.request.request_id == "r" and short.request.fallbacks == ()


def test_fallbacks_naming_models_only_cost_nothing_more() -> None:
    request = parse({"model": "m", "max_tokens": 5, "messages": USER, "fallbacks": [{"model": "a"}, {"model": "b"}]})
    assert request.fallback_models == ("a", "b") and request.fallbacks == ()
    assert parse({"model": "m", "max_tokens": 5, "messages": USER, "fallbacks": "default"}).fallback_models == ()
    # The client's own `models` come first: its fallbacks are not the gateway's to act on then.
    own = parse({"model": "m", "max_tokens": 5, "messages": USER, "models": ["x"],
                 "fallbacks": [{"model": "a", "max_tokens": 3}]})
    assert own.fallback_models == ("x",) and own.fallbacks == ()


@pytest.mark.parametrize(("fallbacks", "param"), [
    ([{"model": "a", "temperature": 0.5}], "fallbacks[0].temperature"),  # refused, as Anthropic does
    ([{"model": "a"}, {"max_tokens": 5}], "fallbacks[1]"),
    (["a"], "fallbacks[0]"),
    ([{"model": "a", "max_tokens": 0}], "fallbacks[0].max_tokens"),
    ([{"model": "a", "max_tokens": True}], "fallbacks[0].max_tokens"),
    ([{"model": "a", "speed": "warp"}], "fallbacks[0].speed"),
    ([{"model": "a", "speed": {}}], "fallbacks[0].speed"),
    ([{"model": "a", "thinking": "on"}], "fallbacks[0].thinking"),
    ([{"model": "a", "output_config": []}], "fallbacks[0].output_config"),
    ({"model": "a"}, "fallbacks"),
    ([{"model": f"m{i}"} for i in range(33)], "fallbacks"),
])
def test_invalid_fallbacks_name_the_field(fallbacks: Any, param: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        parse({"model": "m", "max_tokens": 5, "messages": USER, "fallbacks": fallbacks})
    assert err.value.param == param
