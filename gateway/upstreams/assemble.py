"""Build one `chat.completion` object from streamed `chat.completion.chunk` objects.

The gateway always streams from providers (so that time to first token and decode rate are measured
for every request) and uses this to answer clients that asked for a plain JSON response. It merges
content, reasoning, refusals, tool-call fragments and logprobs per choice, keeps the provider's id,
`created` and `system_fingerprint`, and attaches `usage`. It does no I/O.
"""

from __future__ import annotations

from typing import Any


class _Choice:
    __slots__ = ("content", "finish_reason", "logprobs", "reasoning", "refusal", "role", "tool_calls")

    def __init__(self) -> None:
        self.role = "assistant"
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.refusal: list[str] = []
        self.tool_calls: dict[int, dict[str, Any]] = {}
        self.logprobs: list[Any] | None = None
        self.finish_reason: str | None = None

    def add(self, choice: dict[str, Any]) -> None:
        delta = choice.get("delta")
        if delta:
            content = delta.get("content")
            if content:
                self.content.append(content)
                if len(delta) > 1:  # most chunks carry content alone: the rest is rarely looked for
                    self._add_rest(delta)
            else:
                if choice.get("text"):  # a legacy completion's chunk
                    self.content.append(choice["text"])
                self._add_rest(delta)
        elif choice.get("text"):
            self.content.append(choice["text"])
        logprobs = choice.get("logprobs")
        if logprobs and logprobs.get("content"):
            self.logprobs = (self.logprobs or []) + list(logprobs["content"])
        if choice.get("finish_reason"):
            self.finish_reason = choice["finish_reason"]

    def _add_rest(self, delta: dict[str, Any]) -> None:
        """Everything in a delta but its content."""
        if delta.get("role"):
            self.role = delta["role"]
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if reasoning:
            self.reasoning.append(reasoning)
        if delta.get("refusal"):
            self.refusal.append(delta["refusal"])
        for call in delta.get("tool_calls") or ():
            self._add_tool_call(call)

    def _add_tool_call(self, call: dict[str, Any]) -> None:
        index = call.get("index", len(self.tool_calls))
        slot = self.tool_calls.setdefault(
            index, {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
        )
        if call.get("id"):
            slot["id"] = call["id"]
        if call.get("type"):
            slot["type"] = call["type"]
        function = call.get("function") or {}
        if function.get("name"):
            slot["function"]["name"] += function["name"]
        if function.get("arguments"):
            slot["function"]["arguments"] += function["arguments"]

    def message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": self.role, "content": "".join(self.content) or None}
        if self.reasoning:
            message["reasoning_content"] = "".join(self.reasoning)
        if self.refusal:
            message["refusal"] = "".join(self.refusal)
        if self.tool_calls:
            message["tool_calls"] = [self.tool_calls[i] for i in sorted(self.tool_calls)]
        return message


class CompletionAssembler:
    """Feed chunks in order with `add()`; `result()` returns the assembled completion."""

    __slots__ = ("_choices", "_first", "usage")

    def __init__(self) -> None:
        self._choices: dict[int, _Choice] = {}
        self._first: dict[str, Any] | None = None
        self.usage: dict[str, Any] | None = None

    def add(self, chunk: dict[str, Any]) -> None:
        if self._first is None:
            self._first = chunk
        for choice in chunk.get("choices") or ():
            index = choice.get("index", 0)
            slot = self._choices.get(index)
            if slot is None:
                slot = self._choices[index] = _Choice()
            slot.add(choice)
        if chunk.get("usage"):
            self.usage = chunk["usage"]

    def result(self, model: str) -> dict[str, Any]:
        first = self._first or {}
        choices = []
        for index in sorted(self._choices) or [0]:
            slot = self._choices.get(index) or _Choice()
            choices.append({
                "index": index,
                "message": slot.message(),
                "logprobs": {"content": slot.logprobs} if slot.logprobs is not None else None,
                "finish_reason": slot.finish_reason or "stop",
            })
        completion: dict[str, Any] = {
            "id": first.get("id", ""),
            "object": "chat.completion",
            "created": first.get("created", 0),
            "model": model,
            "choices": choices,
        }
        if first.get("system_fingerprint") is not None:
            completion["system_fingerprint"] = first["system_fingerprint"]
        if self.usage is not None:
            completion["usage"] = self.usage
        return completion
