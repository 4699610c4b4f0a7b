"""Answers that are not free text, for tests of tools and structured output through the gateway.

Does: decide whether a chat request gets a tool call (it offers function `tools`, `tool_choice` is
not "none", and its last message is not a tool result: the model "calls" the first tool, or the one
`tool_choice` names) or a JSON document (`response_format` json_schema or json_object); build that
answer deterministically from the schema (every required property, strings from the word list);
split it into the pieces that are streamed as tokens. Also the legacy-completion prompt as messages,
and deterministic embedding vectors.
Does not: time, stream or touch sockets (endpoint.py, payloads.py do).
"""

from __future__ import annotations

import base64
import hashlib
import struct
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.simulator.content import WORDS

PIECE_CHARS = 4  # a structured answer is streamed in pieces of this many characters (one "token" each)
EMBEDDING_DIMENSIONS = 8


@dataclass(frozen=True, slots=True)
class Structured:
    """A tool call or a JSON answer, as the pieces it is streamed in."""

    kind: str  # "tool_call", "json" or "text" (script.py's final answer), the last two sent as content
    pieces: tuple[str, ...]
    tool_name: str = ""
    call_id: str = ""

    @property
    def text(self) -> str:
        return "".join(self.pieces)


def instance_of(schema: Any, seed: int = 0, depth: int = 0) -> Any:
    """A small value valid for a (simple) JSON schema: objects with their required properties (all of
    them when none are listed), arrays of one item, the first enum value, words for strings."""
    if not isinstance(schema, dict) or depth > 8:
        return None
    if schema.get("enum"):
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    for key in ("anyOf", "oneOf", "allOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return instance_of(schema[key][0], seed, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or (kind is None and "properties" in schema):
        props = schema.get("properties") or {}
        names = schema.get("required") or list(props)
        return {name: instance_of(props.get(name, {"type": "string"}), seed + i + 1, depth + 1)
                for i, name in enumerate(names)}
    if kind == "array":
        return [instance_of(schema.get("items") or {"type": "string"}, seed + 1, depth + 1)]
    if kind == "integer":
        return seed % 10
    if kind == "number":
        return seed % 10 + 0.5
    if kind == "boolean":
        return seed % 2 == 0
    if kind == "null":
        return None
    return WORDS[seed % len(WORDS)]


def split_pieces(text: str) -> tuple[str, ...]:
    return tuple(text[i:i + PIECE_CHARS] for i in range(0, len(text), PIECE_CHARS)) or ("",)


def _chosen_tool(body: dict[str, Any]) -> dict[str, Any] | None:
    tools = [t.get("function") for t in body.get("tools") or () if isinstance(t, dict)]
    tools = [t for t in tools if isinstance(t, dict) and isinstance(t.get("name"), str)]
    choice = body.get("tool_choice")
    if not tools or choice == "none":
        return None
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        return next((t for t in tools if t["name"] == name), tools[0])
    return tools[0]


def structured_answer(body: dict[str, Any], messages: list[Any], digest: bytes) -> Structured | None:
    last = messages[-1] if messages else {}
    tool = _chosen_tool(body)
    if tool is not None and last.get("role") != "tool":
        arguments = orjson.dumps(instance_of(tool.get("parameters") or {"type": "object"}, digest[0])).decode()
        return Structured("tool_call", split_pieces(arguments), tool["name"], "call_" + digest[:8].hex())
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        schema = (fmt.get("json_schema") or {}).get("schema") or {"type": "object"}
        return Structured("json", split_pieces(orjson.dumps(instance_of(schema, digest[0])).decode()))
    if isinstance(fmt, dict) and fmt.get("type") == "json_object":
        return Structured("json", split_pieces(orjson.dumps({"answer": WORDS[digest[0]]}).decode()))
    return None


def prompt_messages(prompt: Any) -> list[dict[str, Any]] | None:
    """A legacy completion's `prompt` as one user message (None if it is not a prompt)."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    if isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        return [{"role": "user", "content": "\n".join(prompt)}]
    if isinstance(prompt, list) and prompt and all(type(t) is int for t in prompt):
        return [{"role": "user", "content": " ".join(map(str, prompt))}]
    if isinstance(prompt, list) and prompt and all(isinstance(p, list) and all(type(t) is int for t in p)
                                                   for p in prompt):
        return [{"role": "user", "content": "\n".join(" ".join(map(str, p)) for p in prompt)}]
    return None


def embedding(text: str, dimensions: int = EMBEDDING_DIMENSIONS) -> list[float]:
    """A deterministic unit-free vector in [-1, 1) for `text` (equal texts, equal vectors)."""
    raw = hashlib.shake_256(text.encode()).digest(2 * dimensions)
    return [int.from_bytes(raw[2 * i:2 * i + 2], "big") / 32768.0 - 1.0 for i in range(dimensions)]


def embedding_data(vector: list[float], base64_format: bool) -> list[float] | str:
    if not base64_format:
        return vector
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
