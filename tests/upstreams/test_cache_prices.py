"""End to end: Anthropic's prompt-cache tokens are charged at the catalogue's cache prices -- writes
(`cache_creation_input_tokens`) at `price.cache_write` or, for one-hour writes, `cache_write_1h`;
reads (`cache_read_input_tokens`) at `cached_input` -- in the access log's cost and so in spend; and
both counted apart in the endpoint's telemetry (`/v1/endpoints` tokens)."""

from __future__ import annotations

import time
import uuid

import httpx
import pytest

from tests.harness import GatewayProcess
from tests.upstreams.conftest import access_lines, claude

PRICE = {"input": 1.0, "cached_input": 0.1, "cache_write": 1.25, "cache_write_1h": 2.0, "output": 5.0}


def cache_tokens(gw: GatewayProcess) -> tuple[int, int]:
    """The cache endpoint's (cache reads, cache writes) in `/v1/endpoints`."""
    view = httpx.get(f"{gw.url}/v1/endpoints").json()["data"]
    tokens = next(e["stats"]["tokens"] for e in view if e["id"] == "claude-cache")
    return tokens["cached_input"], tokens["cache_write_input"]


def ask(gw: GatewayProcess, system: list[dict]) -> tuple[object, dict]:  # type: ignore[type-arg]
    request_id = f"cache-{uuid.uuid4().hex[:12]}"
    message = claude(gw).messages.create(model="w", max_tokens=4, system=system,  # type: ignore[arg-type]
                                         messages=[{"role": "user", "content": "Say hello"}],
                                         extra_headers={"x-request-id": request_id})
    return message.usage, access_lines(gw, {request_id})[request_id]


@pytest.mark.parametrize(("ttl", "write_price"), [(None, PRICE["cache_write"]), ("1h", PRICE["cache_write_1h"])])
def test_cache_writes_then_reads_are_charged_at_their_prices(gw: GatewayProcess, ttl: str | None,
                                                             write_price: float) -> None:
    reads_before, writes_before = cache_tokens(gw)
    control = {"type": "ephemeral", **({"ttl": ttl} if ttl else {})}
    system = [{"type": "text", "text": f"{uuid.uuid4().hex} context " * 40, "cache_control": control}]
    usage, line = ask(gw, system)
    written = usage.cache_creation_input_tokens  # type: ignore[attr-defined]
    assert written and not usage.cache_read_input_tokens  # type: ignore[attr-defined]
    expected = (usage.input_tokens * PRICE["input"] + written * write_price  # type: ignore[attr-defined]
                + usage.output_tokens * PRICE["output"]) / 1e6  # type: ignore[attr-defined]
    assert line["cost_usd"] == pytest.approx(expected, abs=1e-8)
    assert line["tokens"]["input"] == usage.input_tokens + written  # type: ignore[attr-defined]
    usage, line = ask(gw, system)
    read = usage.cache_read_input_tokens  # type: ignore[attr-defined]
    assert read and line["tokens"]["cached_input"] == read
    expected = (usage.input_tokens * PRICE["input"] + read * PRICE["cached_input"]  # type: ignore[attr-defined]
                + usage.output_tokens * PRICE["output"]) / 1e6  # type: ignore[attr-defined]
    assert line["cost_usd"] == pytest.approx(expected, abs=1e-8)
    # Telemetry counts the writes and the reads apart (the access log's tokens.input holds both).
    deadline = time.monotonic() + 5
    while cache_tokens(gw) != (reads_before + read, writes_before + written) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert cache_tokens(gw) == (reads_before + read, writes_before + written)
