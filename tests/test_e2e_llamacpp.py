"""End to end behind a real llama.cpp server: llama-cpp-python's `python -m llama_cpp.server`.

The server runs a tiny llama model the test writes itself (tests/tiny_gguf.py: random weights, 12
words, answers that end by themselves after a few words). Like llama.cpp's own server, it sends no
usage in its streams whatever `stream_options.include_usage` says, so every streamed usage the clients
see is the gateway's estimate: the official `anthropic` and `openai` SDKs' streamed Messages, Responses
and chat answers must all carry non-zero usage, marked `"estimated": true`.

Model `tiny` is the endpoint as the README says to declare it (`stream_usage: false`); `tiny-default`
is the same server with the default (`stream_usage: true`): the gateway asks for usage, gets none,
estimates the same way and says so once in its log.

llama-cpp-python is compiled from source (CMAKE_ARGS="-DGGML_NATIVE=OFF", portable) into its own venv,
`.venv/third-party/llamacpp`, by `make install` (its server pulls its own FastAPI and Starlette pins,
which must not meet the gateway's).
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.apis.test_e2e_messages import access_line
from tests.harness import ROOT, GatewayProcess, free_port, terminate, wait_ready

LLAMA_PYTHON = ROOT / ".venv" / "third-party" / "llamacpp" / "bin" / "python"
ESTIMATED = {"estimated": True}
MODELS = ["tiny", "tiny-default"]
ASK = "Say something, please."
# Writing the model, starting llama.cpp and the gateway on a busy machine can take a minute of the first test.
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def llama() -> Iterator[str]:
    if not LLAMA_PYTHON.exists():
        pytest.fail(f"llama-cpp-python is not installed in {LLAMA_PYTHON.parent.parent}: run `make install`")
    workdir = Path(tempfile.mkdtemp(prefix="ultraroute-llamacpp-"))
    model = workdir / "tiny.gguf"
    subprocess.run([str(LLAMA_PYTHON), str(ROOT / "tests" / "tiny_gguf.py"), str(model)], check=True, timeout=120)
    port = free_port()
    log = workdir / "llama.log"
    # One thread: the machine's two cores are shared with the gateway and the test.
    args = [str(LLAMA_PYTHON), "-m", "llama_cpp.server", "--model", str(model), "--model_alias", "tiny-gguf",
            "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "512", "--n_threads", "1"]
    with log.open("ab") as out:
        proc = subprocess.Popen(args, cwd=workdir, stdout=out, stderr=out)
    try:
        wait_ready(proc, f"http://127.0.0.1:{port}/v1/models", 120, "llama_cpp.server",
                   lambda: log.read_text(errors="replace")[-3000:])
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        terminate(proc)


@pytest.fixture(scope="module")
def gateway(llama: str) -> Iterator[GatewayProcess]:
    endpoint: dict[str, Any] = {"provider": "llama", "model": "tiny-gguf", "price": {"input": 1.0, "output": 2.0},
                                "first_token_budget_s": 60}  # a cold llama.cpp on a busy machine
    catalogue = {"providers": {"llama": {"base_url": llama}},
                 "models": {"tiny": {"endpoints": [{**endpoint, "stream_usage": False}]},
                            "tiny-default": {"endpoints": [endpoint]}}}
    with GatewayProcess(catalogue) as gw:
        yield gw


def openai_client(gw: GatewayProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url, api_key="unused", max_retries=0, timeout=120)


def anthropic_client(gw: GatewayProcess) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gw.url, api_key="unused", max_retries=0, timeout=120)


def assert_charged(gw: GatewayProcess, request_id: str, input_tokens: int, output_tokens: int) -> None:
    """The access log's tokens and cost are the usage the client was shown (price: $1 / $2 per M)."""
    line = access_line(gw, request_id)
    assert line["usage_estimated"] is True
    assert (line["tokens"]["input"], line["tokens"]["output"]) == (input_tokens, output_tokens)
    assert line["cost_usd"] == pytest.approx((input_tokens + 2 * output_tokens) / 1e6, abs=1e-6)


@pytest.mark.parametrize("model", MODELS)
def test_messages_stream_carries_usage(gateway: GatewayProcess, model: str) -> None:
    request_id = f"llama-messages-{model}"
    with anthropic_client(gateway).messages.stream(model=model, max_tokens=64,
                                                   messages=[{"role": "user", "content": ASK}],
                                                   extra_headers={"x-request-id": request_id}) as stream:
        events = list(stream)
        final = stream.get_final_message()
    start = events[0]
    assert start.type == "message_start" and start.message.usage.input_tokens > 0  # as Anthropic puts it there
    deltas = [e for e in events if e.type == "content_block_delta"]
    [end] = [e for e in events if e.type == "message_delta"]
    assert final.stop_reason == "end_turn" and final.content[0].text.strip()  # type: ignore[union-attr]
    # One token a chunk from llama.cpp: the estimate counts them exactly.
    assert end.usage.output_tokens == len(deltas) > 0 and end.usage.model_extra == ESTIMATED
    assert final.usage.input_tokens == start.message.usage.input_tokens > 0
    assert final.usage.output_tokens == len(deltas)
    assert_charged(gateway, request_id, final.usage.input_tokens, final.usage.output_tokens)


