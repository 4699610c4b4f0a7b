"""What a target costs, and the cost per 1M output tokens at a measured throughput: pure arithmetic.

Does: hold a target's pricing (USD per 1M input/output tokens, or USD per hour of rented
capacity) and compute
- cost per 1M output tokens: the output price for per-token pricing (it does not depend on load);
  for hourly pricing `hourly_cost / (aggregate output tok/s * 3600) * 1e6`, so an idle machine is
  expensive per token and a busy one cheap;
- the blended cost per 1M output tokens, which also charges the prompt tokens the level sent
  (per-token pricing only; for hourly pricing the hour already pays for input).
Does not: measure anything, read files or know the catalogue (see `catalogue.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

PER_TOKEN = "per_token"
HOURLY = "hourly"


@dataclass(frozen=True, slots=True)
class Pricing:
    """Exactly one kind: `input` and `output` (USD per 1M tokens) or `hourly_cost` (USD/hour)."""

    input: float | None = None
    output: float | None = None
    hourly_cost: float | None = None
    source: str = ""  # where it came from, e.g. "--price", "providers.yaml: fireworks/standard"

    def __post_init__(self) -> None:
        per_token = self.input is not None and self.output is not None
        if per_token == (self.hourly_cost is not None) or (self.input is None) != (self.output is None):
            raise ValueError("pricing needs either input and output prices, or an hourly cost")
        for value in (self.input, self.output, self.hourly_cost):
            if value is not None and value < 0:
                raise ValueError("prices must be >= 0")

    @property
    def kind(self) -> str:
        return HOURLY if self.hourly_cost is not None else PER_TOKEN

    def describe(self) -> str:
        if self.hourly_cost is not None:
            return f"${self.hourly_cost:g}/h"
        return f"${self.input:g}/${self.output:g} per 1M in/out"


def cost_per_1m_output(pricing: Pricing | None, aggregate_tps: float) -> float | None:
    """USD per 1M output tokens; None without pricing, or for hourly pricing when nothing was
    produced (the cost per token is then unbounded, not a number worth printing)."""
    if pricing is None:
        return None
    if pricing.hourly_cost is None:
        return pricing.output
    if aggregate_tps <= 0:
        return None
    return pricing.hourly_cost / (aggregate_tps * 3600.0) * 1e6


def blended_cost_per_1m_output(
    pricing: Pricing | None, prompt_tokens: int, output_tokens: int, aggregate_tps: float
) -> float | None:
    """USD per 1M output tokens counting the prompts too: what the level's requests cost in all,
    per output token. Equals `cost_per_1m_output` for hourly pricing."""
    if pricing is None:
        return None
    if pricing.hourly_cost is not None:
        return cost_per_1m_output(pricing, aggregate_tps)
    if output_tokens <= 0:
        return None
    assert pricing.input is not None and pricing.output is not None
    total_usd = (prompt_tokens * pricing.input + output_tokens * pricing.output) / 1e6
    return total_usd / output_tokens * 1e6
