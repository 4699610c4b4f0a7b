"""Client API keys: what the gateway keeps for each one, and how a key's secret is made and hashed.

A secret is shown once, when its key is created: `ur-` followed by 43 URL-safe characters (256
random bits). Only its SHA-256 is stored. A fast hash is the right one here: the secret is random,
not a password, so there is nothing to guess, and looking a key up stays about a microsecond.

This module holds values only; storing them is `store.py`, enforcing them `gate.py`.
"""

from __future__ import annotations

import calendar
import functools
import hashlib
import secrets
import time
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

SECRET_PREFIX = "ur-"
# Names and model names are shown in tables and logs: printable, no control characters.
PRINTABLE = r"^[^\x00-\x1f\x7f]+$"


# A Literal rather than an enum: the admin API's schema then needs no shared definitions.
Period = Literal["day", "month"]


class KeySpec(BaseModel):
    """What an admin asks for when creating a key: the admin API's request body."""

    # Strict: "rpm": "5" is a mistake to report, not to coerce.
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    name: str = Field(min_length=1, max_length=100, pattern=PRINTABLE)
    models: tuple[str, ...] | None = Field(
        default=None, max_length=1000,
        description="Models (names or aliases) this key may use; null for every model.")
    policy: str | None = Field(default=None, min_length=1, max_length=100,
                               description="Named policy used when a request names none.")
    rpm: int | None = Field(default=None, ge=1, le=10_000_000, description="Requests per minute.")
    tpm: int | None = Field(default=None, ge=1, le=10_000_000_000,
                            description="Tokens (prompt + completion) per minute.")
    budget_usd: float | None = Field(default=None, ge=0, le=1e9, description="Spend allowed per period, USD.")
    budget_period: Period = "month"

    @field_validator("rpm", "tpm", mode="before")
    @classmethod
    def _integral(cls, value: object) -> object:
        # 600.0 is an integer to JSON (and to JSON Schema); "600" is a mistake, refused by strict mode.
        return int(value) if isinstance(value, float) and value.is_integer() else value


class ApiKey(KeySpec):
    """A stored key. `key_hash` is the SHA-256 of the secret; the secret itself is never kept."""

    id: str = Field(min_length=1, max_length=64)
    key_hash: str = Field(min_length=64, max_length=64)
    hint: str = Field(description="The secret's first and last characters, to tell keys apart.")
    created_at: float
    revoked_at: float | None = None

    @property
    def active(self) -> bool:
        return self.revoked_at is None


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogateescape")).hexdigest()


def new_key(spec: KeySpec, now: float | None = None) -> tuple[ApiKey, str]:
    """A new key for `spec`, and its secret (returned once, never stored)."""
    secret = SECRET_PREFIX + secrets.token_urlsafe(32)
    key = ApiKey(
        **spec.model_dump(),
        id="key_" + secrets.token_hex(6),
        key_hash=hash_secret(secret),
        hint=f"{secret[:7]}...{secret[-4:]}",
        created_at=time.time() if now is None else now,
    )
    return key, secret


def period_id(period: Period, now: float) -> str:
    """The UTC calendar day or month that `now` falls in, e.g. "d20261202" or "m202612"."""
    return _period_of_hour(period, int(now // 3600))


@functools.lru_cache(maxsize=64)
def _period_of_hour(period: Period, hour: int) -> str:
    # Days and months begin on the hour (UTC), so the hour decides; asked twice per request.
    t = time.gmtime(hour * 3600)
    return f"d{t.tm_year:04d}{t.tm_mon:02d}{t.tm_mday:02d}" if period == "day" else f"m{t.tm_year:04d}{t.tm_mon:02d}"


def period_end(period: Period, now: float) -> float:
    """When the budget period containing `now` ends (UTC midnight of the next day or month)."""
    t = time.gmtime(now)
    if period == "day":
        start = calendar.timegm((t.tm_year, t.tm_mon, t.tm_mday, 0, 0, 0))
        return start + 86_400.0
    year, month = (t.tm_year + 1, 1) if t.tm_mon == 12 else (t.tm_year, t.tm_mon + 1)
    return float(calendar.timegm((year, month, 1, 0, 0, 0)))
