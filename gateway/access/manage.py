"""Creating, listing and revoking keys, and what an operator sees of them: shared by the admin API
(`admin.py`) and the `ultraroute keys` command, so both check a new key the same way.

A key's view never includes its hash; its secret appears once, in the answer to `create`.
"""

from __future__ import annotations

import time

from pydantic import BaseModel, ConfigDict

from gateway.access.keys import ApiKey, KeySpec, Period, new_key, period_end, period_id
from gateway.access.store import KeyStore
from gateway.config import Catalogue
from gateway.errors import InvalidRequest, KeyNotFound
from gateway.policy import PolicySet


class KeyView(BaseModel):
    """A key as the admin API shows it."""

    model_config = ConfigDict(frozen=True)

    object: str = "api_key"
    id: str
    name: str
    hint: str
    active: bool
    models: tuple[str, ...] | None
    policy: str | None
    rpm: int | None
    tpm: int | None
    budget_usd: float | None
    budget_period: Period
    created_at: float
    revoked_at: float | None


class KeyCreated(KeyView):
    key: str  # the secret, shown this once


class KeyList(BaseModel):
    object: str = "list"
    data: list[KeyView]


class SpendView(BaseModel):
    object: str = "api_key.spend"
    id: str
    period: Period
    period_id: str  # "d20261202" or "m202612", UTC
    period_ends_at: float
    spend_usd: float
    budget_usd: float | None
    remaining_usd: float | None


def view(key: ApiKey) -> KeyView:
    return KeyView(**key.model_dump(exclude={"key_hash"}), active=key.active)


def spend_view(key: ApiKey, spend_usd: float, now: float) -> SpendView:
    remaining = None if key.budget_usd is None else max(0.0, key.budget_usd - spend_usd)
    return SpendView(id=key.id, period=key.budget_period, period_id=period_id(key.budget_period, now),
                     period_ends_at=period_end(key.budget_period, now), spend_usd=round(spend_usd, 6),
                     budget_usd=key.budget_usd, remaining_usd=remaining)


def check_spec(spec: KeySpec, catalogue: Catalogue, policies: PolicySet) -> None:
    """What pydantic cannot check: the models and the policy must exist here."""
    for i, model in enumerate(spec.models or ()):
        if catalogue.resolve_model(model) is None:
            raise InvalidRequest(f"'models[{i}]': the catalogue has no model '{model}'.", param=f"models[{i}]")
    if spec.policy is not None and policies.get(spec.policy) is None:
        raise InvalidRequest(f"'policy': no policy named '{spec.policy}'. Known: "
                             f"{', '.join(sorted(policies.policies))}.", param="policy")


async def create_key(store: KeyStore, spec: KeySpec, catalogue: Catalogue,
                     policies: PolicySet) -> tuple[ApiKey, str]:
    check_spec(spec, catalogue, policies)
    key, secret = new_key(spec)
    await store.save(key)
    return key, secret


async def revoke_key(store: KeyStore, key_id: str) -> ApiKey:
    """Revoked keys stay in the store (their spend stays readable) but never authenticate again."""
    keys = await store.load()
    key = keys.get(key_id)
    if key is None:
        raise KeyNotFound()
    if key.active:
        key = key.model_copy(update={"revoked_at": time.time()})
        await store.save(key)
    return key
