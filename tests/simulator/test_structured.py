"""`gateway.simulator.structured`: tool calls, JSON answers, prompts and embedding vectors."""

from __future__ import annotations

import base64
import struct

import orjson

from gateway.simulator.structured import embedding, embedding_data, instance_of, prompt_messages, structured_answer

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "integer"},
                                           "tags": {"type": "array", "items": {"type": "string"}},
                                           "kind": {"enum": ["a", "b"]}, "ok": {"type": ["boolean", "null"]}},
          "required": ["name", "n", "tags", "kind", "ok"]}


def test_instances_fit_their_schema() -> None:
    value = instance_of(SCHEMA, 3)
    assert set(value) == {"name", "n", "tags", "kind", "ok"}
    assert isinstance(value["name"], str) and isinstance(value["n"], int) and value["kind"] == "a"
    assert isinstance(value["tags"], list) and isinstance(value["ok"], bool)


def test_tool_call_unless_the_last_message_is_a_tool_result() -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": SCHEMA}},
             {"type": "function", "function": {"name": "g"}}]
    call = structured_answer({"tools": tools}, [{"role": "user", "content": "x"}], b"\x01" * 32)
    assert call is not None and call.kind == "tool_call" and call.tool_name == "f"
    assert set(orjson.loads(call.text)) == set(SCHEMA["properties"])  # type: ignore[arg-type]
    named = structured_answer({"tools": tools, "tool_choice": {"type": "function", "function": {"name": "g"}}},
                              [{"role": "user", "content": "x"}], b"\x01" * 32)
    assert named is not None and named.tool_name == "g"
    assert structured_answer({"tools": tools}, [{"role": "tool", "content": "r"}], b"\x01" * 32) is None
    assert structured_answer({"tools": tools, "tool_choice": "none"}, [{"role": "user"}], b"\x01" * 32) is None
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}}
    answer = structured_answer({"response_format": fmt}, [{"role": "user"}], b"\x01" * 32)
    assert answer is not None and answer.kind == "json" and "tags" in orjson.loads(answer.text)


def test_prompts_and_embeddings() -> None:
    assert prompt_messages(["a", "b"]) == [{"role": "user", "content": "a\nb"}] and prompt_messages(7) is None
    vector = embedding("hi")
    assert vector == embedding("hi") != embedding("ho") and len(vector) == 8
    packed = base64.b64decode(embedding_data(vector, True))  # type: ignore[arg-type]
    assert list(struct.unpack("<8f", packed)) == [float(struct.unpack("<f", struct.pack("<f", v))[0]) for v in vector]
