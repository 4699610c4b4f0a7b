"""Prompt-cache affinity: whether a conversation's turn stays on the endpoint holding its cache.

Agent traffic repeats almost all of its input every turn, and cached input is 10-50x cheaper and
faster to first token -- but only on the endpoint that holds the cache. A conversation is named by
`session_id` (body), `x-session-id` (header), `prompt_cache_key` or `metadata.user_id` (parse.py);
without one, by a hash of the start of its first system and first user message (`derived_session_key`).
The table remembers, per conversation, the endpoint that served its last turn and that turn's input
tokens (what that endpoint now likely holds), and the last `KEPT_HOLDERS` endpoints that served it
before: a turn that had to leave its cache holder (full, failed, slower for a moment) left that cache
behind, and the next turn can go back to it (stay.py `richest_holder`) instead of judging its
detour's host, which may cache nothing, as where its prompt is. Entries expire after an idle time (10
minutes by default) and the table is bounded. Local to this replica.

Staying is a trade-off, not a rule (`stay_or_move`): the turn stays on the holder while what its cache
saves -- the prefill of the cached part at the holder's prefill rate, and the cached-price discount --
outweighs how much slower the holder is predicted to be than the best other candidate (its queue, its
speed); it moves otherwise, and when the holder fails (it is then no longer in the plan's lead). The
router never honours affinity for an endpoint outside the plan: filters and health come first.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from gateway.context import ChatRequest

MAX_SESSIONS = 100_000
# Characters of the first system and user message hashed for a derived session key: enough to tell
# conversations apart, and hashing a 100 kB system prompt on every request is not (module doc).
KEY_CHARS = 2048
# Seconds per uncached prompt token assumed where an endpoint's prefill rate is neither measured nor
# advertised: a GPU host's few thousand tokens per second.
DEFAULT_S_PER_PROMPT_TOKEN = 1.0 / 4000.0
KEPT_HOLDERS = 3  # endpoints remembered per conversation, the last turn's first (module doc)


def derived_session_key(request: ChatRequest) -> str | None:
    """A conversation's identity when the client names none: the start of its first system and user
    message, and their lengths."""
    parts: list[str] = []
    seen_system = False
    for message in request.body.get("messages") or ():
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        if role in ("system", "developer") and not seen_system:
            seen_system = True
            parts.append("s:" + _head(message.get("content")))
        elif role == "user":
            parts.append("u:" + _head(message.get("content")))
            break
    if not parts:
        return None
    digest = hashlib.blake2b("\x00".join(parts).encode(), digest_size=12).hexdigest()
    return f"h:{request.model}:{digest}"


def _head(content: Any) -> str:
    text = content if isinstance(content, str) else repr(content)
    return f"{len(text)}:{text[:KEY_CHARS]}"


@dataclass(frozen=True, slots=True)
class Holder:
    """The endpoint that served a conversation's last turn, and that turn's input tokens."""

    endpoint_key: str
    input_tokens: int


class SessionAffinity:
    def __init__(self, idle_s: float = 600.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.idle_s = idle_s
        self._clock = clock
        self._table: OrderedDict[str, tuple[tuple[Holder, ...], float]] = OrderedDict()

    def holders(self, session: str) -> tuple[Holder, ...]:
        """The endpoints that served the conversation, its last turn's first, each with the input of
        the last turn it served (empty: unknown, or idle too long)."""
        hit = self._table.get(session)
        if hit is None:
            return ()
        holders, last = hit
        if self._clock() - last > self.idle_s:
            del self._table[session]
            return ()
        return holders

    def holder(self, session: str) -> Holder | None:
        holders = self.holders(session)
        return holders[0] if holders else None

    def get(self, session: str) -> str | None:
        holder = self.holder(session)
        return None if holder is None else holder.endpoint_key

    def remember(self, session: str, endpoint_key: str, input_tokens: int = 0) -> None:
        before = self._table.get(session)
        earlier = () if before is None else tuple(h for h in before[0] if h.endpoint_key != endpoint_key)
        self._table[session] = ((Holder(endpoint_key, input_tokens), *earlier[:KEPT_HOLDERS - 1]), self._clock())
        self._table.move_to_end(session)
        while len(self._table) > MAX_SESSIONS:
            self._table.popitem(last=False)


class Verdict(NamedTuple):
    """(A tuple: one per turn judged, built in C.)"""

    stay: bool
    why: str  # for /v1/route: "stays: cache saves ~1.8 s prefill", "moves: ..."


def stay_or_move(extra_s: float, cached_tokens: float, s_per_token: float, saved_share: float,
                 tolerance_s: float) -> Verdict:
    """Whether a turn stays on its cache holder.

    `extra_s`: how much longer the holder is predicted to take than the best other candidate, both
    as cold prompts (its queue and speed; negative when it is the best anyway). `cached_tokens`: how
    much of the prompt it likely holds (its last turn's input x its measured cache hit ratio);
    `s_per_token`: its prefill time per uncached token. `saved_share`: the share of this request's bill
    the cached price saves (0..1): money counts as time up to the prefill saved again. `tolerance_s`:
    near-equal times count as equal, and equal goes to the holder (its cache is a sure saving).
    """
    saved_s = cached_tokens * s_per_token
    worth = saved_s * (1.0 + max(0.0, min(saved_share, 1.0)))
    if extra_s <= worth + tolerance_s:
        why = f"stays: cache saves ~{saved_s:.1f} s prefill"
        if saved_share >= 0.05:
            why += f" and {saved_share:.0%} of the bill"
        return Verdict(True, why)
    return Verdict(False, f"moves: holder ~{extra_s:.1f} s slower, its cache saves ~{saved_s:.1f} s")
