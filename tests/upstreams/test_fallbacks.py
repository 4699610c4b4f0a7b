"""End to end: Anthropic's server-side `fallbacks` entries (the anthropic SDK, extra_body) served by the
gateway. The model asked for fails (a 529 or 500 from the simulator, on an endpoint of its own); each
entry's model is then sent its own max_tokens (and thinking), passed through to an anthropic endpoint
or translated for the others, and ranked for the entry's own `speed`: `fast` prefers that model's fast
tier."""

from __future__ import annotations

from typing import Any

from gateway.simulator.testing import SimProcess
from gateway.upstreams.anthropic import FAST_BETA
from tests.harness import GatewayProcess
from tests.upstreams.conftest import claude, sent

HELLO = [{"role": "user", "content": "Say hello"}]
BETA = "server-side-fallback-2026-07-01"


def ask(gw: GatewayProcess, *fallbacks: dict[str, Any], stream: bool = False, **body: Any) -> tuple[Any, str]:
    """A Messages request for `af` (claude-fails, made to fail: an endpoint of its own, as this
    package's gateway and simulator are shared) with these fallbacks: (the message, the endpoint that
    served it)."""
    c = claude(gw)
    extra = {"fallbacks": list(fallbacks), **body.pop("extra_body", {})}
    options: dict[str, Any] = {"model": "af", "max_tokens": 4, "messages": HELLO, **body, "extra_body": extra,
                               "extra_headers": {"anthropic-beta": BETA}}
    if stream:
        with c.messages.with_streaming_response.create(**options, stream=True) as raw:
            events = list(raw.parse())
            return events, raw.headers["x-ultraroute-endpoint"]
    raw = c.messages.with_raw_response.create(**options)
    return raw.parse(), raw.headers["x-ultraroute-endpoint"]


def test_a_speed_fast_entry_goes_to_its_model_s_fast_tier_with_its_max_tokens(gw: GatewayProcess,
                                                                              sim: SimProcess) -> None:
    sim.patch("claude-fails", faults={"error_rate": 1.0, "error_status": 529})
    message, served = ask(gw, {"model": "c", "max_tokens": 6, "speed": "fast"})
    # Model c's fast tier, though the request asked no speed (c's standard tier is the chat host `open`).
    assert served == "claude-fast" and message.usage.output_tokens == 6
    body = sent(sim, "claude-fast", "/messages")
    assert body["max_tokens"] == 6 and body["speed"] == "fast" and "fallbacks" not in body
    assert sim.requests("claude-fast")[-1]["headers"]["anthropic-beta"] == f"{BETA},{FAST_BETA}"
    assert sent(sim, "claude-fails", "/messages")["max_tokens"] == 4  # the model asked for: as asked
    # Streamed, the same: the entry's request, passed through, the upstream's own events.
    events, served = ask(gw, {"model": "c", "max_tokens": 5, "speed": "fast"}, stream=True)
    assert served == "claude-fast" and sent(sim, "claude-fast", "/messages")["max_tokens"] == 5
    assert events[-2].type == "message_delta" and events[-2].usage.output_tokens == 5


def test_an_entry_without_speed_is_ranked_at_the_request_s_own(gw: GatewayProcess, sim: SimProcess) -> None:
    sim.patch("claude-fails", faults={"error_rate": 1.0, "error_status": 529})
    # No speed anywhere: model c at standard, the chat host; sent the entry's max_tokens, translated.
    message, served = ask(gw, {"model": "c", "max_tokens": 7, "thinking": None},
                          thinking={"type": "enabled", "budget_tokens": 20000})
    assert served == "open" and message.usage.output_tokens == 7
    assert sent(sim, "open", "/chat/completions")["max_tokens"] == 7
    # The request asks fast, its entry standard: c's fast tier is not used for that entry.
    message, served = ask(gw, {"model": "c", "max_tokens": 3, "speed": "standard"}, extra_body={"speed": "fast"})
    assert served == "open" and sent(sim, "open", "/chat/completions")["max_tokens"] == 3
    assert sim.stats("claude-fast")["requests"] == 0
    # ... and with no speed of its own, the request's: fast first.
    message, served = ask(gw, {"model": "c", "max_tokens": 3}, extra_body={"speed": "fast"})
    assert served == "claude-fast" and sent(sim, "claude-fast", "/messages")["max_tokens"] == 3


def test_an_entry_s_fields_reach_a_responses_endpoint_translated(gw: GatewayProcess, sim: SimProcess) -> None:
    sim.patch("claude-fails", faults={"error_rate": 1.0, "error_status": 500})
    message, served = ask(gw, {"model": "r", "max_tokens": 5})
    assert served == "gpt" and message.usage.output_tokens == 5
    body = sent(sim, "gpt", "/responses")
    assert body["max_output_tokens"] == 5 and "fallbacks" not in body
