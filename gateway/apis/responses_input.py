"""A Responses `input` (a string, or a list of items) -> chat messages.

    message                     role user/system/developer/assistant (developer -> system); parts
                                input_text, output_text, text, refusal, input_image
    function_call               an assistant `tool_calls` entry; a `namespace` maps to the chat name
                                the tool is offered by (responses_tools.py)
    custom_tool_call            likewise, its text `input` as the one argument of its function tool
    local_shell_call            a `local_shell` call, its `action` as the arguments
    *_call_output               (function, custom tool, local shell) -> a `tool` message
                                (a local shell item without an id or action is dropped and named)
    reasoning                   its text (`content`, else `summary`) -> the `reasoning_content` of the
                                assistant turn that follows, for endpoints that reason; an item with
                                only `encrypted_content` (another provider's secret) has nothing to give
    anything else               items only OpenAI's own state or tools can honour (web_search_call,
                                compaction, item_reference, ...) and types not known yet: dropped and
                                named (`input.web_search_call`); unknown content parts likewise
                                (`input.content.input_file`)

Consecutive calls (and the text before them) become one assistant message, as chat has it.
A known item that is malformed (a function_call without a string `call_id`) is a 400 naming it.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.apis.responses_tools import CUSTOM_INPUT, chat_name
from gateway.errors import InvalidRequest, Untranslatable

ROLES = {"user": "user", "system": "system", "developer": "system", "assistant": "assistant"}
OUTPUTS = ("function_call_output", "custom_tool_call_output")
REASONING = "input.reasoning"


def _bad(message: str, param: str) -> InvalidRequest:
    return InvalidRequest(message, param=param)


class ChatInput:
    """The input as chat messages, the fields dropped on the way, and whether an assistant message
    carries `reasoning_content` (kept only for endpoints that reason). (Not a dataclass: its
    `default_factory` fields cost ~4k instructions a request, against 1k for this `__init__`.)"""

    __slots__ = ("_pending", "dropped", "messages", "reasoning", "refusal")

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.dropped: list[str] = []
        self.reasoning = False
        self.refusal: InvalidRequest | None = None  # what only the translation cannot honour (errors.Untranslatable)
        self._pending: list[str] = []  # reasoning text awaiting its assistant turn

    def drop(self, name: str) -> None:
        if name not in self.dropped:
            self.dropped.append(name)

    def part(self, part: Any, where: str) -> dict[str, Any] | str | None:
        if not isinstance(part, dict):
            raise _bad(f"'{where}' must be an object.", where)
        kind = part.get("type")
        if kind in ("input_text", "output_text", "text"):
            text = part.get("text")
            if not isinstance(text, str):
                raise _bad(f"'{where}.text' must be a string.", f"{where}.text")
            return text
        if kind == "refusal":
            if not isinstance(part.get("refusal"), str):
                raise _bad(f"'{where}.refusal' must be a string.", f"{where}.refusal")
            return str(part["refusal"])
        if kind == "input_image":
            url = part.get("image_url")
            if not isinstance(url, str):  # a file_id: OpenAI's own files, which only its endpoint reads
                self.refusal = self.refusal or Untranslatable(
                    f"'{where}.image_url' must be a URL or data URL (file_id is not supported).",
                    param=f"{where}.image_url")
                return None
            return {"type": "image_url", "image_url": {"url": url, "detail": part.get("detail") or "auto"}}
        if not isinstance(kind, str):
            raise _bad(f"'{where}.type' must be a string.", f"{where}.type")
        self.drop(f"input.content.{kind[:64]}")  # input_file, input_audio, ...: no chat equivalent
        return None

    def content(self, content: Any, where: str) -> str | list[dict[str, Any]]:
        if isinstance(content, str):
            return content
        if not isinstance(content, list):
            raise _bad(f"'{where}' must be a string or an array of content parts.", where)
        parts = [p for i, c in enumerate(content) if (p := self.part(c, f"{where}[{i}]")) is not None]
        if all(isinstance(p, str) for p in parts):
            return "".join(parts)  # type: ignore[arg-type]
        return [{"type": "text", "text": p} if isinstance(p, str) else p for p in parts]

    def output_text(self, output: Any, where: str) -> str:
        if isinstance(output, str):
            return output
        if isinstance(output, list):
            parts = [self.part(p, f"{where}[{i}]") for i, p in enumerate(output)]
            return "".join(p for p in parts if isinstance(p, str))
        raise _bad(f"'{where}' must be a string or an array of content parts.", where)

    def _assistant(self, content: Any) -> None:
        message: dict[str, Any] = {"role": "assistant", "content": content}
        self.messages.append(message)
        self._attach_reasoning(message)

    def _attach_reasoning(self, message: dict[str, Any]) -> None:
        if self._pending:
            message["reasoning_content"] = message.get("reasoning_content", "") + "".join(self._pending)
            self._pending.clear()
            self.reasoning = True

    def _turn_ends(self) -> None:
        """Reasoning not followed by an assistant turn has nowhere to go."""
        if self._pending:
            self._pending.clear()
            self.drop(REASONING)

    def call(self, call_id: str, name: str, arguments: str) -> None:
        call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        if self.messages and self.messages[-1]["role"] == "assistant":  # text then calls: one turn
            self.messages[-1].setdefault("tool_calls", []).append(call)
            self._attach_reasoning(self.messages[-1])
        else:
            self._assistant(None)
            self.messages[-1]["tool_calls"] = [call]

    def reasoning_item(self, item: dict[str, Any]) -> None:
        texts = _texts(item.get("content")) or _texts(item.get("summary"))
        if texts:
            self._pending.append("\n".join(texts))
        else:
            self.drop(REASONING)  # only encrypted_content: readable by the provider that made it, no other

    def item(self, item: Any, where: str) -> None:
        if not isinstance(item, dict):
            raise _bad(f"'{where}' must be an object.", where)
        kind = item.get("type", "message")
        if kind == "message":
            role = ROLES.get(item["role"]) if isinstance(item.get("role"), str) else None
            if role is None:
                raise _bad(f"'{where}.role' must be one of user, system, developer, assistant.", f"{where}.role")
            content = item.get("content")
            if not isinstance(content, str):  # (a string, most often: no call for it)
                content = self.content(content, f"{where}.content")
            if role == "assistant":
                self._assistant(content)
            else:
                if self._pending:
                    self._turn_ends()
                self.messages.append({"role": role, "content": content})
        elif kind in ("function_call", "custom_tool_call"):
            body = "arguments" if kind == "function_call" else CUSTOM_INPUT
            call_id, name, value = item.get("call_id"), item.get("name"), item.get(body)
            namespace = item.get("namespace")
            if not (isinstance(call_id, str) and isinstance(name, str) and isinstance(value, str)) or (
                    namespace is not None and not isinstance(namespace, str)):
                raise _bad(f"'{where}' needs string call_id, name and {body}.", where)
            arguments = value if kind == "function_call" else orjson.dumps({CUSTOM_INPUT: value}).decode()
            self.call(call_id, chat_name(name, namespace), arguments)
        elif kind in OUTPUTS:
            call_id = item.get("call_id")
            if not isinstance(call_id, str):
                raise _bad(f"'{where}.call_id' must be a string.", f"{where}.call_id")
            self._turn_ends()
            self.messages.append({"role": "tool", "tool_call_id": call_id,
                                  "content": self.output_text(item.get("output"), f"{where}.output")})
        elif kind == "local_shell_call" and isinstance(item.get("action"), dict) and _shell_id(item):
            self.call(_shell_id(item), "local_shell", orjson.dumps(item["action"]).decode())
        elif kind == "local_shell_call_output" and _shell_id(item) and isinstance(item.get("output"), str):
            self._turn_ends()
            self.messages.append({"role": "tool", "tool_call_id": _shell_id(item), "content": item["output"]})
        elif kind == "reasoning":
            self.reasoning_item(item)
        elif isinstance(kind, str):
            self.drop(f"input.{kind[:64]}")
        else:
            raise _bad(f"'{where}.type' must be a string.", f"{where}.type")


def _texts(parts: Any) -> list[str]:
    if not isinstance(parts, list):
        return []
    return [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)]


def _shell_id(item: dict[str, Any]) -> str:
    """A local shell call's id: `call_id` (Responses), else `id`; "" when it has neither."""
    call_id = item.get("call_id") or item.get("id")
    return call_id if isinstance(call_id, str) else ""


def chat_input(value: Any) -> ChatInput:
    """The `input` as chat messages (see the module's docstring)."""
    out = ChatInput()
    if isinstance(value, str):
        out.messages.append({"role": "user", "content": value})
        return out
    if not isinstance(value, list) or not value:
        raise _bad("'input' must be a string or a non-empty array of items.", "input")
    for i, item in enumerate(value):
        # A user, system or developer message of plain text (most items), with no reasoning pending:
        # item()'s first case, without its call or the name of the item.
        content = item.get("content") if type(item) is dict else None
        role = item.get("role") if type(content) is str else None
        if (type(role) is str and ROLES.get(role, "assistant") != "assistant"
                and item.get("type", "message") == "message" and not out._pending):
            out.messages.append({"role": ROLES[role], "content": content})
        else:
            out.item(item, f"input[{i}]")
    if out._pending:
        out._turn_ends()
    return out


def input_messages(value: Any) -> list[dict[str, Any]]:
    return chat_input(value).messages
