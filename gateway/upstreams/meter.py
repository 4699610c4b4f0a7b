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
    first_chunks: int = 1  # of which came in the first read that carried any (decode_tps)
    usage: dict[str, Any] | None = None
    malformed: int = 0
    done: bool = False
    prompt_estimate: int = 0  # input tokens estimated from the request, for when no usage comes
    usage_estimated: bool = False
    served_tier: str | None = None  # the tier the provider reported, once the answer is done (pricing)
    busy_at_sent: float | None = None  # the endpoint's in-flight integral when it was sent (store.busy_s)
    tokens_per_chunk: float = 1.0  # the endpoint's, from answers with usage: for estimating output tokens
    lag_at_sent: float = 0.0  # the event loop's lag so far when it was sent (serve/lag.py `LoopLag.total`)
    lag_at_first: float | None = None  # ... and when its first token was read

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

    def chunks_per_s(self) -> float | None:
        """Token chunks per second after the first read. The chunks of one read all arrived at its
        time, whenever they were made: when the first read brings several -- a gateway too busy to
        read the stream when it began, or an upstream that sends tokens in batches -- counting them
        over the span from it to the last read put a decode rate at 5x the truth (820 tok/s from a 150
        tok/s endpoint, two busy cores), and the router piled onto an endpoint that looked that fast.
        With one chunk per read, it is (chunks - 1) / span, as the decode rate is defined."""
        t_first, t_last = self.t_first, self.t_last
        if t_first is None or t_last is None or t_last <= t_first:
            return None
        return (self.token_chunks - self.first_chunks) / (t_last - t_first)

    @property
    def decode_tps(self) -> float | None:
        """Output tokens per second after the first token (after the first read: `chunks_per_s`)."""
        n = self.output_tokens
        rate = self.chunks_per_s()
        if n < 2 or rate is None:
            return None
        return rate * n / self.token_chunks
