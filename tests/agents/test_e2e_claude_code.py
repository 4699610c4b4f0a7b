"""End to end: the real Claude Code CLI (`claude -p`, pinned in the Makefile) through the gateway's
Messages API, completing a Bash tool loop against the scripted simulator.

Its environment is the README's ("Coding agents"): the gateway as ANTHROPIC_BASE_URL, a gateway client
key as ANTHROPIC_AUTH_TOKEN (sent as a bearer token), the catalogue's model for every role, and no
non-essential traffic (telemetry, update checks, error reports: they go to Anthropic, not the gateway).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from gateway.simulator.testing import SimProcess
from gateway.upstreams.anthropic import FAST_BETA
from tests.agents.conftest import (
    ANSWER,
    MODEL,
    PROMPT,
    KeyedGateway,
    agent_cli,
    assert_tool_loop,
    base_env,
    chat_requests,
    messages_requests,
    report,
    run_agent,
)

# Above the suite's 120 s: the CLI's own bound (RUN_TIMEOUT_S), plus starting the gateway on a busy machine.
pytestmark = pytest.mark.timeout(300)


def claude_env(gw: KeyedGateway, home: Path) -> dict[str, str]:
    return {**base_env(home), "ANTHROPIC_BASE_URL": gw.url, "ANTHROPIC_AUTH_TOKEN": gw.key,
            "ANTHROPIC_MODEL": MODEL, "ANTHROPIC_DEFAULT_OPUS_MODEL": MODEL,
            "ANTHROPIC_DEFAULT_SONNET_MODEL": MODEL, "ANTHROPIC_DEFAULT_HAIKU_MODEL": MODEL,
            "CLAUDE_CODE_SUBAGENT_MODEL": MODEL, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "ANTHROPIC_CUSTOM_HEADERS": "x-ultraroute-policy: coding-agent",
            "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1", "DISABLE_ERROR_REPORTING": "1"}


def run_claude(gw: KeyedGateway, tmp_path: Path) -> None:
    """`claude -p PROMPT` through `gw`, which must finish its tool loop: the tool ran, the answer printed."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    # `--allowedTools Bash`: print mode cannot ask before running a command, so Bash is allowed up front.
    args = [str(agent_cli("claude")), "-p", PROMPT, "--allowedTools", "Bash"]
    done = run_agent(args, work, claude_env(gw, home))
    assert done.returncode == 0, report(done, gw)
    assert (work / "result.txt").read_text() == "agent-ok\n", report(done, gw)  # the tool ran
    assert ANSWER in done.stdout, report(done, gw)  # `claude -p` prints the final answer


def test_claude_code_completes_a_tool_loop(agent_gateway: KeyedGateway, sim: SimProcess, tmp_path: Path) -> None:
    run_claude(agent_gateway, tmp_path)
    assert_tool_loop(sim, "Bash")



def served_lines(gw: KeyedGateway, endpoint: str) -> list[dict[str, Any]]:
    """The gateway's access-log lines for answers `endpoint` served."""
    lines = [json.loads(line) for line in gw.logs().splitlines() if line.startswith('{"ts"')]
    return [line for line in lines if line.get("endpoint") == endpoint]


def test_claude_code_on_an_anthropic_endpoint_in_fast_mode(fast_anthropic_gateway: KeyedGateway, sim: SimProcess,
                                                           tmp_path: Path) -> None:
    """Issue 30: Claude Code through the gateway to an `api: anthropic` endpoint with `service_tier: fast`.
    Its requests are passed through as it sent them (nothing dropped), asked `speed: "fast"` with the
    fast-mode beta merged into Claude Code's own betas, and the tier that served is logged."""
    gw = fast_anthropic_gateway
    run_claude(gw, tmp_path)

    sent = messages_requests(sim)
    assert sent and not chat_requests(sim), "Claude Code's requests went out in Messages, not translated"
    for request in sent:
        body, betas = request["body"], request["headers"]["anthropic-beta"].split(",")
        assert body["speed"] == "fast" and body["model"] == f"upstream-{MODEL}"
        # Claude Code's own betas, then fast mode's once: merged, never replaced.
        assert betas[0] == "claude-code-20250219" and betas.count(FAST_BETA) == 1 and betas[-1] == FAST_BETA
        # As Claude Code sent it: what a translation to chat would drop is all there.
        assert {"thinking", "context_management", "metadata", "output_config"} <= body.keys()
        assert any(m["role"] == "system" for m in body["messages"])  # its system turn, in place
        assert b"cache_control" in json.dumps(body).encode()
        assert all("input_schema" in t for t in body["tools"] if t["name"] == "Bash")  # Anthropic's own tools
    # The loop, in Anthropic's blocks: a Bash tool_use, then its tool_result in the next request.
    calls = {block["id"] for r in sent for m in r["body"]["messages"] if m["role"] == "assistant"
             and isinstance(m["content"], list) for block in m["content"]
             if block["type"] == "tool_use" and block["name"] == "Bash"}
    results = {block["tool_use_id"] for r in sent for m in r["body"]["messages"] if m["role"] == "user"
               and isinstance(m["content"], list) for block in m["content"] if block["type"] == "tool_result"}
    assert calls and calls <= results, (calls, results)

    deadline = time.monotonic() + 20  # the access log is written in batches, from a thread
    while len(lines := served_lines(gw, "agent-fast")) < len(sent):
        assert time.monotonic() < deadline, gw.logs()[-3000:]
        time.sleep(0.05)
    assert all(line["served_tier"] == "fast" and line["tier"] == "fast" and line["dropped"] == []
               and line["api"] == "messages" for line in lines), lines
