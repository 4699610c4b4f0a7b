"""A scripted agent turn, for end-to-end tests of real coding agents (Codex CLI, Claude Code).

Does: answer a chat request as a model driving an agent would, in two steps: while the conversation
holds no tool result, call the shell tool the request offers (Codex's `exec_command`, Claude Code's
`Bash`, ...) with the script's command, its arguments shaped by that tool's own schema; once a tool
result is back, answer the script's final text. Without a shell tool on offer it answers the text.
The same script answers on every API the simulator speaks: a Messages or Responses request is read
as the chat request it amounts to (native_request.py), so Claude Code on an `anthropic` endpoint
gets a `tool_use` of its Bash tool, then, after the `tool_result`, the text (native_payloads.py).
Does not: run anything (the agent does), time or stream (endpoint.py, payloads.py do).

The tool names the agents give their shell tools differ and change between releases, so they are a
list in the config (`script.shell_tools`), tried in order; the argument holding the command is the
tool's `cmd` or `command` property, an array (`["bash", "-lc", command]`) when its schema says so.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.simulator.config import ScriptConfig
from gateway.simulator.structured import Structured, instance_of, split_pieces

COMMAND_KEYS = ("cmd", "command")  # the property a shell tool takes its command line in


def _shell_tool(body: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any] | None:
    offered = {}
    for tool in body.get("tools") or ():
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            offered[function["name"]] = function
    return next((offered[name] for name in names if name in offered), None)


def _arguments(tool: dict[str, Any], command: str, seed: int) -> dict[str, Any]:
    schema = tool.get("parameters") or {}
    props = schema.get("properties") or {}
    key = next((k for k in COMMAND_KEYS if k in props), COMMAND_KEYS[-1])
    as_list = (props.get(key) or {}).get("type") == "array"
    args: dict[str, Any] = {key: ["bash", "-lc", command] if as_list else command}
    for i, name in enumerate(schema.get("required") or ()):  # anything else the tool insists on
        if name not in args:
            args[name] = instance_of(props.get(name) or {"type": "string"}, seed + i)
    return args


def scripted_answer(script: ScriptConfig, body: dict[str, Any], messages: list[Any], digest: bytes) -> Structured:
    """The shell tool call while no tool result has come back, then the final text."""
    answered = any(m.get("role") == "tool" for m in messages)
    tool = None if answered or body.get("tool_choice") == "none" else _shell_tool(body, script.shell_tools)
    if tool is None:
        return Structured("text", split_pieces(script.answer))
    arguments = orjson.dumps(_arguments(tool, script.command, digest[0])).decode()
    return Structured("tool_call", split_pieces(arguments), tool["name"], "call_" + digest[:8].hex())
