"""The real coding agents, run through a real gateway in front of a scripted simulator.

The Makefile (`make install`, `make test`) installs the pinned `@openai/codex` and
`@anthropic-ai/claude-code` npm packages once into `.venv/third-party/agents`. The simulator's one
endpoint plays a scripted model (gateway/simulator/script.py): it calls the shell tool the agent offers
with `COMMAND`, then answers `ANSWER` once the tool's result comes back. So an agent completes its
loop only if the gateway carried both of its requests to the upstream and both answers back.

Each CLI runs with HOME (and CODEX_HOME) in a fresh temporary directory and a minimal environment,
so neither the developer's own agent config nor their keys take part.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.simulator.testing import SimProcess, make_sim_config
from tests.harness import ROOT, GatewayProcess, catalogue_for

AGENTS_BIN = ROOT / ".venv" / "third-party" / "agents" / "node_modules" / ".bin"
MODEL = "agent-model"
COMMAND = "echo agent-ok > result.txt"
ANSWER = "DONE: agent-ok"
PROMPT = f"Run `{COMMAND}` in the shell, then reply {ANSWER}"
RUN_TIMEOUT_S = 180  # a run takes a few seconds; the bound only stops a hung CLI from hanging the suite


class KeyedGateway(GatewayProcess):
    key: str  # a client key: the agents authenticate as real clients do


def agent_cli(name: str) -> Path:
    path = AGENTS_BIN / name
    if not path.exists():
        pytest.fail(f"{name} is not installed in {AGENTS_BIN}: run `make install`")
    return path


def base_env(home: Path) -> dict[str, str]:
    """A clean environment: node on PATH (codex's launcher is a node script), HOME in the test's directory."""
    node = shutil.which("node")
    assert node, "node is not installed (the Makefile installs it with the agents)"
    return {"PATH": f"{Path(node).parent}:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8"}


def run_agent(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S)


def report(done: subprocess.CompletedProcess[str], gateway: GatewayProcess) -> str:
    """What to show when a run fails: the agent's own output and the gateway's log."""
    return (f"exit {done.returncode}\n--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-5000:]}\n"
            f"--- gateway log\n{gateway.logs()[-5000:]}")


def chat_requests(sim: SimProcess) -> list[dict[str, Any]]:
    return [r["body"] for r in sim.requests("agent") if r["path"] == "/chat/completions"]


def assert_tool_loop(sim: SimProcess, tool: str) -> None:
    """The upstream saw the loop: a request offering `tool`, then one carrying that tool's result."""
    bodies = chat_requests(sim)
    offered = [b for b in bodies if tool in {t["function"]["name"] for t in b.get("tools") or ()}]
    assert offered, f"no chat request offered {tool}: {[sorted(b) for b in bodies]}"
    assert any(answers_call(b["messages"], tool) for b in bodies), f"no request carried a {tool} call and its result"


def answers_call(messages: list[dict[str, Any]], tool: str) -> bool:
    """The history holds the assistant's call of `tool` and, after it, the tool message answering it: a
    conversation a chat upstream accepts (over the WebSocket, Codex sends only the result and the
    gateway must put the call back from the connection's memory)."""
    calls = set()
    for m in messages:
        if m.get("role") == "assistant":
            calls |= {c["id"] for c in m.get("tool_calls") or () if c["function"]["name"] == tool}
        elif m.get("role") == "tool" and m.get("tool_call_id") in calls:
            return True
    return False


@pytest.fixture(scope="session")
def agent_sim() -> Iterator[SimProcess]:
    profile = {"ttft_ms": 20, "ttft_jitter": 0.0, "tokens_per_second": 5000,
               "script": {"command": COMMAND, "answer": ANSWER}}
    with SimProcess(make_sim_config({"agent": profile})) as sim:
        yield sim


@pytest.fixture(scope="session")
def agent_gateway(agent_sim: SimProcess) -> Iterator[KeyedGateway]:
    catalogue = catalogue_for(agent_sim, {MODEL: [{"sim": "agent", "tier": "fast"}]},
                              gateway={"breaker_failures": 1000, "explore_rate": 0.0})
    gw = KeyedGateway(catalogue, open_access=False)
    gw.key = gw.create_key()
    with gw:
        yield gw


@pytest.fixture(scope="session")
def fast_anthropic_gateway(agent_sim: SimProcess) -> Iterator[KeyedGateway]:
    """The same scripted model, spoken to in Anthropic Messages (`api: anthropic`) at its fast tier
    (`service_tier: fast`): a Messages client such as Claude Code is passed through."""
    fast = {"sim": "agent", "api": "anthropic", "tier": "fast", "service_tier": "fast", "id": "agent-fast",
            "price": {"input": 30.0, "output": 150.0}}
    catalogue = catalogue_for(agent_sim, {MODEL: [fast]}, gateway={"breaker_failures": 1000, "explore_rate": 0.0})
    gw = KeyedGateway(catalogue, open_access=False)
    gw.key = gw.create_key()
    with gw:
        yield gw


def messages_requests(sim: SimProcess) -> list[dict[str, Any]]:
    """The Anthropic Messages requests the simulator received (`{"path", "body", "headers"}`)."""
    return [r for r in sim.requests("agent") if r["path"] == "/messages"]


@pytest.fixture
def sim(agent_sim: SimProcess) -> SimProcess:
    """The simulator with no requests recorded yet: what it holds after the test is this test's."""
    agent_sim.reset()
    return agent_sim
