"""End to end: the real Codex CLI (`codex exec`, pinned in the Makefile) through the gateway, over HTTP
and over the Responses WebSocket transport, completing a shell tool loop against the scripted simulator.

Its provider block is the README's ("Coding agents"), plus what keeps a test run quiet and bounded: no
analytics, no update check, no retries (a refused request fails the run at once instead of backing off).
"""

from __future__ import annotations

import subprocess
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

CONFIG = """\
model = "{model}"
model_provider = "ultraroute"
check_for_update_on_startup = false

[analytics]
enabled = false

[model_providers.ultraroute]
name = "Ultraroute"
base_url = "{base_url}"
wire_api = "responses"
env_key = "ULTRAROUTE_API_KEY"
supports_websockets = {websockets}
http_headers = {{ "x-ultraroute-policy" = "coding-agent" }}
request_max_retries = 0
stream_max_retries = 0
"""
FELL_BACK = "Falling back from WebSockets"
OVER_WEBSOCKET = '"transport":"websocket"'  # in the access log line of a response served on a WebSocket


def run_codex(gw: KeyedGateway, tmp_path: Path, websockets: bool) -> tuple[subprocess.CompletedProcess[str], Path]:
    home, codex_home, work = tmp_path / "home", tmp_path / "codex", tmp_path / "work"
    for d in (home, codex_home, work):
        d.mkdir()
    (codex_home / "config.toml").write_text(CONFIG.format(model=MODEL, base_url=gw.base_url,
                                                          websockets=str(websockets).lower()))
    env = {**base_env(home), "CODEX_HOME": str(codex_home), "ULTRAROUTE_API_KEY": gw.key}
    # The sandbox is off: Linux sandboxing needs kernel features a test container may not have, and the
    # test is about the gateway, not about Codex's sandbox.
    args = [str(agent_cli("codex")), "exec", "--skip-git-repo-check", "--sandbox", "danger-full-access", PROMPT]
    return run_agent(args, work, env), work


def test_codex_over_http_completes_a_tool_loop(agent_gateway: KeyedGateway, sim: SimProcess, tmp_path: Path) -> None:
    done, work = run_codex(agent_gateway, tmp_path, websockets=False)
    assert done.returncode == 0, report(done, agent_gateway)
    assert (work / "result.txt").read_text() == "agent-ok\n", report(done, agent_gateway)  # the tool ran
    assert ANSWER in done.stdout, report(done, agent_gateway)  # `codex exec` prints the last message on stdout
    assert_tool_loop(sim, "exec_command")


def test_codex_over_websocket_completes_a_tool_loop(agent_gateway: KeyedGateway, sim: SimProcess,
                                                    tmp_path: Path) -> None:
    served_before = agent_gateway.logs().count(OVER_WEBSOCKET)
    done, work = run_codex(agent_gateway, tmp_path, websockets=True)
    assert done.returncode == 0, report(done, agent_gateway)
    assert FELL_BACK not in done.stdout + done.stderr, report(done, agent_gateway)  # it stayed on the socket
    # And the gateway says so: the tool call's response (logged before Codex sent the result) went out on it.
    assert agent_gateway.logs().count(OVER_WEBSOCKET) > served_before, report(done, agent_gateway)
    assert (work / "result.txt").read_text() == "agent-ok\n", report(done, agent_gateway)
    assert ANSWER in done.stdout, report(done, agent_gateway)
    assert_tool_loop(sim, "exec_command")
