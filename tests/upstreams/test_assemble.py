from gateway.upstreams.assemble import CompletionAssembler


def chunk(delta: dict, finish: str | None = None, **extra: object) -> dict:
    return {"id": "c1", "created": 7, "model": "up", "system_fingerprint": "fp",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}


def test_merges_content_reasoning_tools_and_usage() -> None:
    a = CompletionAssembler()
    a.add(chunk({"role": "assistant", "reasoning_content": "think "}))
    a.add(chunk({"reasoning_content": "more"}))
    a.add(chunk({"content": "Hel"}))
    a.add(chunk({"content": "lo"}))
    a.add(chunk({"tool_calls": [{"index": 0, "id": "t1", "type": "function",
                                 "function": {"name": "get", "arguments": '{"a"'}}]}))
    a.add(chunk({"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}, finish="tool_calls"))
    a.add({"id": "c1", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 6}})
    out = a.result("public")
    msg = out["choices"][0]["message"]
    assert out["model"] == "public" and out["object"] == "chat.completion" and out["id"] == "c1"
    assert msg["content"] == "Hello" and msg["reasoning_content"] == "think more"
    assert msg["tool_calls"] == [{"id": "t1", "type": "function",
                                  "function": {"name": "get", "arguments": '{"a": 1}'}}]
    assert out["choices"][0]["finish_reason"] == "tool_calls"
    assert out["usage"]["completion_tokens"] == 6 and out["system_fingerprint"] == "fp"
