"""One simulator and one gateway process (with client keys) shared by the client-API tests.

Model `m` (chat and legacy completions) and model `e` (embeddings) each have a fast-tier endpoint
(simulator `fast`) and a standard one (`std`). `failing_fast` makes the fast tier answer 503 for
one test, to show each API falling back. The circuit never opens (breaker_failures is high), so
tests do not depend on each other's faults; nothing explores, so `speed: fast` always tries `fast` first.
Model `q` has one endpoint, `quiet`, that reasons (capability `reasoning`) and, as llama.cpp's server,
ignores `stream_options.include_usage` (`stream_usage: false`): its usage is the gateway's estimate.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from gateway.simulator.testing import SimProcess, make_sim_config
from tests.harness import GatewayProcess, catalogue_for

PROFILE = {"ttft_ms": 20, "ttft_jitter": 0, "tokens_per_second": 2000, "output_tokens": 12}
FAST = {"speed": "fast"}  # the body field every API accepts (extra_body in the SDKs)
# "fast" served the session's earlier tests, so its 503 may be taken as sporadic and tried there once
# more (retry.py) before the request falls back to "std": whether it is depends on which tests ran.
FELL_BACK_FROM_FAST = re.compile(r"fast->(fast->)?std \(")


@pytest.fixture(scope="session")
def api_sim() -> Iterator[SimProcess]:
    # The fast tier decodes far faster, so the router never spills it as "slower" than standard.
    profiles = {"fast": {**PROFILE, "tokens_per_second": 3000}, "std": {**PROFILE, "tokens_per_second": 300},
                "quiet": {**PROFILE, "faults": {"ignore_include_usage": True}}}
    with SimProcess(make_sim_config(profiles)) as sim:
        yield sim


class KeyedGateway(GatewayProcess):
    key: str  # unlimited

    def spent_key(self) -> str:
        """A new key allowed one request a minute, its request just made: refused for the next minute.
        New for each test that needs one: a key spent when the session's gateway started is allowed again
        a minute later, and this gateway's tests can be minutes apart (other files run in between)."""
        limited = self.create_key("--rpm", "1")
        spent = httpx.post(f"{self.base_url}/chat/completions", headers={"authorization": f"Bearer {limited}"},
                           json={"model": "m", "messages": [{"role": "user", "content": "hi"}]}, timeout=30)
        assert spent.status_code == 200, spent.text
        return limited


@pytest.fixture(scope="session")
def api_gateway(api_sim: SimProcess) -> Iterator[KeyedGateway]:
    text = ["chat", "completions"]
    catalogue = catalogue_for(api_sim, {
        "m": [{"sim": "fast", "tier": "fast", "apis": text}, {"sim": "std", "tier": "standard", "apis": text}],
        "e": [{"sim": "fast", "tier": "fast", "apis": ["embeddings"]},
              {"sim": "std", "tier": "standard", "apis": ["embeddings"]}],
        "q": [{"sim": "quiet", "stream_usage": False, "capabilities": ["reasoning"]}],
    }, gateway={"breaker_failures": 1000, "explore_rate": 0.0})
    gw = KeyedGateway(catalogue, open_access=False)
    gw.key = gw.create_key()
    with gw:
        yield gw


@pytest.fixture
def failing_fast(api_sim: SimProcess) -> Iterator[None]:
    api_sim.patch("fast", faults={"error_rate": 1.0, "error_status": 503})
    try:
        yield
    finally:
        api_sim.patch("fast", faults={"error_rate": 0.0})


def last_request(sim: SimProcess, endpoint: str, path: str) -> dict:  # type: ignore[type-arg]
    """The body of the last request `endpoint` of the simulator received at `path`."""
    bodies = [r["body"] for r in sim.requests(endpoint) if r["path"] == path]
    assert bodies, f"{endpoint} received no {path} request"
    return bodies[-1]  # type: ignore[no-any-return]


def access_line(gw: GatewayProcess, request_id: str) -> dict[str, Any]:
    """The access-log line of a request: written off the request's path, so waited for (20 s at most)."""
    deadline = time.monotonic() + 20
    while True:
        for line in gw.logs().splitlines():
            if line.startswith('{"ts"') and f'"request_id":"{request_id}"' in line:
                return json.loads(line)  # type: ignore[no-any-return]
        assert time.monotonic() < deadline, f"no access-log line for {request_id}"
        time.sleep(0.05)
