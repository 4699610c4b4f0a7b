"""OpenAI Responses API answers from chat-completion chunks: the `response` object and its stream.

Pure: chunks (dicts) in, JSON or server-sent events out. The output items are built in the order
the upstream produced them: a `reasoning` item (when the model reasons), a `message` with one
`output_text` part, and a `function_call` item per tool call: under the name and `namespace` the
client offered the tool by, or a `custom_tool_call` for a custom tool (responses_tools.py).

Streaming follows OpenAI's event sequence, each event named and numbered (`sequence_number`):
response.created, response.in_progress, then per item response.output_item.added, (for a message)
response.content_part.added, response.output_text.delta..., response.output_text.done,
response.content_part.done, (for a function call) response.function_call_arguments.delta...,
response.function_call_arguments.done (for a custom tool call, its input at once:
response.custom_tool_call_input.delta and .done), then response.output_item.done; finally
response.completed (response.incomplete when max_output_tokens cut the answer). A failure after
the first event ends the stream with an `error` event and response.failed. Every answer, and each of
these three terminal events, carries the usage the gateway charged; `"estimated": true` in it when
the upstream sent none (the pipeline feeds the relay's estimate, `Meter.settle_usage`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple

import orjson

from gateway.apis.adapter import answer_pieces, sse_event
from gateway.apis.responses_tools import CUSTOM_INPUT, ToolName, client_name
from gateway.errors import GatewayError


def new_id(prefix: str) -> str:
    return f"{prefix}_{os.urandom(12).hex()}"


class ResponsesCall(NamedTuple):
    """What a Responses request asked for, echoed in the `response` object and kept for storing. (A
    tuple: made once per request, and a frozen dataclass costs a setattr call per field.)"""

    model: str
    instructions: str | None
    tools: tuple[dict[str, Any], ...]
    tool_choice: Any
    text: dict[str, Any]
    max_output_tokens: int | None
    temperature: float | None
    top_p: float | None
    parallel_tool_calls: bool
    metadata: dict[str, Any]
    store: bool
    previous_response_id: str | None
    input_messages: tuple[dict[str, Any], ...]  # this turn's input, as chat messages
    history: tuple[dict[str, Any], ...] = ()  # the stored conversation it continues, as chat messages
    # The tools whose chat name is not the client's (namespaced, custom): chat name -> the client's tool.
    tool_names: Mapping[str, ToolName] = MappingProxyType({})


def usage_of(usage: dict[str, Any] | None) -> dict[str, Any] | None:
    if not usage:
        return None
    prompt = int(usage.get("prompt_tokens") or 0)
    completion = int(usage.get("completion_tokens") or 0)
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    reasoning = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0
    out = {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": cached},
           "output_tokens": completion, "output_tokens_details": {"reasoning_tokens": reasoning},
           "total_tokens": prompt + completion}
    if usage.get("estimated"):  # the gateway's estimate: the upstream sent no usage (SDKs keep extra fields)
        out["estimated"] = True
    return out


def response_object(call: ResponsesCall, response_id: str, created_at: int, status: str,
                    output: list[dict[str, Any]], usage: dict[str, Any] | None,
                    error: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "id": response_id, "object": "response", "created_at": created_at, "status": status,
        "error": error,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": call.instructions, "max_output_tokens": call.max_output_tokens, "model": call.model,
        "output": output, "parallel_tool_calls": call.parallel_tool_calls,
        "previous_response_id": call.previous_response_id, "reasoning": {"effort": None, "summary": None},
        "store": call.store, "temperature": call.temperature, "text": call.text,
        "tool_choice": call.tool_choice, "tools": list(call.tools), "top_p": call.top_p,
        "truncation": "disabled", "usage": usage, "user": None, "metadata": call.metadata,
    }


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def message_item(item_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    content = [_text_part(text)] if status == "completed" else []
    return {"id": item_id, "type": "message", "status": status, "role": "assistant", "content": content}


def function_call_item(item_id: str, call_id: str, name: str, arguments: str,
                       status: str = "completed") -> dict[str, Any]:
    return {"id": item_id, "type": "function_call", "status": status, "call_id": call_id, "name": name,
            "arguments": arguments}


def custom_input(arguments: str) -> str:
    """A custom tool's text input, from the arguments of the function tool that stands for it."""
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return arguments  # not JSON (the model wrote the input itself): the text as it is
    return value[CUSTOM_INPUT] if isinstance(value, dict) and isinstance(value.get(CUSTOM_INPUT), str) else arguments


