"""The benchmarks' stub upstream speaks Anthropic Messages and OpenAI Responses as the official SDKs
read them, so `make bench` and benchmarks/instructions.py measure the pass-through of real shapes:
the same 20 tokens as its chat answer, usage, and the tier it reports."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import anthropic
import openai
import pytest

from tests.harness import ROOT, free_port, terminate, wait_ready

TEXT = "".join(f"tok{i} " for i in range(20))  # the stub's chat answer, token by token
PROMPT = [{"role": "user", "content": "Say something."}]


@pytest.fixture(scope="module")
def stub() -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / "stub_upstream.py"), str(port)],
                            stderr=subprocess.PIPE)
    try:
        wait_ready(proc, f"http://127.0.0.1:{port}/", 30, "stub upstream", lambda: "")
        yield f"http://127.0.0.1:{port}"
    finally:
        terminate(proc)


def test_messages_answer_and_stream_parse_with_the_anthropic_sdk(stub: str) -> None:
    client = anthropic.Anthropic(base_url=stub, api_key="sk-bench", max_retries=0)
    message = client.messages.create(model="m", max_tokens=16, messages=PROMPT)  # type: ignore[arg-type]
    assert [b.type for b in message.content] == ["text"]
    assert message.content[0].text == TEXT  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (12, 20)
    assert message.usage.speed == "standard"

    with client.messages.stream(model="m", max_tokens=16, messages=PROMPT) as stream:  # type: ignore[arg-type]
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds.count("text") == 20  # one per text_delta, as the SDK reports them
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert final.content[0].text == TEXT  # type: ignore[union-attr]
    assert final.stop_reason == "end_turn" and final.usage.output_tokens == 20 and final.usage.speed == "standard"


def test_responses_answer_and_stream_parse_with_the_openai_sdk(stub: str) -> None:
    client = openai.OpenAI(base_url=f"{stub}/v1", api_key="sk-bench", max_retries=0)
    response = client.responses.create(model="m", input="Say something.")
    assert response.output_text == TEXT
    assert response.status == "completed" and response.service_tier == "default"
    assert response.usage is not None and (response.usage.input_tokens, response.usage.output_tokens) == (12, 20)

    with client.responses.stream(model="m", input="Say something.") as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds.count("response.output_text.delta") == 20
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert final.output_text == TEXT and final.usage is not None and final.usage.output_tokens == 20


def test_chat_answers_unchanged(stub: str) -> None:
    client = openai.OpenAI(base_url=f"{stub}/v1", api_key="sk-bench", max_retries=0)
    completion = client.chat.completions.create(model="m", messages=PROMPT)  # type: ignore[arg-type]
    assert completion.choices[0].message.content == TEXT
    chunks = list(client.chat.completions.create(model="m", messages=PROMPT, stream=True))  # type: ignore[arg-type]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == TEXT
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 20
