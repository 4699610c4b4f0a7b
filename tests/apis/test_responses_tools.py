"""`gateway.apis.responses_tools`: Responses tools -> chat tools, and the names calls map back to."""

from __future__ import annotations

import re
from typing import Any

import pytest

from gateway.apis.responses_tools import ToolName, chat_name, chat_tool_choice, chat_tools, client_name
from gateway.errors import InvalidRequest

SHELL = {"type": "function", "name": "exec_command", "parameters": {"type": "object"}, "strict": False}
NAMESPACE = {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents.", "tools": [
    {"type": "function", "name": "spawn_agent", "description": "Spawn one.", "parameters": {"type": "object"}},
    {"type": "function", "name": "wait_agent", "parameters": {"type": "object"}}]}


def test_namespaces_are_flattened_and_built_in_tools_dropped() -> None:
    tools = chat_tools([SHELL, NAMESPACE, {"type": "web_search", "external_web_access": True},
                        {"type": "file_search", "vector_store_ids": ["v"]}, {"type": "web_search"}])
    assert [t["function"]["name"] for t in tools.chat] == ["exec_command", "multi_agent_v1__spawn_agent",
                                                           "multi_agent_v1__wait_agent"]
    assert tools.chat[1] == {"type": "function", "function": {"name": "multi_agent_v1__spawn_agent",
                                                              "description": "Spawn one.",
                                                              "parameters": {"type": "object"}}}
    assert tools.dropped == ["tools.web_search", "tools.file_search"]
    assert client_name("multi_agent_v1__wait_agent", tools.names) == ToolName("wait_agent", "multi_agent_v1")
    assert client_name("exec_command", tools.names) == ToolName("exec_command")


def test_a_custom_tool_is_a_function_of_one_string() -> None:
    tools = chat_tools([{"type": "custom", "name": "apply_patch", "description": "Patch files.",
                         "format": {"type": "grammar", "syntax": "lark", "definition": "start: x"}}])
    [tool] = tools.chat
    assert tool["function"]["parameters"]["properties"] == {"input": {"type": "string"}}
    assert client_name("apply_patch", tools.names) == ToolName("apply_patch", custom=True)
    assert tools.dropped == ["tools.custom.format"]  # the grammar: a chat function takes none


def test_chat_names_are_legal_distinct_and_stable() -> None:
    long = chat_name("a_rather_long_tool_name_that_goes_on_and_on", "mcp__some_server_with_a_long_name__")
    other = chat_name("a_rather_long_tool_name_that_goes_on_and_on_too", "mcp__some_server_with_a_long_name__")
    assert len(long) <= 64 and re.fullmatch(r"[a-zA-Z0-9_-]+", long) and long != other
    assert chat_name("read.file", "fs") == chat_name("read.file", "fs")
    assert re.fullmatch(r"[\w-]+", chat_name("read.file"))
    assert chat_name("spawn", "agents_") == "agents__spawn"


def test_tool_choice() -> None:
    tools = chat_tools([SHELL, NAMESPACE, {"type": "web_search"}])
    assert chat_tool_choice("auto", tools) == ("auto", tools.chat)
    choice, _ = chat_tool_choice({"type": "function", "name": "spawn_agent", "namespace": "multi_agent_v1"}, tools)
    assert choice == {"type": "function", "function": {"name": "multi_agent_v1__spawn_agent"}}
    mode, allowed = chat_tool_choice({"type": "allowed_tools", "mode": "required",
                                      "tools": [{"type": "function", "name": "exec_command"}]}, tools)
    assert mode == "required" and allowed == [tools.chat[0]]


@pytest.mark.parametrize(("tools", "choice", "named"), [
    ([SHELL, {"type": "web_search"}], {"type": "web_search"}, "tools.web_search"),
    ([{"type": "web_search"}], "required", "tools.web_search"),
    ([SHELL], {"type": "file_search"}, "tools.file_search"),
])
def test_forcing_a_dropped_tool_is_refused_naming_both(tools: list[Any], choice: Any, named: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        chat_tool_choice(choice, chat_tools(tools))
    assert err.value.param == "tool_choice" and named in err.value.message


@pytest.mark.parametrize(("tools", "param"), [
    ("x", "tools"),
    ([{"name": "f"}], "tools[0]"),
    ([{"type": "function"}], "tools[0].name"),
    ([{"type": "namespace", "name": "n"}], "tools[0]"),
    ([{"type": "namespace", "name": "n", "tools": [{"type": "function", "name": 3}]}], "tools[0].tools[0].name"),
])
def test_malformed_tools_name_the_field(tools: Any, param: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        chat_tools(tools)
    assert err.value.param == param