def call_item(item_id: str, call_id: str, chat_name: str, arguments: str, names: Mapping[str, ToolName],
              status: str = "completed") -> dict[str, Any]:
    """The output item of a tool call, as the tool the client offered: a (namespaced) function call,
    or a custom tool call."""
    tool = client_name(chat_name, names)
    if tool.custom:
        item = {"id": item_id, "type": "custom_tool_call", "status": status, "call_id": call_id, "name": tool.name,
                "input": custom_input(arguments) if status == "completed" else ""}
    else:
        item = function_call_item(item_id, call_id, tool.name, arguments, status)
    if tool.namespace is not None:
        item["namespace"] = tool.namespace
    return item


def reasoning_item(item_id: str, text: str) -> dict[str, Any]:
    return {"id": item_id, "type": "reasoning", "summary": [], "status": "completed",
            "content": [{"type": "reasoning_text", "text": text}]}


def status_of(finish_reason: str | None) -> str:
    return "incomplete" if finish_reason == "length" else "completed"


def render_response(completion: dict[str, Any], call: ResponsesCall) -> dict[str, Any]:
    """A `response` object from an assembled `chat.completion`."""
    choice = (completion.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    output: list[dict[str, Any]] = []
    if message.get("reasoning_content"):
        output.append(reasoning_item(new_id("rs"), message["reasoning_content"]))
    if message.get("content") or not message.get("tool_calls"):
        output.append(message_item(new_id("msg"), message.get("content") or ""))
    for tool_call in message.get("tool_calls") or ():
        function = tool_call.get("function") or {}
        output.append(call_item(new_id("fc"), tool_call.get("id") or new_id("call"), function.get("name", ""),
                                function.get("arguments", ""), call.tool_names))
    return response_object(call, new_id("resp"), int(completion.get("created") or time.time()),
                           status_of(choice.get("finish_reason")), output, usage_of(completion.get("usage")))


@dataclass(slots=True)
class _Open:
    """The output item being streamed now."""

    kind: str  # "message" or "function_call"
    item: dict[str, Any]
    index: int
    tool_index: int | None = None
    text: list[str] = field(default_factory=list)
    chat_name: str = ""  # a call's function name as the model called it


class ResponsesStream:
    """The Responses event stream of one answer (a `StreamRenderer`)."""

    def __init__(self, call: ResponsesCall) -> None:
        self.call = call
        self.id = new_id("resp")
        self.created_at = int(time.time())
        self._seq = 0
        self._output: list[dict[str, Any]] = []
        self._open: _Open | None = None
        self._reasoning: list[str] = []
        self._finish: str | None = None
        self._usage: dict[str, Any] | None = None
        self._final: dict[str, Any] | None = None

    def _event(self, kind: str, **fields: Any) -> bytes:
        payload = {"type": kind, "sequence_number": self._seq, **fields}
        self._seq += 1
        return sse_event(kind, orjson.dumps(payload))

    def _snapshot(self, status: str, error: dict[str, Any] | None = None) -> dict[str, Any]:
        usage = usage_of(self._usage) if status != "in_progress" else None
        return response_object(self.call, self.id, self.created_at, status, list(self._output), usage, error)

    def start(self) -> bytes:
        return (self._event("response.created", response=self._snapshot("in_progress"))
                + self._event("response.in_progress", response=self._snapshot("in_progress")))

    def _close_open(self) -> list[bytes]:
        current, self._open = self._open, None
        if current is None:
            return []
        out = []
        if current.kind == "message":
            text = "".join(current.text)
            item_id = current.item["id"]
            where = {"item_id": item_id, "output_index": current.index, "content_index": 0}
            out.append(self._event("response.output_text.done", **where, text=text, logprobs=[]))
            out.append(self._event("response.content_part.done", **where, part=_text_part(text)))
            item = message_item(item_id, text)
        else:
            arguments = "".join(current.text)
            item = call_item(current.item["id"], current.item["call_id"], current.chat_name, arguments,
                             self.call.tool_names)
            where = {"item_id": item["id"], "output_index": current.index}
            if item["type"] == "custom_tool_call":  # its input is known once the arguments are whole
                out.append(self._event("response.custom_tool_call_input.delta", **where, delta=item["input"]))
                out.append(self._event("response.custom_tool_call_input.done", **where, input=item["input"]))
            else:
                out.append(self._event("response.function_call_arguments.done", **where, name=item["name"],
                                       arguments=arguments))
        self._output.append(item)
        out.append(self._event("response.output_item.done", output_index=current.index, item=item))
        return out

    def _flush_reasoning(self) -> list[bytes]:
        """Reasoning arrives before the answer: one finished reasoning item, sent when the answer starts."""
        if not self._reasoning:
            return []
        item = reasoning_item(new_id("rs"), "".join(self._reasoning))
        self._reasoning = []
        index = len(self._output)
        self._output.append(item)
        return [self._event("response.output_item.added", output_index=index, item={**item, "status": "in_progress"}),
                self._event("response.output_item.done", output_index=index, item=item)]

    def _open_message(self) -> list[bytes]:
        out = self._close_open() + self._flush_reasoning()
        index = len(self._output)
        item = message_item(new_id("msg"), "", status="in_progress")
        self._open = _Open("message", item, index)
        out.append(self._event("response.output_item.added", output_index=index, item=item))
        out.append(self._event("response.content_part.added", item_id=item["id"], output_index=index,
                               content_index=0, part=_text_part("")))
        return out

    def _open_call(self, call: dict[str, Any]) -> list[bytes]:
        out = self._close_open() + self._flush_reasoning()
        index = len(self._output)
        name = (call.get("function") or {}).get("name") or ""
        item = call_item(new_id("fc"), call.get("id") or new_id("call"), name, "", self.call.tool_names,
                         status="in_progress")
        self._open = _Open("function_call", item, index, tool_index=call.get("index", 0), chat_name=name)
        out.append(self._event("response.output_item.added", output_index=index, item=item))
        return out

    def feed(self, chunks: list[dict[str, Any]]) -> bytes:
        out: list[bytes] = []
        for kind, value in answer_pieces(chunks):
            if kind == "usage":
                self._usage = value
            elif kind == "finish":
                self._finish = value
            elif kind == "reasoning":
                self._reasoning.append(value)
            elif kind == "text":
                if self._open is None or self._open.kind != "message":
                    out += self._open_message()
                assert self._open is not None
                self._open.text.append(value)
                out.append(self._event("response.output_text.delta", item_id=self._open.item["id"],
                                       output_index=self._open.index, content_index=0, delta=value, logprobs=[]))
            elif kind == "tool_call":
                if self._open is None or self._open.tool_index != value.get("index", 0):
                    out += self._open_call(value)
                assert self._open is not None
                arguments = (value.get("function") or {}).get("arguments")
                if arguments:
                    self._open.text.append(arguments)
                    if self._open.item["type"] == "function_call":  # a custom call's input comes at its end
                        out.append(self._event("response.function_call_arguments.delta",
                                               item_id=self._open.item["id"], output_index=self._open.index,
                                               delta=arguments))
        return b"".join(out)

    def finish(self) -> bytes:
        if self._open is None and not any(i["type"] != "reasoning" for i in self._output):
            out = self._open_message()  # an empty answer is still one (empty) message
        else:
            out = []
        out += self._close_open() + self._flush_reasoning()
        status = status_of(self._finish)
        self._final = self._snapshot(status)
        out.append(self._event(f"response.{status}", response=self._final))
        return b"".join(out)

    def fail(self, err: GatewayError) -> bytes:
        error = {"code": err.code or "server_error", "message": err.message}
        return (self._event("error", code=error["code"], message=err.message, param=err.param)
                + self._event("response.failed", response=self._snapshot("failed", error)))

    def result(self) -> dict[str, Any] | None:
        return self._final
