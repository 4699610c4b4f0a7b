"""The `message` object a Messages stream makes, for a pass-through client that did not stream.

`MessageAnswer` takes the stream's events in order: parsed ones (`event()`) and runs of deltas as
their raw payloads (`deltas()`), most of an answer. A run of text, thinking or tool-input deltas of
one block, in the compact form Anthropic sends (`{"type":"content_block_delta","index":0,"delta":
{"type":"text_delta","text":"..."}}`), is decoded in one call: the JSON strings' insides are joined
and parsed as one string. A delta in any other form (a signature, a citation, spaces, extra fields,
a malformed one) is parsed on its own, as every delta used to be; a malformed one is left out.
Blocks come out as they came (thinking with its signature, unknown blocks, a tool_use's input).
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any

import orjson

from gateway.upstreams.wire import loads

_HEAD = b'{"type":"content_block_delta","index":'
_DELTA_TYPE = b',"delta":{"type":"'
# The rest of a compact delta's prefix, by its type -> the field of its block its pieces make.
_TAILS = ((b'text_delta","text":"', "text"), (b'thinking_delta","thinking":"', "thinking"),
          (b'input_json_delta","partial_json":"', "partial_json"))
# A delta's type -> (the field of its block its pieces make, the delta's key holding a piece).
_PIECES = {"text_delta": ("text", "text"), "thinking_delta": ("thinking", "thinking"),
           "input_json_delta": ("partial_json", "partial_json")}
_ABSENT = object()
Compact = tuple[bytes, int, str]  # a compact delta's prefix (up to its string's opening quote), index, field


def compact(payload: bytes) -> Compact | None:
    """The prefix, block index and field of a delta in Anthropic's compact form, or None."""
    comma = payload.find(_DELTA_TYPE, len(_HEAD))
    digits = payload[len(_HEAD):comma]
    if comma < 0 or not digits.isdigit() or (digits[0] == 48 and len(digits) > 1) or not payload.startswith(_HEAD):
        return None
    start = comma + len(_DELTA_TYPE)
    for tail, field in _TAILS:
        if payload.startswith(tail, start):
            return payload[:start + len(tail)], int(digits), field
    return None


class MessageAnswer:
    """Assembles one `message` from its stream's events (see the module's docstring)."""

    __slots__ = ("_blocks", "_message", "_pieces")

    def __init__(self) -> None:
        self._message: dict[str, Any] = {}
        self._blocks: dict[int, dict[str, Any]] = {}
        self._pieces: dict[tuple[int, str], list[str]] = {}  # (block index, field) -> its pieces, joined at the end

    def event(self, event: dict[str, Any]) -> None:
        """One parsed event, in stream order."""
        kind, index = event.get("type"), event.get("index")
        if kind == "content_block_delta":
            delta = event.get("delta")
            if type(index) is not int or index not in self._blocks or type(delta) is not dict:
                return
            piece = _PIECES.get(delta.get("type"))  # type: ignore[arg-type]
            if piece is not None:
                text = delta.get(piece[1], _ABSENT)
                if text is not _ABSENT:
                    self._piece(index, piece[0], text if type(text) is str else str(text))
            elif "signature" in delta:
                self._blocks[index]["signature"] = delta["signature"]
            elif "citation" in delta:
                self._blocks[index].setdefault("citations", []).append(delta["citation"])
        elif kind == "message_start":
            self._message = {**(event.get("message") or {}), "content": []}
        elif kind == "content_block_start" and isinstance(index, int):
            self._blocks[index] = dict(event.get("content_block") or {})
        elif kind == "message_delta":
            message = self._message
            message.update(event.get("delta") or {})
            message["usage"] = {**(message.get("usage") or {}), **(event.get("usage") or {})}

    def _piece(self, index: int, field: str, text: str) -> None:
        pieces = self._pieces.get((index, field))
        if pieces is None:
            pieces = self._pieces[(index, field)] = []
        pieces.append(text)

    def deltas(self, payloads: list[bytes]) -> str | None:
        """A run of deltas, unparsed, in stream order: those of one block's compact deltas decoded in
        one call. Returns the field they make when they were (all of them text, thinking or tool input)."""
        form = compact(payloads[0])
        if form is not None:
            prefix, index, field = form
            # Most often the whole run: joined by NULs (raw, never inside a valid JSON string), every
            # delta but the last ends `"}}` and every one but the first begins with the prefix.
            body = b"\x00".join(payloads)
            if (body.count(b'"}}\x00' + prefix) == len(payloads) - 1 and body.endswith(b'"}}')
                    and self._run(payloads, body, prefix, index, field)):
                return field
        for payload in payloads:
            self._parsed(payload)
        return None

    def _run(self, payloads: list[bytes], body: bytes, prefix: bytes, index: int, field: str) -> bool:
        """Compact deltas of one block and field (`body`: NUL-joined) decoded as one string, their
        strings' insides cut out at known offsets and joined (in C: cheaper than a replace of the
        boundaries, whose long pattern is searched at ~20 instructions a byte): False if they are not
        all whole (a quote unescaped). A piece ending in a backslash could join its neighbour's
        escape: such a run is parsed apart."""
        if body.endswith(b'\\"}}') or body.find(b'\\"}}\x00') >= 0:
            return False
        inside = itemgetter(slice(len(prefix), -3))
        try:
            text = orjson.loads(b'"' + b"".join(map(inside, payloads)) + b'"')
        except orjson.JSONDecodeError:
            return False
        if type(text) is not str:
            return False
        if index in self._blocks:
            self._piece(index, field, text)
        return True

    def _parsed(self, payload: bytes) -> None:
        event = loads(payload)
        if event is not None:  # a malformed one is left out
            self.event(event)

    def result(self) -> dict[str, Any]:
        blocks = {index: dict(block) for index, block in self._blocks.items()}
        for (index, field), texts in self._pieces.items():
            block = blocks[index]
            if field == "partial_json":  # a tool_use block's input, streamed as JSON text
                try:
                    block["input"] = orjson.loads("".join(texts) or "{}")
                except orjson.JSONDecodeError:
                    block["input"] = {}
            else:
                block[field] = str(block.get(field) or "") + "".join(texts)
        return {**self._message, "content": [blocks[i] for i in sorted(blocks)]}
