"""Routing options as data: the request's `provider` object and the named policies in `policies/*.yaml`
(the built-in set ships inside the package, `gateway/policies/`; `policies_dir` picks the directory).

Names and meanings follow OpenRouter's provider-routing object so that clients written for it work
unchanged; Vercel's sort names (`tps`, `ttft`, `cost`) are accepted as synonyms. A named policy is a
file holding the same fields plus `speed` and `description`.

This module validates and loads options; it does not decide precedence (see `preferences`) or rank
endpoints (see `routing`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, Strict, ValidationError, field_validator

from gateway.configfile import ConfigError, format_validation_error, read_yaml


class Sort(StrEnum):
    THROUGHPUT = "throughput"
    LATENCY = "latency"
    PRICE = "price"
    E2E = "e2e"  # predicted end-to-end time of this request: TTFT (prompt prefill) + its output's decode


class Speed(StrEnum):
    STANDARD = "standard"
    FAST = "fast"
    ULTRAFAST = "ultrafast"


_SORT_SYNONYMS = {"tps": Sort.THROUGHPUT, "ttft": Sort.LATENCY, "cost": Sort.PRICE}
# Strict scalars: these options come from request bodies, where pydantic's lax defaults would read
# "yes" or 1 as true and "100" as a number. A JSON number (int or float) is still a Number.
Number = Annotated[float, Strict()]
Flag = Annotated[bool, Strict()]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PercentileThreshold(_Frozen):
    p50: Number | None = Field(default=None, gt=0)
    p75: Number | None = Field(default=None, gt=0)
    p90: Number | None = Field(default=None, gt=0)
    p99: Number | None = Field(default=None, gt=0)


class MaxPrice(_Frozen):
    """USD per 1M tokens."""

    prompt: Number | None = Field(default=None, ge=0)
    completion: Number | None = Field(default=None, ge=0)


class SortObject(_Frozen):
    by: Sort
    partition: Literal["model", "none"] | None = None


class ProviderOptions(_Frozen):
    """OpenRouter's `provider` object, plus the gateway's own hedging option."""

    sort: Sort | SortObject | None = None
    order: tuple[str, ...] | None = None
    only: tuple[str, ...] | None = None
    ignore: tuple[str, ...] | None = None
    allow_fallbacks: Flag | None = None
    quantizations: tuple[str, ...] | None = None
    data_collection: Literal["allow", "deny"] | None = None
    max_price: MaxPrice | None = None
    preferred_min_throughput: Number | PercentileThreshold | None = None
    preferred_max_latency: Number | PercentileThreshold | None = None
    require_parameters: Flag | None = None
    regions: tuple[str, ...] | None = None
    hedge_after_ms: Number | None = Field(default=None, gt=0)
    mid_stream_recovery: Flag | None = None  # continue a broken stream elsewhere (default: on)

    @field_validator("sort", mode="before")
    @classmethod
    def _sort_synonyms(cls, value: Any) -> Any:
        if isinstance(value, str):
            return _SORT_SYNONYMS.get(value, value)
        if isinstance(value, dict) and isinstance(value.get("by"), str):
            return {**value, "by": _SORT_SYNONYMS.get(value["by"], value["by"])}
        return value

    @property
    def sort_key(self) -> Sort | None:
        return self.sort.by if isinstance(self.sort, SortObject) else self.sort


class Policy(ProviderOptions):
    """A named policy: provider options plus the speed tier and a description."""

    description: str = ""
    speed: Speed | None = None
    sticky: Flag | None = None


@dataclass(frozen=True, slots=True)
class PolicySet:
    policies: Mapping[str, Policy]

    @staticmethod
    def builtin() -> PolicySet:
        return PolicySet({"default": Policy(description="Standard tiers, spread over healthy endpoints.")})

    def get(self, name: str) -> Policy | None:
        return self.policies.get(name)

    @property
    def default(self) -> Policy:
        return self.policies.get("default") or PolicySet.builtin().policies["default"]


BUILTIN_POLICIES = Path(__file__).with_name("policies")  # package data: installed with the code


def policies_dir(given: str | None, catalogue: Path) -> Path | None:
    """The directory of named policies: `given` (`--policies`) when given, "" meaning none (only a
    default policy); else `policies/` beside the catalogue if there is one, else the built-in set.
    Only a directory given explicitly may be missing (`load_policies` then says so)."""
    if given is not None:
        return Path(given) if given else None
    beside = catalogue.parent / "policies"
    return beside if beside.is_dir() else BUILTIN_POLICIES


def load_policies(directory: Path) -> PolicySet:
    """Every `*.yaml` in `directory` is one policy named after the file. Errors name file and key."""
    if not directory.is_dir():
        raise ConfigError(f"{directory}: policies directory not found")
    policies: dict[str, Policy] = {}
    for path in sorted(directory.glob("*.yaml")):
        data = read_yaml(path)
        if not isinstance(data, dict):
            raise ConfigError(f"{path.name}: (top level): a policy must be a mapping")
        try:
            policies[path.stem] = Policy.model_validate(data)
        except ValidationError as err:
            raise ConfigError(format_validation_error(path.name, err)) from None
    if "default" not in policies:
        policies["default"] = PolicySet.builtin().policies["default"]
    return PolicySet(policies)
