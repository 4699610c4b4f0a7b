"""Responses `tools` and `tool_choice` -> chat completions tools, and the names the model calls them by.

    function            -> a chat function tool, as it is
    namespace           its function (and custom) tools, flattened into chat function tools named
                        `<namespace>__<name>` (Codex's own flat form), made chat-legal: [a-zA-Z0-9_-],
                        at most 64 characters
    custom              (a freeform tool: its input is text, not JSON) -> a function tool taking one
                        string, `input`; a call is rendered back as a `custom_tool_call`; a grammar
                        `format` is dropped and named (`tools.custom.format`)
    anything else       built-in tools (web_search, file_search, code_interpreter, computer_use_preview,
                        image_generation, local_shell, mcp, ...) and types not known yet: only OpenAI's
                        own servers run them, so they are dropped for chat upstreams and named
                        (`tools.web_search`)

`ToolNames` maps the chat name the model calls back to the tool the client offered, so a call is
rendered as the namespaced (or custom) tool it is, and the calls a client sends back in later turns
are mapped forward again. A `tool_choice` that forces a dropped tool cannot be honoured by a
translation: `Untranslatable`, naming both (an openai-responses endpoint still takes it as sent).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NamedTuple

from gateway.errors import InvalidRequest, Untranslatable

# Chat completions function names: OpenAI's rule, which most hosts share.
MAX_NAME = 64
_ILLEGAL = re.compile(r"[^a-zA-Z0-9_-]")
NAMESPACE_DELIMITER = "__"
# A custom (freeform) tool's text input, as the one argument of the function tool that stands for it.
CUSTOM_INPUT = "input"
_CUSTOM_PARAMETERS = {"type": "object", "properties": {CUSTOM_INPUT: {"type": "string"}},
                      "required": [CUSTOM_INPUT], "additionalProperties": False}


@dataclass(frozen=True, slots=True)
class ToolName:
    """A tool as the client offered it: its name, its namespace (if any), and its kind."""

    name: str
    namespace: str | None = None
    custom: bool = False  # a freeform tool: called with text, rendered as a `custom_tool_call`


def chat_name(name: str, namespace: str | None = None) -> str:
    """The chat function name a (namespaced) tool is offered and called by: deterministic, so that a
    call sent back in a later turn maps to the name offered in this one."""
    flat = f"{namespace.rstrip('_')}{NAMESPACE_DELIMITER}{name.lstrip('_')}" if namespace else name
    if len(flat) <= MAX_NAME and not _ILLEGAL.search(flat):
        return flat
    # Changed or cut: a digest of the original keeps distinct tools distinct.
    digest = hashlib.sha256(flat.encode()).hexdigest()[:8]
    return f"{_ILLEGAL.sub('_', flat)[:MAX_NAME - 9]}_{digest}"


def _bad(message: str, param: str) -> InvalidRequest:
    return InvalidRequest(message, param=param)


def _function(tool: dict[str, Any], where: str, namespace: str | None,
              names: dict[str, ToolName], dropped: list[str]) -> dict[str, Any]:
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        raise _bad(f"'{where}.name' must be a non-empty string.", f"{where}.name")
    flat = chat_name(name, namespace)
    function: dict[str, Any] = {"name": flat}
    if isinstance(tool.get("description"), str):
        function["description"] = tool["description"]
    custom = tool.get("type") == "custom"
    if custom:
        function["parameters"] = _CUSTOM_PARAMETERS
        fmt = tool.get("format")
        if isinstance(fmt, dict) and fmt.get("type") not in (None, "text"):  # a grammar: chat tools take none
            _drop(dropped, "tools.custom.format")
    else:
        function.update({k: tool[k] for k in ("parameters", "strict") if tool.get(k) is not None})
    if custom or flat != name:
        names[flat] = ToolName(name, namespace, custom)
    return {"type": "function", "function": function}


class Tools(NamedTuple):
    """What the request's tools are upstream: chat tools, the names to map back, what was dropped.
    (A tuple: one per request.)"""

    chat: list[dict[str, Any]]
    names: Mapping[str, ToolName]  # only the tools whose chat name differs from what the client sees
    dropped: list[str]  # `tools.<type>`, once each
    callable: bool = False  # a function, custom or namespace tool was offered (an empty namespace too)


# A request without tools (most): one, never changed, rather than three containers per request.
NO_TOOLS = Tools([], MappingProxyType({}), [])


def chat_tools(value: Any) -> Tools:
    if value is None:
        return NO_TOOLS
    if not isinstance(value, list):
        raise _bad("'tools' must be an array.", "tools")
    chat: list[dict[str, Any]] = []
    names: dict[str, ToolName] = {}
    dropped: list[str] = []
    for i, tool in enumerate(value):
        where = f"tools[{i}]"
        if not isinstance(tool, dict) or not isinstance(tool.get("type"), str):
            raise _bad(f"'{where}' must be an object with a string 'type'.", where)
        kind = tool["type"]
        if kind in ("function", "custom"):
            chat.append(_function(tool, where, None, names, dropped))
        elif kind == "namespace":
            namespace, members = tool.get("name"), tool.get("tools")
            if not isinstance(namespace, str) or not namespace or not isinstance(members, list):
                raise _bad(f"'{where}': a namespace needs a string 'name' and an array of 'tools'.", where)
            for j, member in enumerate(members):
                inner = f"{where}.tools[{j}]"
                if not isinstance(member, dict) or member.get("type") not in ("function", "custom"):
                    raise _bad(f"'{inner}' must be a function or custom tool.", inner)
                chat.append(_function(member, inner, namespace, names, dropped))
        else:
            _drop(dropped, f"tools.{kind[:64]}")
    callable_ = any(tool["type"] in ("function", "custom", "namespace") for tool in value)
    return Tools(chat, names, dropped, callable_)


def _drop(dropped: list[str], name: str) -> None:
    if name not in dropped:
        dropped.append(name)


def chat_tool_choice(value: Any, tools: Tools) -> tuple[Any, list[dict[str, Any]]]:
    """The chat `tool_choice`, and the chat tools it leaves the model (`allowed_tools` narrows them)."""
    if value == "required" and not tools.callable and tools.dropped:
        raise Untranslatable(f"'tool_choice' required forces {', '.join(tools.dropped)}, which this gateway "
                             "drops for chat upstreams.", param="tool_choice")
    if value is None or value in ("auto", "none", "required"):
        return value, tools.chat
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        raise _bad("'tool_choice' must be auto, none, required or an object with a 'type'.", "tool_choice")
    kind = value["type"]
    if kind in ("function", "custom"):
        name, namespace = value.get("name"), value.get("namespace")
        if not isinstance(name, str) or (namespace is not None and not isinstance(namespace, str)):
            raise _bad("'tool_choice' of type function needs a string 'name'.", "tool_choice")
        return {"type": "function", "function": {"name": chat_name(name, namespace)}}, tools.chat
    if kind == "allowed_tools":
        allowed = value.get("tools")
        mode = value.get("mode", "auto")
        if not isinstance(allowed, list) or mode not in ("auto", "required"):
            raise _bad("'tool_choice' of type allowed_tools needs 'mode' auto or required and an array of "
                       "'tools'.", "tool_choice")
        wanted = {chat_name(t["name"], t.get("namespace")) for t in allowed
                  if isinstance(t, dict) and isinstance(t.get("name"), str)}
        return mode, [t for t in tools.chat if t["function"]["name"] in wanted]
    # A built-in tool's type (web_search, file_search, mcp, ...): the tool it forces is dropped.
    named = f"tools.{kind[:64]}"
    raise Untranslatable(f"'tool_choice' forces {named}, which this gateway drops for chat upstreams"
                         f"{' (it was not offered)' if named not in tools.dropped else ''}.", param="tool_choice")


def client_name(chat: str, names: Mapping[str, ToolName]) -> ToolName:
    """The tool the client offered, from the chat name the model called."""
    return names.get(chat) or ToolName(chat)
