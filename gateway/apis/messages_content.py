"""Anthropic Messages content and tools -> chat completions messages and tools (for messages.py).

    turn (user/assistant)  text, image (base64 or url source) -> content parts; tool_use (assistant)
                           -> `tool_calls`; tool_result (user) -> a `tool` message each, before the
                           turn's other content; document with a text source -> text
    turn (system)          its text -> a system message at that position (Claude Code sends one)
    tools                  client tools ({name, description, input_schema}, `type` absent or custom)
                           -> function tools; Anthropic's server tools (web_search_20250305,
                           bash_20250124, text_editor_*, ...) -> dropped, named `tools.web_search`

Lenient where Anthropic adds things: a block of any other type (thinking, redacted_thinking,
document with a PDF, search_result, server_tool_use, web_search_tool_result, ...) is dropped and
named `content.<type>`; `cache_control` anywhere is named once. A known block that is malformed (a
text block without text, a tool_use without an id) is still a 400 naming it. `Translation` collects
what was dropped and the prompt's size in characters as it goes: the body is walked once.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import orjson

from gateway.errors import InvalidRequest

# Names go into a response header: plain characters only, and a bounded number of them.
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
_DATE_SUFFIX = re.compile(r"_\d{8}$")  # web_search_20250305 -> web_search
MAX_DROPPED_NAMES = 32
ROLES = ("user", "assistant", "system")


def bad(message: str, param: str) -> InvalidRequest:
    return InvalidRequest(message, param=param)


def field_name(raw: str) -> str:
    return _UNSAFE.sub("_", raw[:64])


class Translation:
    """What translating one body collects besides the chat body: the client API fields dropped (in
    order, each once), the prompt's size in characters (the estimate's input), and the refusal that
    only a translation needs. None of it applies to an anthropic endpoint, passed the body as sent."""

    __slots__ = ("chars", "dropped", "refusal")

    def __init__(self) -> None:
        self.dropped: dict[str, None] = {}
        self.chars = 0
        self.refusal: InvalidRequest | None = None  # what only a translation cannot honour (Untranslatable)

    def drop(self, name: str) -> None:
        if name not in self.dropped:  # past the bound, "..." says there were more
            self.dropped[name if len(self.dropped) < MAX_DROPPED_NAMES else "..."] = None

    def names(self) -> tuple[str, ...]:
        return tuple(self.dropped)

    def noted(self, block: dict[str, Any]) -> None:
        if block.get("cache_control") is not None:
            self.drop("cache_control")  # prompt caching is Anthropic's; chat upstreams cache on their own


def _text(block: dict[str, Any], where: str, into: Translation) -> str:
    text = block.get("text")
    if not isinstance(text, str):
        raise bad(f"'{where}.text' must be a string.", f"{where}.text")
    into.noted(block)
    if block.get("citations"):
        into.drop("citations")
    into.chars += len(text)
    return text


def _kind(block: Any, where: str) -> str:
    kind = block.get("type") if isinstance(block, dict) else None
    if not isinstance(kind, str):
        raise bad(f"'{where}' must be a content block: an object with a string type.", f"{where}.type")
    return kind


def _image(block: dict[str, Any], where: str, into: Translation) -> dict[str, Any] | None:
    """An image part, or None when its source has no chat equivalent (a Files API id): dropped."""
    source = block.get("source")
    kind = source.get("type") if isinstance(source, dict) else None
    if not isinstance(source, dict) or not isinstance(kind, str):
        raise bad(f"'{where}.source' must be an image source object.", f"{where}.source")
    into.noted(block)
    if kind == "base64":
        if not isinstance(source.get("data"), str) or not isinstance(source.get("media_type", ""), str):
            raise bad(f"'{where}.source' needs string data (and media_type).", f"{where}.source")
        return {"type": "image_url", "image_url": {"url": f"data:{source.get('media_type') or 'image/png'};base64,"
                                                          f"{source['data']}"}}
    if kind == "url":
        if not isinstance(source.get("url"), str):
            raise bad(f"'{where}.source.url' must be a string.", f"{where}.source.url")
        return {"type": "image_url", "image_url": {"url": source["url"]}}
    into.drop(f"content.image.{field_name(kind)}")
    return None


def _document(block: dict[str, Any], into: Translation) -> str | None:
    """A document's text when it has a plain-text source (or text blocks); else None: dropped."""
    into.noted(block)
    source = block.get("source")
    if isinstance(source, dict) and source.get("type") == "text" and isinstance(source.get("data"), str):
        text: str = source["data"]
    elif isinstance(source, dict) and source.get("type") == "content" and isinstance(source.get("content"), list):
        texts = [b["text"] for b in source["content"] if isinstance(b, dict) and isinstance(b.get("text"), str)]
        text = "\n".join(texts)
    else:
        into.drop("content.document")
        return None
    title = block.get("title")
    text = f"{title}\n\n{text}" if isinstance(title, str) and title else text
    into.chars += len(text)
    return text


def _joined_text(content: Any, where: str, into: Translation, blocks: str,
                 other: Callable[[str, dict[str, Any], str, Translation], str | None]) -> str:
    """A string, or an array of blocks whose text is joined; `other` takes each non-text block
    (its text, or None once it has dropped or checked it)."""
    if isinstance(content, str):
        into.chars += len(content)
        return content
    if not isinstance(content, list):
        raise bad(f"'{where}' must be a string or an array of {blocks}.", where)
    texts = []
    for i, block in enumerate(content):
        at = f"{where}[{i}]"
        kind = _kind(block, at)
        text = _text(block, at, into) if kind == "text" else other(kind, block, at, into)
        if text is not None:
            texts.append(text)
    return "".join(texts)


