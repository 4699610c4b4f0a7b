"""The OpenAPI request schemas of the translated client APIs (Responses, Messages): exactly what
their parsers accept, so that schemathesis's checks (a schema-valid body is served, an invalid one
refused) hold. Documentation only: the parsers do the checking, with orjson, on the hot path.
Routing fields (`provider`, `speed`, `models`, ...) are accepted as in chat and described in the README.
"""

from __future__ import annotations

from typing import Any


def _const(value: str) -> dict[str, Any]:
    return {"type": "string", "enum": [value]}


def _obj(required: list[str], **properties: Any) -> dict[str, Any]:
    return {"type": "object", "required": required, "properties": properties}


NUMBER = {"type": ["number", "null"]}
BOOLEAN = {"type": ["boolean", "null"]}
STRING = {"type": "string"}

# -- Responses --------------------------------------------------------------------------------
def _other(known: list[str]) -> dict[str, Any]:
    """An object of any other `type`: dropped and named by the parser (a type not known yet, too)."""
    return _obj(["type"], type={"type": "string", "not": {"enum": known}})


_TEXT_PART = _obj(["type", "text"], type={"type": "string", "enum": ["input_text", "output_text", "text"]},
                  text=STRING)
_PART = {"oneOf": [_TEXT_PART, _obj(["type", "refusal"], type=_const("refusal"), refusal=STRING),
                   _obj(["type", "image_url"], type=_const("input_image"), image_url=STRING),
                   _other(["input_text", "output_text", "text", "refusal", "input_image"])]}
_CONTENT = {"anyOf": [STRING, {"type": "array", "items": _PART}]}
_OUTPUT_ITEMS = ["function_call_output", "custom_tool_call_output"]
_ITEM = {"oneOf": [
    _obj(["role", "content"], type=_const("message"),
         role={"type": "string", "enum": ["user", "system", "developer", "assistant"]}, content=_CONTENT),
    _obj(["type", "call_id", "name", "arguments"], type=_const("function_call"), call_id=STRING, name=STRING,
         arguments=STRING, namespace={"type": ["string", "null"]}),
    _obj(["type", "call_id", "name", "input"], type=_const("custom_tool_call"), call_id=STRING, name=STRING,
         input=STRING, namespace={"type": ["string", "null"]}),
    _obj(["type", "call_id", "output"], type={"type": "string", "enum": _OUTPUT_ITEMS}, call_id=STRING,
         output=_CONTENT),
    _obj(["type"], type=_const("reasoning")),
    _other(["message", "function_call", "custom_tool_call", "reasoning", *_OUTPUT_ITEMS]),
]}
_FORMAT = {"oneOf": [_obj(["type"], type={"type": "string", "enum": ["text", "json_object"]}),
                     _obj(["type", "name", "schema"], type=_const("json_schema"), name=STRING,
                          schema={"type": "object"}),
                     _other(["text", "json_object", "json_schema"])]}
_FUNCTION_TOOL = _obj(["type", "name"], type={"type": "string", "enum": ["function", "custom"]},
                      name={"type": "string", "minLength": 1})
_CALLABLE = ["function", "custom", "namespace"]  # the tool types a chat model can call
_TOOL = {"oneOf": [
    _FUNCTION_TOOL,
    _obj(["type", "name", "tools"], type=_const("namespace"), name={"type": "string", "minLength": 1},
         tools={"type": "array", "items": _FUNCTION_TOOL}),
    _other(["function", "custom", "namespace"]),  # built-in tools: dropped for chat upstreams, and named
]}

RESPONSES_REQUEST: dict[str, Any] = {
    "type": "object", "required": ["model", "input"],
    "description": "OpenAI's Responses request, translated to a chat completion. Other fields of OpenAI's API "
                   "are accepted: built-in tools, items and fields with no chat equivalent are dropped and named "
                   "in `x-ultraroute-dropped`; `conversation`, `background: true` and `prompt` are refused.",
    "properties": {
        "model": {"type": "string", "minLength": 1},
        "input": {"anyOf": [STRING, {"type": "array", "minItems": 1, "items": _ITEM}]},
        "instructions": {"type": ["string", "null"]},
        "tools": {"type": ["array", "null"], "items": _TOOL},
        "tool_choice": {"anyOf": [{"type": "string", "enum": ["auto", "none", "required"]},
                                  _obj(["type", "name"], type=_const("function"), name=STRING), {"type": "null"}]},
        "max_output_tokens": {"type": ["integer", "null"], "minimum": 1},
        "temperature": NUMBER, "top_p": NUMBER,
        "text": {"anyOf": [{"type": "null"}, {"type": "object", "properties": {
            "format": {"anyOf": [{"type": "null"}, _FORMAT]}}}]},
        "stream": BOOLEAN, "store": BOOLEAN, "parallel_tool_calls": BOOLEAN,
        "previous_response_id": {"type": ["string", "null"], "minLength": 1, "maxLength": 128},
        "metadata": {"type": ["object", "null"]},
        "reasoning": {"type": ["object", "null"], "properties": {"effort": {"type": ["string", "null"]}}},
    },
    # `tool_choice: required` forces a tool: not when every tool offered is one the gateway drops.
    "if": {"required": ["tool_choice"], "properties": {"tool_choice": {"const": "required"}}},
    "then": {"properties": {"tools": {"anyOf": [
        {"type": "null"}, {"type": "array", "maxItems": 0},
        {"type": "array", "contains": _obj(["type"], type={"type": "string", "enum": _CALLABLE})}]}}},
}

