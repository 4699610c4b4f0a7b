"""End to end against a real OpenAI-compatible server that is not the project's simulator.

`llm-katan` (PyPI, Apache-2.0) with its echo backend: a FastAPI server that answers in OpenAI's wire
format with no model weights and no torch. `make install` puts it in `.venv/third-party` (pip
`--target`, not the venv itself: its wheel ships a top-level `tests` package that would shadow this
project's). It validates the provider key it is sent, streams in 4-character chunks and always sends
usage on its final chunk, whatever `stream_options` says.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.harness import ROOT, GatewayProcess, free_port, terminate, wait_ready

KATAN_DIR = ROOT / ".venv" / "third-party"
KATAN_KEY = "llm-katan-openai-key"  # the key its OpenAI provider expects by default
USER = [{"role": "user", "content": "hello from the gateway"}]


@pytest.fixture(scope="module")
def katan() -> Iterator[str]:
    if not (KATAN_DIR / "llm_katan").is_dir():
        pytest.fail(f"llm-katan is not installed in {KATAN_DIR}: run `make install`")
    port = free_port()
    workdir = Path(tempfile.mkdtemp(prefix="ultraroute-katan-"))
    log = workdir / "katan.log"
    args = [sys.executable, "-m", "llm_katan.cli", "--model", "katan-echo", "--backend", "echo",
            "--providers", "openai", "--host", "127.0.0.1", "--port", str(port),
            "--stats-file", str(workdir / "stats.json"), "--disable-dashboard", "--log-level", "WARNING"]
    env = {**os.environ, "PYTHONPATH": str(KATAN_DIR)}
    with log.open("ab") as out:
        proc = subprocess.Popen(args, env=env, cwd=workdir, stdout=out, stderr=out)
    try:
        wait_ready(proc, f"http://127.0.0.1:{port}/health", 30, "llm-katan", lambda: log.read_text()[-2000:])
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        terminate(proc)


@pytest.fixture(scope="module")
def gateway(katan: str) -> Iterator[GatewayProcess]:
    catalogue = {"providers": {"katan": {"base_url": katan, "api_key_env": "KATAN_KEY"}},
                 "models": {"echo": {"endpoints": [{"provider": "katan", "model": "katan-echo",
                                                    "price": {"input": 1.0, "output": 2.0}}]}}}
    with GatewayProcess(catalogue, env={"KATAN_KEY": KATAN_KEY}) as gw:
        yield gw


def test_proxies_json_and_streams_with_usage(gateway: GatewayProcess) -> None:
    client = openai.OpenAI(base_url=gateway.base_url, api_key="unused", max_retries=0)
    completion = client.chat.completions.create(model="echo", messages=USER)
    text = completion.choices[0].message.content or ""
    assert "hello from the gateway" in text and completion.model == "echo"  # echoed, through the gateway
    assert completion.usage is not None and completion.usage.completion_tokens > 0
    assert completion.usage.prompt_tokens > 0 and completion.usage.model_extra == {}  # its own, not estimated

    chunks = list(client.chat.completions.create(model="echo", messages=USER, stream=True,
                                                 stream_options={"include_usage": True}))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "hello from the gateway" in streamed and len(chunks) > 5  # relayed chunk by chunk
    usages = [c.usage for c in chunks if c.usage is not None]
    assert len(usages) == 1 and usages[0].completion_tokens > 0

    plain = list(client.chat.completions.create(model="echo", messages=USER, stream=True))
    assert all(c.usage is None for c in plain)  # not asked for: taken out of its final chunk

    r = httpx.post(f"{gateway.base_url}/chat/completions", json={"model": "echo", "messages": USER})
    assert r.headers["x-ultraroute-provider"] == "katan" and KATAN_KEY not in r.text
