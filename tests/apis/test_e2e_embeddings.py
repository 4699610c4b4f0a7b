"""End to end: an embeddings answer must arrive whole within the first-token budget (README, "Client
APIs"): embeddings are not streamed, so the budget bounds the whole answer. An endpoint that would
answer, but later than its budget, is abandoned at the budget and the next one serves.
"""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from gateway.simulator.testing import SimProcess, make_sim_config
from tests.harness import GatewayProcess, catalogue_for

QUICK = {"ttft_ms": 5, "ttft_jitter": 0}
LATE = {"ttft_ms": 4000, "ttft_jitter": 0}  # answers, but 4 s in: past its 1 s budget


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    with SimProcess(make_sim_config({"late": LATE, "quick": QUICK})) as sim:
        yield sim


@pytest.fixture(scope="module")
def gateway(sim: SimProcess) -> Iterator[GatewayProcess]:
    rows = [{"sim": "late", "apis": ["embeddings"], "first_token_budget_s": 1},
            {"sim": "quick", "apis": ["embeddings"]}]
    catalogue = catalogue_for(sim, {"e": rows}, gateway={"explore_rate": 0.0})
    catalogue["models"]["e"]["endpoints"][0]["price"] = {"input": 0.1, "output": 0.0}  # the cheaper: tried first
    with GatewayProcess(catalogue) as gw:
        yield gw


def test_an_answer_later_than_the_budget_is_abandoned_and_the_next_endpoint_serves(
        gateway: GatewayProcess, sim: SimProcess) -> None:
    client = openai.OpenAI(base_url=gateway.base_url, api_key="unused", max_retries=0)
    raw = client.embeddings.with_raw_response.create(model="e", input=["one", "two"])
    assert [len(v.embedding) > 0 for v in raw.parse().data] == [True, True]
    assert raw.headers["x-ultraroute-endpoint"] == "quick"
    assert raw.headers["x-ultraroute-fallback"] == "late->quick (timeout)", raw.headers
    late = sim.stats("late")["attempts"][-1]
    assert late["cancelled"], late  # abandoned by the gateway, not answered
    # ...at its budget (1 s, plus a busy machine's scheduling), not after the answer's 4 s.
    assert 0.95 <= late["duration_ms"] / 1000 < 3.5, late
