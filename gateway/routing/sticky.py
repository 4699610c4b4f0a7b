"""Prompt-cache affinity: turns of one conversation stay on the endpoint that served the last one.

Agent traffic repeats almost all of its input every turn, and cached input is 10-50x cheaper and
faster to first token -- but only on the endpoint that holds the cache. A conversation is named by
`session_id` (body), `x-session-id` (header) or `prompt_cache_key`; without one, by a hash of its
first system and first user message, and then stickiness applies only where it pays (endpoints whose
cached-input price is below their input price). Entries expire after an idle time (10 minutes by
default) and the table is bounded. Local to this replica. It never overrides the request's filters
or health: the router only honours it for an endpoint already in the plan.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from gateway.context import ChatRequest

MAX_SESSIONS = 100_000


def derived_session_key(request: ChatRequest) -> str | None:
    """A conversation's identity when the client names none: its first system and user message."""
    first: dict[str, Any] = {}
    for message in request.body.get("messages") or ():
        role = message.get("role")
        if role in ("system", "developer", "user") and (role == "user" or "system" not in first):
            first.setdefault("system" if role != "user" else "user", message.get("content"))
        if "user" in first:
            break
    if not first:
        return None
    digest = hashlib.blake2b(repr(sorted(first.items())).encode(), digest_size=12).hexdigest()
    return f"h:{request.model}:{digest}"


class SessionAffinity:
    def __init__(self, idle_s: float = 600.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.idle_s = idle_s
        self._clock = clock
        self._table: OrderedDict[str, tuple[str, float]] = OrderedDict()

    def get(self, session: str) -> str | None:
        hit = self._table.get(session)
        if hit is None:
            return None
        endpoint_key, last = hit
        if self._clock() - last > self.idle_s:
            del self._table[session]
            return None
        return endpoint_key

    def remember(self, session: str, endpoint_key: str) -> None:
        self._table[session] = (endpoint_key, self._clock())
        self._table.move_to_end(session)
        while len(self._table) > MAX_SESSIONS:
            self._table.popitem(last=False)
