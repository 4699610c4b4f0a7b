"""Stage 0: authenticate (401), authorize the model (403), admit within limits and budget (429)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gateway.access.gate import Access
from gateway.access.keyring import KeyRing
from gateway.access.keys import ApiKey, KeySpec, new_key
from gateway.access.ledger import Ledger
from gateway.access.store import FileKeyStore
from gateway.config import Catalogue, load_catalogue
from gateway.errors import AuthenticationFailed, BudgetExceeded, PermissionDenied, RateLimited
from tests.routing.helpers import chat

NOW = 1_800_000_030.0  # 30 s into a minute


def two_models(tmp_path: Path) -> Catalogue:
    endpoint = {"provider": "p", "model": "up", "price": {"input": 1.0, "output": 2.0}}
    data = {"providers": {"p": {"base_url": "http://p.test/v1"}},
            "models": {"m": {"aliases": ["m-alias"], "endpoints": [endpoint]}, "other": {"endpoints": [endpoint]}}}
    path = tmp_path / "providers.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_catalogue(path, env={})[0]


async def access_with(tmp_path: Path, *specs: KeySpec) -> tuple[Access, list[tuple[ApiKey, str]]]:
    store = FileKeyStore(tmp_path / "keys.json")
    made = [new_key(spec) for spec in specs]
    for key, _ in made:
        await store.save(key)
    ring = KeyRing(store)
    await ring.reload()
    return Access(ring, Ledger(None, "t"), two_models(tmp_path)), made


async def test_authenticate(tmp_path: Path) -> None:
    access, [(key, secret), (revoked, revoked_secret)] = await access_with(
        tmp_path, KeySpec(name="a"), KeySpec(name="b"))
    assert await access.authenticate({"authorization": f"Bearer {secret}"}) == key
    assert await access.authenticate({"authorization": f"bearer   {secret} "}) == key
    cases = [({}, "missing_api_key"), ({"authorization": "Basic abc"}, "invalid_api_key"),
             ({"authorization": "Bearer "}, "invalid_api_key"),
             ({"authorization": "Bearer ur-nope"}, "invalid_api_key")]
    for headers, code in cases:
        with pytest.raises(AuthenticationFailed) as err:
            await access.authenticate(headers)
        assert err.value.code == code and err.value.status == 401
        assert "ur-nope" not in err.value.message
    access.keyring.put(revoked.model_copy(update={"revoked_at": 1.0}))  # type: ignore[union-attr]
    with pytest.raises(AuthenticationFailed, match="revoked"):
        await access.authenticate({"authorization": f"Bearer {revoked_secret}"})


async def test_open_mode_lets_everyone_in(tmp_path: Path) -> None:
    access = Access(None, Ledger(None, "t"), two_models(tmp_path))
    assert await access.authenticate({}) is None
    assert access.admit(None) == {}


async def test_authorize_models_aliases_and_fallbacks(tmp_path: Path) -> None:
    access, [(key, _)] = await access_with(tmp_path, KeySpec(name="a", models=("m-alias",)))
    access.authorize(key, chat("m"))
    access.authorize(key, chat("m:nitro"))  # a suffix does not change the model
    access.authorize(key, chat("unknown-model"))  # left to the router's 404
    with pytest.raises(PermissionDenied) as err:
        access.authorize(key, chat("other"))
    assert err.value.status == 403 and err.value.code == "model_not_allowed" and err.value.param == "model"
    with pytest.raises(PermissionDenied) as err:
        access.authorize(key, chat("m")._replace(fallback_models=("other",)))
    assert err.value.param == "models"


async def test_admit_requests_per_minute(tmp_path: Path) -> None:
    access, [(key, _)] = await access_with(tmp_path, KeySpec(name="a", rpm=2))
    assert access.admit(key, NOW)["x-ratelimit-remaining-requests"] == "1"
    assert access.admit(key, NOW)["x-ratelimit-remaining-requests"] == "0"
    with pytest.raises(RateLimited) as err:
        access.admit(key, NOW)
    headers = err.value.headers()
    assert err.value.status == 429 and err.value.type == "requests"
    # The second they were counted in leaves the sliding minute when the 61st second after it begins.
    assert headers["retry-after"] == "61"
    assert headers["x-should-retry"] == "true"
    with pytest.raises(RateLimited):
        access.admit(key, NOW + 60.5)
    assert access.admit(key, NOW + 61)  # the window has room again


async def test_admit_headers_of_both_limits(tmp_path: Path) -> None:
    access, [(key, _)] = await access_with(tmp_path, KeySpec(name="a", rpm=3, tpm=100))
    assert list(access.admit(key, NOW).items()) == [
        ("x-ratelimit-limit-requests", "3"), ("x-ratelimit-remaining-requests", "2"),
        ("x-ratelimit-limit-tokens", "100"), ("x-ratelimit-remaining-tokens", "100")]
    access.charge(key, tokens=40, usd=0.0, now=NOW)
    assert access.admit(key, NOW + 1)["x-ratelimit-remaining-tokens"] == "60"
    access.charge(key, tokens=60, usd=0.0, now=NOW + 1)
    with pytest.raises(RateLimited) as err:  # requests have room (one left); tokens have none
        access.admit(key, NOW + 2)
    assert err.value.headers() == {"x-ratelimit-limit-tokens": "100", "x-ratelimit-remaining-tokens": "0",
                                   "x-ratelimit-reset-tokens": "59s", "retry-after": "59", "x-should-retry": "true"}


async def test_admit_tokens_per_minute_and_budget(tmp_path: Path) -> None:
    access, [(key, _), (budgeted, _)] = await access_with(
        tmp_path, KeySpec(name="a", tpm=100), KeySpec(name="b", budget_usd=0.01, budget_period="day"))
    access.admit(key, NOW)
    access.charge(key, tokens=150, usd=0.0, now=NOW)
    with pytest.raises(RateLimited) as err:
        access.admit(key, NOW)
    assert err.value.type == "tokens"

    access.admit(budgeted, NOW)
    access.charge(budgeted, tokens=10, usd=0.02, now=NOW)
    with pytest.raises(BudgetExceeded) as spent:
        access.admit(budgeted, NOW)
    assert spent.value.code == "budget_exceeded" and spent.value.headers()["x-should-retry"] == "false"
    assert 0 < float(spent.value.headers()["retry-after"]) <= 86_400
