"""End to end: a Responses stream that breaks mid-way, with nowhere to continue it, ends with an
`error` event and then `response.failed` (the README's promise), as the official `openai` SDK reads it.

The only endpoint drops its streams after 3 tokens (the simulator's `drop` fault) and takes no
assistant prefix, so the gateway cannot continue the answer elsewhere.
"""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from gateway.simulator.testing import SimProcess, make_sim_config
from tests.harness import GatewayProcess, catalogue_for

BREAKS = {"ttft_ms": 5, "ttft_jitter": 0, "tokens_per_second": 2000, "output_tokens": 12,
          "faults": {"drop_rate": 1.0, "drop_after_tokens": 3}}


@pytest.fixture(scope="module")
def gateway() -> Iterator[GatewayProcess]:
    with SimProcess(make_sim_config({"brk": BREAKS})) as sim, \
            GatewayProcess(catalogue_for(sim, {"m": [{"sim": "brk"}]}, gateway={"breaker_failures": 1000})) as gw:
        yield gw


def test_a_stream_broken_mid_way_ends_with_error_then_response_failed(gateway: GatewayProcess) -> None:
    client = openai.OpenAI(base_url=gateway.base_url, api_key="unused", max_retries=0)
    events = list(client.responses.create(model="m", input="Tell me a story", stream=True))
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-2:] == ["error", "response.failed"], kinds
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    assert 1 <= len(deltas) <= 3  # what came before the break was relayed
    error, failed = events[-2], events[-1]
    assert error.message and error.code  # type: ignore[union-attr]
    assert failed.response.status == "failed" and failed.response.error is not None  # type: ignore[union-attr]
    assert failed.response.error.message  # type: ignore[union-attr]
    assert [e.sequence_number for e in events] == list(range(len(events)))
