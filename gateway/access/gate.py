"""Stage 0, admit: who is calling, may they use this model, and are they within their limits.

    authenticate   `Authorization: Bearer <key>` (or `x-api-key: <key>`) -> the key's record   401
    authorize      the model (and fallback models) against the key's list     403
    admit          budget, requests and tokens per minute; counts the request  429
    charge         after the response: tokens and cost go to the key's ledger

Everything here reads memory (`KeyRing`, `Ledger`); nothing waits on Redis or the disk, except a
secret that is not in memory, which waits for one reload of the store. In open mode (`--open`)
there are no client keys: every request is anonymous and unlimited.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import NamedTuple

from gateway.access.keyring import KeyRing
from gateway.access.keys import ApiKey, hash_secret, period_end
from gateway.access.ledger import Ledger
from gateway.config import Catalogue
from gateway.context import ChatRequest
from gateway.errors import AuthenticationFailed, BudgetExceeded, PermissionDenied, RateLimited
from gateway.routing.router import split_suffix


class LimitKind(NamedTuple):
    """A per-minute limit as the ledger counts it and OpenAI's headers name it (made once, not per request)."""

    kind: str  # "requests" or "tokens", as the headers and the 429 name it
    counter: str  # the ledger's name for it
    cost: int  # what admitting a request adds before it is served (tokens are known only afterwards)
    limit_header: str
    remaining_header: str
    reset_header: str

    @classmethod
    def named(cls, kind: str, counter: str, cost: int) -> LimitKind:
        return cls(kind, counter, cost, f"x-ratelimit-limit-{kind}", f"x-ratelimit-remaining-{kind}",
                   f"x-ratelimit-reset-{kind}")


REQUESTS = LimitKind.named("requests", "req", 1)
TOKENS = LimitKind.named("tokens", "tok", 0)

MISSING_KEY = ("Missing API key: send it as `Authorization: Bearer <key>` (or `x-api-key: <key>`). "
               "An operator creates keys with `ultraroute keys create`.")


class Access:
    def __init__(self, keyring: KeyRing | None, ledger: Ledger, catalogue: Catalogue) -> None:
        self.keyring = keyring  # None: open mode
        self.ledger = ledger
        self.catalogue = catalogue
        self._allowed: dict[tuple[str, tuple[str, ...]], frozenset[str]] = {}

    @property
    def open(self) -> bool:
        return self.keyring is None

    async def authenticate(self, headers: Mapping[str, str]) -> ApiKey | None:
        if self.keyring is None:
            return None
        header = headers.get("authorization")
        if not header:
            # The Anthropic SDK's header; any client may use it.
            secret = headers.get("x-api-key", "").strip()
            if not secret:
                raise AuthenticationFailed(MISSING_KEY, code="missing_api_key")
        else:
            scheme, _, secret = header.partition(" ")
            secret = secret.strip()
            if scheme.lower() != "bearer" or not secret:
                raise AuthenticationFailed("Malformed Authorization header: expected `Bearer <key>`.")
        key = await self.keyring.lookup(hash_secret(secret))
        # The message never repeats the secret sent: it may be a real key pasted into the wrong place.
        if key is None:
            raise AuthenticationFailed("Incorrect API key provided.")
        if not key.active:
            raise AuthenticationFailed(f"API key {key.hint} has been revoked.")
        return key

    def allowed_models(self, key: ApiKey) -> frozenset[str]:
        assert key.models is not None
        cache_key = (key.id, key.models)
        allowed = self._allowed.get(cache_key)
        if allowed is None:
            resolved = (self.catalogue.resolve_model(m) for m in key.models)
            allowed = self._allowed[cache_key] = frozenset(m for m in resolved if m is not None)
        return allowed

    def authorize(self, key: ApiKey | None, request: ChatRequest) -> None:
        """403 when the key may not use the model asked for, or one of its fallback `models`.
        A model the catalogue does not know is left to the router's 404."""
        if key is None or key.models is None:
            return
        allowed = self.allowed_models(key)
        for param, names in (("model", (request.model,)), ("models", request.fallback_models)):
            for name in names:
                public = self.catalogue.resolve_model(split_suffix(name)[0])
                if public is not None and public not in allowed:
                    raise PermissionDenied(f"This API key may not use the model '{public}'.",
                                           param=param, code="model_not_allowed")

    def admit(self, key: ApiKey | None, now: float | None = None) -> dict[str, str]:
        """Count one request against the key, or raise 429. Returns OpenAI's x-ratelimit-* headers."""
        if key is None:
            return {}
        now = time.time() if now is None else now
        if key.budget_usd is not None:
            spent = self.ledger.spend(key, now)
            if spent >= key.budget_usd:
                raise BudgetExceeded(
                    f"This API key has spent ${spent:.4f} of its ${key.budget_usd:g} budget for this "
                    f"{key.budget_period}; it renews at the start of the next one (UTC).",
                    retry_after_s=period_end(key.budget_period, now) - now)
        headers: dict[str, str] = {}
        if key.rpm is not None:
            self._within(REQUESTS, key.id, key.rpm, now, headers)
        if key.tpm is not None:
            self._within(TOKENS, key.id, key.tpm, now, headers)
        self.ledger.count(key.id, now, requests=1)
        return headers

    def _within(self, limit_of: LimitKind, key_id: str, limit: int, now: float, headers: dict[str, str]) -> None:
        """Add one limit's x-ratelimit-* headers to `headers`, or raise 429 with them."""
        estimate = self.ledger.estimate(limit_of.counter, key_id, now)
        remaining = str(max(0, int(limit - estimate - limit_of.cost)))
        # Requests: room for this one. Tokens are known only afterwards: room for any.
        target = limit - limit_of.cost if limit_of.cost else limit - 1
        if estimate > target:
            wait = self.ledger.window(limit_of.counter, key_id, now).seconds_until(target)
            raise RateLimited(f"Rate limit reached for this API key: {limit} {limit_of.kind} per minute. "
                              f"Retry in {max(1, round(wait))}s.",
                              limit_kind=limit_of.kind, retry_after_s=wait,
                              limit_headers={limit_of.limit_header: str(limit), limit_of.remaining_header: remaining,
                                             limit_of.reset_header: f"{max(1, round(wait))}s"})
        headers[limit_of.limit_header] = str(limit)
        headers[limit_of.remaining_header] = remaining

    def charge(self, key: ApiKey | None, tokens: int, usd: float, now: float | None = None) -> None:
        if key is None:
            return
        now = time.time() if now is None else now
        self.ledger.count(key.id, now, tokens=tokens)
        self.ledger.charge(key, usd, now)
