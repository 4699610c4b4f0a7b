"""What one upstream attempt measured: the unit every telemetry store records.

The dispatcher builds one `AttemptSample` per upstream attempt, finished or failed, and hands it
to the store's `record()`. Nothing here does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

# A time measured while the gateway's own event loop lagged this share of it or more says more about
# the gateway than the endpoint (`stalled`). A stalled loop reads a stream late and then all at once:
# one stream at 600 tok/s read through a 300 ms stall measured 170, and one read just after it 1,700
# -- and a fast tier was passed over on that one sample (fault run). Such a decode rate still counts
# in the speed fit but is no surprise either way (routing/speed.py); such a TTFT is kept out of the
# TTFT and prefill fits (`fitted_ttft_s`), where one late first token would bend the line.
STALLED_SHARE = 0.25


def stalled(loop_lag_s: float, span_s: float) -> bool:
    """Whether a time `span_s` measured with `loop_lag_s` of the gateway's own loop lag meanwhile is
    the stall's more than the endpoint's (STALLED_SHARE)."""
    return loop_lag_s > 0.0 and loop_lag_s >= STALLED_SHARE * span_s


class Outcome(StrEnum):
    """How an attempt ended. Also used as a bounded metric label."""

    OK = "ok"
    RATE_LIMITED = "rate_limited"  # 429
    SERVER_ERROR = "server_error"  # 5xx, or an error event inside a 200 stream
    CLIENT_ERROR = "client_error"  # 4xx other than 429: the request's fault, not the endpoint's
    TIMEOUT = "timeout"  # first-token budget, stall or deadline
    CONNECT_ERROR = "connect_error"
    CANCELLED = "cancelled"  # the client went away


@dataclass(frozen=True, slots=True)
class AttemptSample:
    """One upstream attempt. Times are seconds; `None` where the attempt never got that far."""

    endpoint_key: str  # "<model>/<endpoint id>", unique across the catalogue
    started_at: float  # wall clock (time.time()) when the request was sent
    outcome: Outcome
    status: int | None  # upstream HTTP status, if one arrived
    ttft_s: float | None  # request sent -> first token of any kind (reasoning included)
    ttfat_s: float | None  # request sent -> first answer (non-reasoning) token
    decode_tps: float | None  # output tokens after the first / time after the first token
    e2e_s: float  # request sent -> last byte (or failure)
    input_tokens: int = 0
    cached_input_tokens: int = 0  # prompt-cache reads among the input tokens
    cache_write_input_tokens: int = 0  # prompt-cache writes among them (Anthropic's cache_creation_input_tokens)
    output_tokens: int = 0
    reasoning_tokens: int = 0
    cost_usd: float = 0.0
    in_flight_at_start: int = 0
    # Others in flight when it ended; None where unknown. With the count at start it gives the load
    # the attempt ran under (`load`): requests that all start at once each see few at start, many after.
    in_flight_at_end: int | None = None
    # Others in flight on average while it ran (the store's in-flight integral over the attempt), where
    # known: what `load` is then. Twelve that start within 30 ms and run together each ran beside 11,
    # where the counts at start and end said ~5 on average: the curve fitted to such samples lost its
    # slope, and the router sent a steep tier 12 at once, again and again.
    in_flight_mean: float | None = None
    # The session's last turn was served here too: its cached tokens measure the endpoint's cache hit
    # ratio for sessions that stay (a turn that moved cannot hit, whatever the cache).
    stayed: bool = False
    # The gateway's own event-loop lag while it ran (serve/lag.py): a stalled loop reads a stream late
    # and then all at once, so the decode rate measured says more about the gateway than the endpoint.
    loop_lag_s: float = 0.0
    # Of which while it waited for its first token (sent -> first token read).
    ttft_lag_s: float = 0.0

    @property
    def load(self) -> float:
        """Others in flight while it ran: on average over its time where known, else the mean of the counts
        at start and at end (start alone if unknown)."""
        if self.in_flight_mean is not None:
            return self.in_flight_mean
        if self.in_flight_at_end is None:
            return float(self.in_flight_at_start)
        return (self.in_flight_at_start + self.in_flight_at_end) / 2.0

    @property
    def fitted_ttft_s(self) -> float | None:
        """`ttft_s` for the TTFT and prefill fits: None when it was measured through a stall of the
        gateway's own loop (`stalled`). The TTFT distribution keeps it: it is what the client waited."""
        ttft = self.ttft_s
        return None if ttft is None or stalled(self.ttft_lag_s, ttft) else ttft
