"""Key records: secrets are random and shown once, only hashes are kept, periods are UTC."""

from __future__ import annotations

import calendar

import pytest
from pydantic import ValidationError

from gateway.access.keys import KeySpec, hash_secret, new_key, period_end, period_id


def test_new_key_keeps_only_the_hash() -> None:
    key, secret = new_key(KeySpec(name="app", rpm=5))
    assert secret.startswith("ur-") and len(secret) >= 40
    assert key.key_hash == hash_secret(secret)
    assert secret not in key.model_dump_json()
    assert key.hint.startswith(secret[:7]) and key.hint.endswith(secret[-4:])
    other, other_secret = new_key(KeySpec(name="app"))
    assert other_secret != secret and other.id != key.id


def test_spec_is_strict_and_closed() -> None:
    with pytest.raises(ValidationError):
        KeySpec.model_validate_json('{"name": "a", "rpm": "5"}')  # not coerced
    with pytest.raises(ValidationError):
        KeySpec.model_validate_json('{"name": "a", "colour": 1}')
    with pytest.raises(ValidationError):
        KeySpec.model_validate_json('{"name": "a\\nb"}')  # no control characters in names
    with pytest.raises(ValidationError):
        KeySpec(name="a", budget_usd=-1)
    assert KeySpec.model_validate_json('{"name": "a", "budget_usd": 2}').budget_usd == 2.0
    assert KeySpec.model_validate_json('{"name": "a", "rpm": 60.0}').rpm == 60
    with pytest.raises(ValidationError):
        KeySpec.model_validate_json('{"name": "a", "rpm": 60.5}')


def test_periods_are_utc_days_and_months() -> None:
    t = calendar.timegm((2026, 12, 31, 23, 59, 0))
    assert period_id("day", t) == "d20261231" and period_id("month", t) == "m202612"
    assert period_end("day", t) == calendar.timegm((2027, 1, 1, 0, 0, 0))
    assert period_end("month", t) == calendar.timegm((2027, 1, 1, 0, 0, 0))
    assert period_end("month", calendar.timegm((2026, 2, 10, 0, 0, 0))) == calendar.timegm((2026, 3, 1, 0, 0, 0))
