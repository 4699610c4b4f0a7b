"""`Meter`: the timings and counts of one attempt at an upstream, as its stream is read (stream.py).

When the upstream sent no usage, `settle_usage` estimates it at the end (see stream.py's docstring).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class Meter:
    """Timings (perf_counter seconds) and counts of one attempt. Mutable; owned by one coroutine."""

    t_sent: float
    t_first: float | None = None
    t_first_answer: float | None = None
    t_last: float | None = None
    t_end: float | None = None
    token_chunks: int = 0
    usage: dict[str, Any] | None = None
    malformed: int = 0
    done: bool = False
    prompt_estimate: int = 0  # input tokens estimated from the request, for when no usage comes
    usage_estimated: bool = False
    served_tier: str | None = None  # the tier the provider reported, once the answer is done (pricing)
    tokens_per_chunk: float = 1.0  # the endpoint's, from answers with usage: for estimating output tokens

    def settle_usage(self) -> None:
        """At the end of a stream that produced something: when the upstream sent no usage, estimate it."""
        if self.usage is None and (self.t_first is not None or self.done):
            output = self.output_tokens
            self.usage = {"prompt_tokens": self.prompt_estimate, "completion_tokens": output,
                          "total_tokens": self.prompt_estimate + output, "estimated": True}
            self.usage_estimated = True

    @property
    def output_tokens(self) -> int:
        if self.usage and isinstance(self.usage.get("completion_tokens"), int):
            return int(self.usage["completion_tokens"])
        return round(self.token_chunks * self.tokens_per_chunk)

    @property
    def decode_tps(self) -> float | None:
        n = self.output_tokens
        if n < 2 or self.t_first is None or self.t_last is None or self.t_last <= self.t_first:
            return None
        return (n - 1) / (self.t_last - self.t_first)
