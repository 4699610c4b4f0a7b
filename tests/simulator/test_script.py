"""`gateway.simulator.script`: the scripted agent turn, a shell tool call and then the final text."""

from __future__ import annotations

import anthropic
import openai
import orjson

from gateway.simulator.config import ScriptConfig
from gateway.simulator.script import scripted_answer
from gateway.simulator.testing import SimFactory

SCRIPT = ScriptConfig(command="echo hi > out.txt", answer="DONE: hi")
SEED = b"\x01" * 32
USER = [{"role": "user", "content": "go"}]


def function(name: str, properties: dict, required: list[str]) -> dict:  # type: ignore[type-arg]
    return {"type": "function", "function": {"name": name, "parameters": {
        "type": "object", "properties": properties, "required": required}}}


CODEX = function("exec_command", {"cmd": {"type": "string"}, "workdir": {"type": "string"}}, ["cmd"])
CLAUDE = function("Bash", {"command": {"type": "string"}, "timeout": {"type": "number"}}, ["command"])
OLD_CODEX = function("shell", {"command": {"type": "array", "items": {"type": "string"}},
                               "timeout_ms": {"type": "number"}}, ["command", "timeout_ms"])
OTHER = function("view_image", {"path": {"type": "string"}}, ["path"])


def test_calls_the_offered_shell_tool_in_its_own_argument_shape() -> None:
    codex = scripted_answer(SCRIPT, {"tools": [OTHER, CODEX]}, USER, SEED)
    assert codex.kind == "tool_call" and codex.tool_name == "exec_command"
    assert orjson.loads(codex.text) == {"cmd": "echo hi > out.txt"}
    claude = scripted_answer(SCRIPT, {"tools": [OTHER, CLAUDE]}, USER, SEED)
    assert claude.tool_name == "Bash" and orjson.loads(claude.text) == {"command": "echo hi > out.txt"}
    old = orjson.loads(scripted_answer(SCRIPT, {"tools": [OLD_CODEX]}, USER, SEED).text)
    assert old["command"] == ["bash", "-lc", "echo hi > out.txt"] and isinstance(old["timeout_ms"], float)


def test_answers_the_text_once_a_tool_result_is_back() -> None:
    history = [*USER, {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
                                                            "function": {"name": "Bash", "arguments": "{}"}}]},
               {"role": "tool", "tool_call_id": "c1", "content": ""}]
    done = scripted_answer(SCRIPT, {"tools": [CLAUDE]}, history, SEED)
    assert done.kind == "text" and done.text == "DONE: hi"


def test_answers_the_text_without_a_shell_tool_or_when_tools_are_off() -> None:
    assert scripted_answer(SCRIPT, {"tools": [OTHER]}, USER, SEED).text == "DONE: hi"
    assert scripted_answer(SCRIPT, {}, USER, SEED).kind == "text"
    assert scripted_answer(SCRIPT, {"tools": [CODEX], "tool_choice": "none"}, USER, SEED).kind == "text"


def test_a_scripted_endpoint_streams_the_call_then_the_text(sim_factory: SimFactory) -> None:
    script = {"command": SCRIPT.command, "answer": SCRIPT.answer}
    sim = sim_factory({"agent": {"ttft_ms": 5, "ttft_jitter": 0.0, "tokens_per_second": 5000, "script": script}})
    client = openai.OpenAI(base_url=sim.base_url("agent"), api_key="k", max_retries=0)
    chunks = list(client.chat.completions.create(model="x", messages=USER, tools=[CLAUDE], stream=True))  # type: ignore[arg-type,list-item]
    calls = [t for c in chunks if c.choices for t in c.choices[0].delta.tool_calls or ()]
    assert calls[0].function is not None and calls[0].function.name == "Bash"
    arguments = "".join(t.function.arguments or "" for t in calls if t.function is not None)
    assert orjson.loads(arguments) == {"command": "echo hi > out.txt"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    history = [*USER, {"role": "assistant", "tool_calls": [{"id": calls[0].id, "type": "function",
                                                            "function": {"name": "Bash", "arguments": arguments}}]},
               {"role": "tool", "tool_call_id": calls[0].id, "content": ""}]
    done = client.chat.completions.create(model="x", messages=history, tools=[CLAUDE])  # type: ignore[arg-type,list-item]
    assert done.choices[0].message.content == "DONE: hi" and done.choices[0].finish_reason == "stop"


def test_a_scripted_endpoint_answers_messages_with_a_tool_use_then_the_text(sim_factory: SimFactory) -> None:
    """Spoken to in Anthropic Messages (Claude Code on an `anthropic` endpoint): a `tool_use` of its
    Bash tool, streamed as Anthropic does; after the `tool_result`, the final text (end_turn)."""
    script = {"command": SCRIPT.command, "answer": SCRIPT.answer}
    sim = sim_factory({"agent": {"ttft_ms": 5, "ttft_jitter": 0.0, "tokens_per_second": 5000, "script": script}})
    client = anthropic.Anthropic(base_url=sim.base_url("agent").removesuffix("/v1"), api_key="k", max_retries=0)
    bash = {"name": "Bash", "input_schema": CLAUDE["function"]["parameters"]}
    system = [{"role": "system", "content": "Claude Code sends a system turn."}]
    ask = {"model": "x", "max_tokens": 4096, "tools": [bash], "thinking": {"type": "adaptive"}}
    with client.messages.stream(messages=[*USER, *system], **ask) as stream:  # type: ignore[arg-type]
        called = stream.get_final_message()
    assert called.stop_reason == "tool_use"
    use = called.content[-1]
    assert use.type == "tool_use" and use.name == "Bash" and use.input == {"command": "echo hi > out.txt"}
    result = {"type": "tool_result", "tool_use_id": use.id, "content": "", "cache_control": {"type": "ephemeral"}}
    history = [*USER, *system, {"role": "assistant", "content": [use.model_dump()]},
               {"role": "user", "content": [result]}]
    done = client.messages.create(messages=history, **ask)  # type: ignore[arg-type]
    assert done.stop_reason == "end_turn" and [b.type for b in done.content] == ["text"]
    assert done.content[0].text == "DONE: hi"  # type: ignore[union-attr]