# -- Messages ---------------------------------------------------------------------------------
# Lenient where Anthropic adds things (messages_content.py): a block of a type the parser does not
# read is dropped and named, so the schema allows any object with another string `type`; the blocks it
# reads are held to their shapes. Fields it never refuses (thinking, metadata, ...) are not described.


def _other(*known: str) -> dict[str, Any]:
    return _obj(["type"], type={"type": "string", "not": {"enum": list(known)}})


_TEXT = _obj(["type", "text"], type=_const("text"), text=STRING)
_IMAGE = _obj(["type", "source"], type=_const("image"), source={"oneOf": [
    _obj(["type", "data"], type=_const("base64"), media_type=STRING, data=STRING),
    _obj(["type", "url"], type=_const("url"), url=STRING),
    _other("base64", "url")]})
_TOOL_USE = _obj(["type", "id", "name"], type=_const("tool_use"), id=STRING, name=STRING, input={"type": "object"})
_RESULT_CONTENT = {"anyOf": [STRING, {"type": "null"},
                             {"type": "array", "items": {"oneOf": [_TEXT, _IMAGE, _other("text", "image")]}}]}
_TOOL_RESULT = _obj(["type", "tool_use_id"], type=_const("tool_result"), tool_use_id=STRING,
                    is_error={"type": "boolean"}, content=_RESULT_CONTENT)
_READ = ("text", "image", "tool_use", "tool_result")  # the block types the parser reads
_SYSTEM = {"anyOf": [STRING, {"type": "array", "items": {"oneOf": [_TEXT, _other("text")]}}]}


def _turn(role: str, blocks: list[dict[str, Any]]) -> dict[str, Any]:
    return _obj(["role", "content"], role=_const(role),
                content={"anyOf": [STRING, {"type": "array", "items": {"oneOf": [*blocks, _other(*_READ)]}}]})


_CLIENT_TOOL = _obj(["name"], type={"type": ["string", "null"], "enum": ["custom", None]}, name=STRING,
                    description=STRING, input_schema={"type": "object"})
_SERVER_TOOL = _obj(["type"], type={"type": "string", "not": {"enum": ["custom"]}})

MESSAGES_REQUEST: dict[str, Any] = {
    "type": "object", "required": ["model", "messages", "max_tokens"],
    "description": "Anthropic's Messages request, translated to a chat completion. Errors use Anthropic's shape. "
                   "Fields and blocks with no chat equivalent are dropped and named in `x-ultraroute-dropped`.",
    "properties": {
        "model": {"type": "string", "minLength": 1},
        "max_tokens": {"type": "integer", "minimum": 1},
        "messages": {"type": "array", "minItems": 1, "items": {"oneOf": [
            _turn("user", [_TEXT, _IMAGE, _TOOL_RESULT]), _turn("assistant", [_TEXT, _IMAGE, _TOOL_USE]),
            _obj(["role", "content"], role=_const("system"), content=_SYSTEM)]}},
        "system": {"anyOf": [{"type": "null"}, _SYSTEM]},
        "tools": {"type": ["array", "null"], "items": {"anyOf": [_CLIENT_TOOL, _SERVER_TOOL]}},
        "tool_choice": {"anyOf": [{"type": "null"},
                                  _obj(["type"], type={"type": "string", "enum": ["auto", "none", "any"]},
                                       disable_parallel_tool_use={"type": "boolean"}),
                                  _obj(["type", "name"], type=_const("tool"), name=STRING,
                                       disable_parallel_tool_use={"type": "boolean"})]},
        "stop_sequences": {"type": ["array", "null"], "items": STRING},
        "temperature": NUMBER, "top_p": NUMBER, "stream": BOOLEAN,
    },
}
