"""Per-endpoint statistics: counters and the most recent attempts, for tests and benchmarks.

Does: record each chat request as an `Attempt` (kept in a bounded deque, mutated in place as the
request progresses) and fold finished attempts into counters. Does not: decide outcomes.

Outcomes: "in_progress", "ok", "malformed", "no_done" (these three delivered the whole answer and
count as `completed`), "cancelled", "rate_limited", "error" (error fault), "error_event",
"bad_request", "model_not_found", "context_length_exceeded" (these five count as `errors`),
"hung", "dropped", "stalled". `cancelled` counts every attempt the client abandoned, whatever its
outcome (a hung or stalled attempt is only over when the client gives up).
"""

from __future__ import annotations

from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson

MAX_ATTEMPTS = 1000
COMPLETED = frozenset({"ok", "malformed", "no_done"})
ERRORS = frozenset({"error", "error_event", "bad_request", "model_not_found", "context_length_exceeded"})
COUNTERS = ("requests", "max_active", "completed", "cancelled", "errors", "rate_limited", "tokens")


@dataclass(slots=True)
class Attempt:
    """One request as the endpoint saw it; `t` is time.time() on arrival."""

    t: float
    stream: bool = False
    model: str | None = None
    prefix_tokens: int = 0
    status: int = 0  # 0 = no HTTP status was sent (hung, or dropped before headers)
    outcome: str = "in_progress"
    tokens: int = 0  # completion tokens actually delivered to the socket
    ttft_ms: float | None = None  # the sampled TTFT for this request
    first_byte_ms: float | None = None  # arrival -> response head actually written (loop clock)
    duration_ms: float | None = None
    cancelled: bool = False  # the client went away before the endpoint was done
    faults: list[str] = field(default_factory=list)
    _epoch: int = field(default=0, repr=False)  # stats generation it belongs to (not reported)

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        del out["_epoch"]
        return out


class EndpointStats:
    """Counters plus the last `MAX_ATTEMPTS` attempts of one endpoint."""

    def __init__(self) -> None:
        self.attempts: deque[Attempt] = deque(maxlen=MAX_ATTEMPTS)
        self.counters: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        self.outcomes: dict[str, int] = {}
        self._epoch = 0

    def clear(self) -> None:
        """Forget everything; requests still in flight will not be counted when they finish."""
        self.attempts.clear()
        self.counters = dict.fromkeys(COUNTERS, 0)
        self.outcomes = {}
        self._epoch += 1

    def begin(self, t: float) -> Attempt:
        attempt = Attempt(t=t, _epoch=self._epoch)
        self.attempts.append(attempt)
        self.counters["requests"] += 1
        return attempt

    def saw_active(self, active: int) -> None:
        self.counters["max_active"] = max(self.counters["max_active"], active)

    def finish(self, attempt: Attempt, elapsed_s: float) -> None:
        attempt.duration_ms = elapsed_s * 1000.0
        if attempt._epoch != self._epoch:
            return  # started before a reset: it must not leak into the new counts
        outcome = attempt.outcome
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
        self.counters["tokens"] += attempt.tokens
        if attempt.cancelled:
            self.counters["cancelled"] += 1
        elif outcome in COMPLETED:
            self.counters["completed"] += 1
        if outcome in ERRORS:
            self.counters["errors"] += 1
        elif outcome == "rate_limited":
            self.counters["rate_limited"] += 1

    def as_dict(self, active: int, attempts: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {**self.counters, "active": active, "outcomes": dict(self.outcomes)}
        if attempts:
            out["attempts"] = [a.as_dict() for a in self.attempts]
        return out


class RecentRequests:
    """The bodies of the last `MAX_REQUESTS` API requests an endpoint received, parsed where they are
    JSON: what tests read to see exactly what the gateway forwarded (e.g. a conversation's history)."""

    MAX_REQUESTS = 100

    def __init__(self) -> None:
        self.items: deque[dict[str, Any]] = deque(maxlen=self.MAX_REQUESTS)

    def record(self, path: str, body: bytes, headers: dict[str, str] | None = None) -> None:
        try:
            parsed: Any = orjson.loads(body)
        except orjson.JSONDecodeError:
            parsed = body[:1000].decode(errors="replace")
        item: dict[str, Any] = {"path": path, "body": parsed}
        if headers:
            item["headers"] = headers
        self.items.append(item)

    def clear(self) -> None:
        self.items.clear()

    def as_list(self) -> list[dict[str, Any]]:
        return list(self.items)
