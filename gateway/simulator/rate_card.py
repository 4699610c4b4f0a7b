"""A simulated endpoint's rate card: requests and tokens per minute, and the headers that tell of them.

Each limit is a token bucket holding a minute's worth, refilled continuously (a provider's), that
starts full. A request takes one request and its tokens (prompt + the tokens it will produce) at
admission, or is refused (429). Every answer says how much is left, as the real APIs do:

    Messages              anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset}, reset an
                          RFC 3339 time
    chat, Responses       x-ratelimit-{limit,remaining,reset}-{requests,tokens}, reset a duration
                          ("1s", "6m0s", "250ms")

`reset` is when the bucket has one more request (or, for tokens, is full again): the provider's
figure a client may count on.
"""

from __future__ import annotations

import time


def _stamp(at: float) -> str:
    """RFC 3339, UTC, milliseconds: Anthropic's reset format."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at)) + f".{int(at % 1 * 1000):03d}Z"


def _duration(seconds: float) -> str:
    """OpenAI's reset format: "20ms", "1s", "6m0s"."""
    if seconds < 1.0:
        return f"{max(1, round(seconds * 1000))}ms"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}m{rest}s" if minutes else f"{rest}s"


class _Bucket:
    __slots__ = ("at", "left", "per_minute")

    def __init__(self, per_minute: int) -> None:
        self.per_minute = per_minute
        self.left = float(per_minute)
        self.at = time.monotonic()

    def refill(self, now: float) -> None:
        self.left = min(float(self.per_minute), self.left + (now - self.at) * self.per_minute / 60.0)
        self.at = now

    def reset_s(self, whole: bool) -> float:
        """Seconds until the next unit is free (`whole`: until the bucket is full)."""
        missing = self.per_minute - self.left if whole else 1.0 - (self.left - int(self.left))
        return max(0.0, missing) * 60.0 / self.per_minute


class RateCard:
    """Requests and tokens per minute (0: no such limit)."""

    def __init__(self, requests_per_minute: int, tokens_per_minute: int) -> None:
        self._requests = _Bucket(requests_per_minute) if requests_per_minute else None
        self._tokens = _Bucket(tokens_per_minute) if tokens_per_minute else None

    def matches(self, requests_per_minute: int, tokens_per_minute: int) -> bool:
        return ((self._requests.per_minute if self._requests else 0) == requests_per_minute
                and (self._tokens.per_minute if self._tokens else 0) == tokens_per_minute)

    def take(self, tokens: int) -> str | None:
        """Admit one request of `tokens`; else the limit it would break ("requests", "tokens")."""
        now = time.monotonic()
        for bucket in (self._requests, self._tokens):
            if bucket is not None:
                bucket.refill(now)
        if self._requests is not None and self._requests.left < 1.0:
            return "requests"
        if self._tokens is not None and self._tokens.left < tokens:
            return "tokens"
        if self._requests is not None:
            self._requests.left -= 1.0
        if self._tokens is not None:
            self._tokens.left -= tokens
        return None

    def headers(self, kind: str) -> list[tuple[str, str]]:
        """What an answer of API `kind` says of the limits."""
        out: list[tuple[str, str]] = []
        for name, bucket in (("requests", self._requests), ("tokens", self._tokens)):
            if bucket is None:
                continue
            left, reset_s = int(bucket.left), bucket.reset_s(whole=name == "tokens")
            if kind == "messages":
                out += [(f"anthropic-ratelimit-{name}-limit", str(bucket.per_minute)),
                        (f"anthropic-ratelimit-{name}-remaining", str(left)),
                        (f"anthropic-ratelimit-{name}-reset", _stamp(time.time() + reset_s))]
            else:
                out += [(f"x-ratelimit-limit-{name}", str(bucket.per_minute)),
                        (f"x-ratelimit-remaining-{name}", str(left)),
                        (f"x-ratelimit-reset-{name}", _duration(reset_s))]
        return out
