"""End to end: the real Claude Code CLI (`claude -p`, pinned in the Makefile) through the gateway's
Messages API, completing a Bash tool loop against the scripted simulator.

Its environment is the README's ("Coding agents"): the gateway as ANTHROPIC_BASE_URL, a gateway client
key as ANTHROPIC_AUTH_TOKEN (sent as a bearer token), the catalogue's model for every role, and no
non-essential traffic (telemetry, update checks, error reports: they go to Anthropic, not the gateway).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.simulator.testing import SimProcess
from tests.agents.conftest import (
    ANSWER,
    MODEL,
    PROMPT,
    KeyedGateway,
    agent_cli,
    assert_tool_loop,
    base_env,
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


def test_claude_code_completes_a_tool_loop(agent_gateway: KeyedGateway, sim: SimProcess, tmp_path: Path) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    # `--allowedTools Bash`: print mode cannot ask before running a command, so Bash is allowed up front.
    args = [str(agent_cli("claude")), "-p", PROMPT, "--allowedTools", "Bash"]
    done = run_agent(args, work, claude_env(agent_gateway, home))
    assert done.returncode == 0, report(done, agent_gateway)
    assert (work / "result.txt").read_text() == "agent-ok\n", report(done, agent_gateway)  # the tool ran
    assert ANSWER in done.stdout, report(done, agent_gateway)  # `claude -p` prints the final answer
    assert_tool_loop(sim, "Bash")