def test_messages_stream_cut_by_max_tokens(gateway: GatewayProcess) -> None:
    with anthropic_client(gateway).messages.stream(model="tiny", max_tokens=3,
                                                   messages=[{"role": "user", "content": ASK}]) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "max_tokens"
    assert final.usage.output_tokens == 3 and final.usage.input_tokens > 0


@pytest.mark.parametrize("model", MODELS)
def test_responses_stream_carries_usage(gateway: GatewayProcess, model: str) -> None:
    request_id = f"llama-responses-{model}"
    with openai_client(gateway).responses.stream(model=model, input=ASK,
                                                 extra_headers={"x-request-id": request_id}) as stream:
        events = list(stream)
        final = stream.get_final_response()
    last = events[-1]
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    assert last.type == "response.completed" and final.status == "completed" and final.output_text.strip()
    usage = last.response.usage
    assert usage is not None and usage.model_extra == ESTIMATED
    assert usage.input_tokens > 0 and usage.output_tokens == len(deltas) > 0
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    assert_charged(gateway, request_id, usage.input_tokens, usage.output_tokens)


def test_responses_stream_cut_by_max_output_tokens(gateway: GatewayProcess) -> None:
    events = list(openai_client(gateway).responses.create(model="tiny", input=ASK, max_output_tokens=3, stream=True,
                                                          extra_headers={"x-request-id": "llama-incomplete"}))
    last = events[-1]
    assert last.type == "response.incomplete" and last.response.incomplete_details is not None
    assert last.response.incomplete_details.reason == "max_output_tokens"
    usage = last.response.usage
    assert usage is not None and usage.output_tokens == 3 and usage.input_tokens > 0
    assert usage.model_extra == ESTIMATED
    assert_charged(gateway, "llama-incomplete", usage.input_tokens, 3)


def test_unary_answers_carry_usage(gateway: GatewayProcess) -> None:
    message = anthropic_client(gateway).messages.create(model="tiny", max_tokens=64,
                                                        messages=[{"role": "user", "content": ASK}])
    assert message.stop_reason == "end_turn" and message.usage.input_tokens > 0 and message.usage.output_tokens > 0
    response = openai_client(gateway).responses.create(model="tiny", input=ASK)
    assert response.status == "completed" and response.usage is not None and response.usage.model_extra == ESTIMATED
    assert response.usage.input_tokens > 0 and response.usage.output_tokens > 0


def test_chat_stream_carries_usage_when_asked(gateway: GatewayProcess) -> None:
    """For comparison: chat streams carried the estimate before the other APIs did."""
    chunks = list(openai_client(gateway).chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": ASK}], stream=True,
        stream_options={"include_usage": True}))
    pieces = [c for c in chunks if c.choices and c.choices[0].delta.content]
    [usage] = [c.usage for c in chunks if c.usage is not None]
    assert usage.prompt_tokens > 0 and usage.completion_tokens == len(pieces) > 0
    assert usage.model_extra == ESTIMATED


def test_llama_cpp_sends_no_stream_usage(llama: str, gateway: GatewayProcess) -> None:
    """Why the estimate: asked for usage, the server streams none; the gateway says so once, and only
    for the endpoint not declared `stream_usage: false`."""
    body = {"model": "tiny-gguf", "messages": [{"role": "user", "content": ASK}], "stream": True,
            "stream_options": {"include_usage": True}}
    with httpx.stream("POST", f"{llama}/chat/completions", json=body, timeout=120) as r:
        lines = [line for line in r.iter_lines() if line.startswith("data: {")]
    assert r.status_code == 200 and lines and not any('"usage": {' in line or '"usage":{' in line for line in lines)
    for _ in range(2):
        chunks = list(openai_client(gateway).chat.completions.create(
            model="tiny-default", messages=[{"role": "user", "content": ASK}], stream=True,
            stream_options={"include_usage": True}))
        assert [c.usage.model_extra for c in chunks if c.usage is not None] == [ESTIMATED]
    warnings = [line for line in gateway.logs().splitlines() if "sent no usage" in line]
    assert len(warnings) == 1 and "tiny-default" in warnings[0]