def _tool_result_block(kind: str, block: dict[str, Any], at: str, into: Translation) -> str | None:
    if kind == "document":
        return _document(block, into)
    if kind == "image":
        _image(block, at, into)  # checked, not forwarded: a chat tool message is text
        into.drop("tool_result.image")
    else:
        into.drop(f"tool_result.{field_name(kind)}")
    return None


def _system_block(kind: str, block: dict[str, Any], at: str, into: Translation) -> None:
    into.drop(f"content.{field_name(kind)}")


def _tool_result_text(content: Any, where: str, into: Translation) -> str:
    if content is None:
        return ""
    return _joined_text(content, where, into, "content blocks", _tool_result_block)


def system_text(content: Any, where: str, into: Translation) -> str:
    """A system prompt (the `system` field, or a system turn's content): a string or text blocks."""
    return _joined_text(content, where, into, "text blocks", _system_block)


def turn(message: Any, where: str, into: Translation) -> list[dict[str, Any]]:
    """One Anthropic turn as chat messages (tool results first, then the rest of the turn)."""
    if not isinstance(message, dict) or message.get("role") not in ROLES:
        raise bad(f"'{where}.role' must be user, assistant or system.", f"{where}.role")
    role, content = message["role"], message.get("content")
    if role == "system":  # not in Anthropic's docs, but Claude Code sends one: kept where it stands
        return [{"role": "system", "content": system_text(content, f"{where}.content", into)}]
    if isinstance(content, str):
        into.chars += len(content)
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise bad(f"'{where}.content' must be a string or an array of content blocks.", f"{where}.content")
    tool_results: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for i, block in enumerate(content):
        at = f"{where}.content[{i}]"
        kind = _kind(block, at)
        if kind == "text":
            parts.append({"type": "text", "text": _text(block, at, into)})
        elif kind == "image":
            if (part := _image(block, at, into)) is not None:
                parts.append(part)
        elif kind == "tool_use":
            if role != "assistant":
                raise bad(f"'{at}': tool_use blocks belong to assistant turns.", f"{at}.type")
            if (not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str)
                    or not isinstance(block.get("input", {}), dict)):
                raise bad(f"'{at}' needs a string id and name, and an object input.", at)
            into.noted(block)
            arguments = orjson.dumps(block.get("input") or {}).decode()
            into.chars += len(block["name"]) + len(arguments)
            calls.append({"id": block["id"], "type": "function",
                          "function": {"name": block["name"], "arguments": arguments}})
        elif kind == "tool_result":
            if role != "user":
                raise bad(f"'{at}': tool_result blocks belong to user turns.", f"{at}.type")
            if not isinstance(block.get("tool_use_id"), str) or not isinstance(block.get("is_error", False), bool):
                raise bad(f"'{at}' needs a string tool_use_id (and a boolean is_error).", f"{at}.tool_use_id")
            into.noted(block)
            text = _tool_result_text(block.get("content"), f"{at}.content", into)
            if block.get("is_error"):
                text = f"Error: {text}"
            tool_results.append({"role": "tool", "tool_call_id": block["tool_use_id"], "content": text})
        elif kind == "document":
            if (text := _document(block, into)) is not None:
                parts.append({"type": "text", "text": text})
        else:  # thinking, redacted_thinking, search_result, server tool blocks, what comes next month
            into.drop(f"content.{field_name(kind)}")
    out = list(tool_results)
    if parts or calls:
        text_only = all(p["type"] == "text" for p in parts)
        body: Any = "".join(p["text"] for p in parts) if text_only else parts
        chat_turn: dict[str, Any] = {"role": role, "content": body if body or not calls else None}
        if calls:
            chat_turn["tool_calls"] = calls
        out.append(chat_turn)
    return out


# A client tool's fields that are translated; any other (defer_loading, input_examples, ...) is named.
_TOOL_FIELDS = frozenset({"name", "description", "input_schema", "type", "cache_control", "strict"})


def tools(raw: Any, into: Translation) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Client tools as chat function tools, and the server tools dropped: {its name: what it was
    named as}, so that a `tool_choice` forcing one is refused naming both."""
    if not isinstance(raw, list):
        raise bad("tools: must be an array.", "tools")
    chat_tools: list[dict[str, Any]] = []
    dropped: dict[str, str] = {}
    for i, tool in enumerate(raw):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if isinstance(tool, dict) and isinstance(kind, str) and kind != "custom":
            name = f"tools.{field_name(_DATE_SUFFIX.sub('', kind))}"
            into.drop(name)  # an Anthropic server tool: run by Anthropic, not by the client or a chat model
            if isinstance(tool.get("name"), str):
                dropped[tool["name"]] = name
            continue
        if (not isinstance(tool, dict) or kind not in (None, "custom") or not isinstance(tool.get("name"), str)
                or not isinstance(tool.get("input_schema", {}), dict)
                or not isinstance(tool.get("description", ""), str)):
            raise bad(f"tools.{i}: a client tool needs a name (and an object input_schema).", f"tools[{i}]")
        into.noted(tool)
        function: dict[str, Any] = {"name": tool["name"], "parameters": tool.get("input_schema") or {"type": "object"}}
        if tool.get("description"):
            function["description"] = tool["description"]
        if isinstance(tool.get("strict"), bool):
            function["strict"] = tool["strict"]
        for key in tool:
            if key not in _TOOL_FIELDS:
                into.drop(f"tools.{field_name(key)}")
        chat_tools.append({"type": "function", "function": function})
    if chat_tools:  # what the model reads of them: their size counts in the estimate
        into.chars += len(orjson.dumps(chat_tools))
    return chat_tools, dropped
