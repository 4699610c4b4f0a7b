"""What a provider's answer says of its rate limits for the gateway's key: read here, and only here.

    Anthropic   anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset},
                reset an RFC 3339 time
    OpenAI      x-ratelimit-{limit,remaining,reset}-{requests,tokens}, reset a duration ("6m0s", "1s",
                "20ms"); Anthropic-compatible hosts may send these instead

`read()` makes a `Reported` of every answer that has them, 200s and 429s alike, and returns None,
after two (OpenAI) or six (Anthropic) header look-ups, for one that has none: it is on every
response's path. The request shaper learns a provider's limits and its remaining stock from it
(shaper.py); the retry logic takes the reset of a limit with none left as the time to come back
(`Reported.exhausted_s`, retry.py).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

ANTHROPIC_KINDS = ("requests", "tokens", "input-tokens", "output-tokens")
OPENAI_KINDS = ("requests", "tokens")
_ANTHROPIC_REMAINING = tuple((k, f"anthropic-ratelimit-{k}-remaining") for k in ANTHROPIC_KINDS)


@dataclass(frozen=True, slots=True)
class Quota:
    """One limit: its size per minute, what is left now, and seconds until it resets (None: not said)."""

    limit: int | None
    remaining: int | None
    reset_s: float | None


@dataclass(frozen=True, slots=True)
class Reported:
    """Every limit one answer spoke of, by kind ("requests", "tokens", "input-tokens", ...)."""

    quotas: tuple[tuple[str, Quota], ...]

    def get(self, kind: str) -> Quota | None:
        return next((q for k, q in self.quotas if k == kind), None)

    @property
    def requests(self) -> Quota | None:
        return self.get("requests")

    @property
    def tokens(self) -> Quota | None:
        """The token limit the shaper paces (it counts prompt + max_tokens as one figure): Anthropic's
        and OpenAI's `tokens`, else Anthropic's `input-tokens`."""
        return self.get("tokens") or self.get("input-tokens")

    def exhausted_s(self) -> float | None:
        """Seconds until every limit with none left has reset (1 s where the reset was not said);
        None while every limit has some left."""
        waits = [q.reset_s if q.reset_s is not None else 1.0 for _, q in self.quotas if q.remaining == 0]
        return (max(waits) or 1.0) if waits else None


def duration_s(text: str) -> float | None:
    """OpenAI's reset format ("1s", "6m0s", "250ms") or plain seconds."""
    total, number = 0.0, ""
    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    i = 0
    while i < len(text):
        ch = text[i]
        if ch.isdigit() or ch == ".":
            number += ch
            i += 1
            continue
        unit = "ms" if text.startswith("ms", i) else ch
        if unit not in units or not number:
            return None
        total += float(number) * units[unit]
        number = ""
        i += len(unit)
    return total + float(number) if number else total


def _until_s(stamp: str) -> float | None:
    """Seconds from now until an RFC 3339 time (Anthropic's reset), at least 0."""
    with contextlib.suppress(ValueError):
        return max(0.0, datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() - time.time())
    return None


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    with contextlib.suppress(ValueError):
        return max(0, int(float(value)))
    return None


def read(headers: Mapping[str, str], anthropic: bool = False) -> Reported | None:
    """The limits an answer's headers state (`anthropic`: the provider speaks Anthropic Messages,
    whose headers are looked for first); None if it states none."""
    if anthropic:
        found: list[tuple[str, str]] | None = None  # a plain loop: no list or names built for none
        for kind, name in _ANTHROPIC_REMAINING:
            value = headers.get(name)
            if value is not None:
                found = [*(found or ()), (kind, value)]
        if found:
            return Reported(tuple(
                (k, Quota(_int(headers.get(f"anthropic-ratelimit-{k}-limit")), _int(v),
                          _until_s(headers.get(f"anthropic-ratelimit-{k}-reset", ""))))
                for k, v in found))
    remaining_r = headers.get("x-ratelimit-remaining-requests")
    remaining_k = headers.get("x-ratelimit-remaining-tokens")
    if remaining_r is None and remaining_k is None:
        return None
    quotas = []
    for kind, remaining in (("requests", remaining_r), ("tokens", remaining_k)):
        if remaining is not None:
            reset = headers.get(f"x-ratelimit-reset-{kind}")
            quotas.append((kind, Quota(_int(headers.get(f"x-ratelimit-limit-{kind}")), _int(remaining),
                                       None if reset is None else duration_s(reset))))
    return Reported(tuple(quotas))
