"""What to measure: `Target`s, from command-line specs and/or a targets YAML file.

A target is a name, a base_url, a model, extra body fields (e.g. `{"speed": "fast"}` or
`{"provider": {"only": ["fireworks/ultrafast"]}}`), the NAME of an environment variable holding an
API key, and optional pricing. Command-line forms:

    --target NAME[:key=value,key=value...]   keys: speed, only (repeatable), endpoint, base_url,
                                             model, api_key_env, body.FIELD (value parsed as JSON
                                             when it is JSON, else kept as a string)
    --price NAME=IN/OUT                      USD per 1M input/output tokens
    --hourly-cost NAME=USD                   USD per hour of rented capacity

A targets file (`--targets FILE`) holds the same, see `TargetsFile`. Precedence: a target's own
field, then the command line's `--base-url/--model/--api-key-env`, then the file's top level.
Pricing: `--price`/`--hourly-cost` > the file's `price`/`hourly_cost` > the catalogue.

Does: parse and validate all of that into frozen `Target`s (errors raise `BenchConfigError` naming
the flag or the file and key). Does not: read API keys (only names the variable), look up
catalogue prices (`catalogue.py`) or send requests.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field

from gateway.bench.cost import Pricing
from gateway.configfile import ConfigError, load_model

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
SPEEDS = ("standard", "fast", "ultrafast")


class BenchConfigError(ValueError):
    """Bad bench input; the message names the flag or the file and key."""


@dataclass(frozen=True, slots=True)
class Target:
    name: str
    base_url: str  # the OpenAI-compatible root, e.g. http://127.0.0.1:8080/v1
    model: str
    body: Mapping[str, Any] = field(default_factory=dict)  # merged into every request body
    api_key_env: str | None = None
    pricing: Pricing | None = None
    endpoint: str | None = None  # catalogue endpoint id whose price applies

    @property
    def only(self) -> tuple[str, ...]:
        """The `provider.only` endpoint ids this target asks the gateway for (evidence check)."""
        provider = self.body.get("provider")
        only = provider.get("only") if isinstance(provider, Mapping) else None
        return tuple(only) if isinstance(only, list | tuple) else ()

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "base_url": self.base_url, "model": self.model, "body": dict(self.body),
                "api_key_env": self.api_key_env, "endpoint": self.endpoint,
                "pricing": None if self.pricing is None else {
                    "kind": self.pricing.kind, "input": self.pricing.input, "output": self.pricing.output,
                    "hourly_cost": self.pricing.hourly_cost, "source": self.pricing.source}}


class _File(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PriceEntry(_File):
    input: float = Field(ge=0)
    output: float = Field(ge=0)


class TargetEntry(_File):
    name: str = Field(pattern=NAME_RE.pattern)
    base_url: str | None = Field(default=None, pattern=r"^https?://")
    model: str | None = None
    api_key_env: str | None = None
    speed: str | None = Field(default=None, pattern="^(standard|fast|ultrafast)$")
    only: tuple[str, ...] | None = None
    body: dict[str, Any] = Field(default_factory=dict)
    endpoint: str | None = None
    price: PriceEntry | None = None
    hourly_cost: float | None = Field(default=None, ge=0)


class TargetsFile(_File):
    """`--targets FILE`: top-level defaults, an optional catalogue (relative to the file), targets."""

    base_url: str | None = Field(default=None, pattern=r"^https?://")
    model: str | None = None
    api_key_env: str | None = None
    catalogue: str | None = None
    targets: tuple[TargetEntry, ...] = Field(min_length=1)


@dataclass(frozen=True, slots=True)
class TargetDraft:
    """A target before defaults are applied."""

    name: str
    base_url: str | None = None
    model: str | None = None
    api_key_env: str | None = None
    body: Mapping[str, Any] = field(default_factory=dict)
    endpoint: str | None = None
    pricing: Pricing | None = None


def _body(speed: str | None, only: Sequence[str], extra: Mapping[str, Any]) -> dict[str, Any]:
    body = dict(extra)
    if speed:
        body["speed"] = speed
    if only:
        provider = dict(body.get("provider") or {})
        provider["only"] = list(only)
        body["provider"] = provider
    return body


def parse_target_spec(spec: str) -> TargetDraft:
    """`NAME[:key=value,...]`; a base_url's own colons are fine (only the first colon splits)."""
    name, _, rest = spec.partition(":")
    if not NAME_RE.match(name):
        raise BenchConfigError(f"--target {spec!r}: name must match {NAME_RE.pattern}")
    fields: dict[str, str] = {}
    only: list[str] = []
    extra: dict[str, Any] = {}
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        if not eq or not value:
            raise BenchConfigError(f"--target {spec!r}: {item!r} is not key=value")
        if key == "only":
            only.append(value)
        elif key.startswith("body.") and len(key) > 5:
            try:
                extra[key[5:]] = orjson.loads(value)
            except orjson.JSONDecodeError:
                extra[key[5:]] = value
        elif key in ("speed", "endpoint", "base_url", "model", "api_key_env"):
            fields[key] = value
        else:
            raise BenchConfigError(f"--target {spec!r}: unknown key {key!r} (speed, only, endpoint, "
                                   "base_url, model, api_key_env, body.FIELD)")
    if fields.get("speed", SPEEDS[0]) not in SPEEDS:
        raise BenchConfigError(f"--target {spec!r}: speed must be one of {', '.join(SPEEDS)}")
    return TargetDraft(name=name, base_url=fields.get("base_url"), model=fields.get("model"),
                  api_key_env=fields.get("api_key_env"), endpoint=fields.get("endpoint"),
                  body=_body(fields.get("speed"), only, extra))


def parse_price_specs(prices: Sequence[str], hourly: Sequence[str]) -> dict[str, Pricing]:
    """`NAME=IN/OUT` and `NAME=USD` flags -> pricing by target name."""
    out: dict[str, Pricing] = {}
    for spec in prices:
        name, eq, value = spec.partition("=")
        parts = value.split("/")
        try:
            if not eq or len(parts) != 2:
                raise ValueError
            out[name] = Pricing(input=float(parts[0]), output=float(parts[1]), source="--price")
        except ValueError:
            raise BenchConfigError(f"--price {spec!r}: expected NAME=IN/OUT in USD per 1M tokens, "
                                   "e.g. std=0.30/1.20") from None
    for spec in hourly:
        name, eq, value = spec.partition("=")
        try:
            if not eq or name in out:
                raise ValueError
            out[name] = Pricing(hourly_cost=float(value), source="--hourly-cost")
        except ValueError:
            raise BenchConfigError(f"--hourly-cost {spec!r}: expected NAME=USD_PER_HOUR, once per target, "
                                   "and not with --price for the same target") from None
    return out


def load_targets_file(path: Path) -> tuple[TargetsFile, list[TargetDraft]]:
    try:
        parsed = load_model(path, TargetsFile)
    except ConfigError as err:
        raise BenchConfigError(str(err)) from None
    drafts = []
    for entry in parsed.targets:
        pricing = None
        if entry.price is not None and entry.hourly_cost is not None:
            raise BenchConfigError(f"{path.name}: targets.{entry.name}: set price or hourly_cost, not both")
        if entry.price is not None:
            pricing = Pricing(input=entry.price.input, output=entry.price.output, source=path.name)
        elif entry.hourly_cost is not None:
            pricing = Pricing(hourly_cost=entry.hourly_cost, source=path.name)
        drafts.append(TargetDraft(name=entry.name, base_url=entry.base_url, model=entry.model,
                             api_key_env=entry.api_key_env, endpoint=entry.endpoint, pricing=pricing,
                             body=_body(entry.speed, entry.only or (), entry.body)))
    return parsed, drafts


def build_targets(
    drafts: Sequence[TargetDraft],
    *,
    base_url: str | None,
    model: str | None,
    api_key_env: str | None,
    prices: Mapping[str, Pricing],
) -> list[Target]:
    """Apply defaults and pricing flags; every target must end up with a base_url and a model."""
    names = [d.name for d in drafts]
    if len(set(names)) != len(names):
        raise BenchConfigError(f"target names must be unique: {', '.join(names)}")
    unknown = sorted(set(prices) - set(names))
    if unknown:
        raise BenchConfigError(f"--price/--hourly-cost name unknown targets: {', '.join(unknown)}")
    targets = []
    for d in drafts:
        url, name_model = d.base_url or base_url, d.model or model
        if not url or not name_model:
            raise BenchConfigError(f"target {d.name!r} needs a base_url and a model "
                                   "(--base-url/--model, or in the target)")
        if not url.startswith(("http://", "https://")):
            raise BenchConfigError(f"target {d.name!r}: base_url must start with http:// or https://")
        targets.append(Target(name=d.name, base_url=url.rstrip("/"), model=name_model, body=d.body,
                              api_key_env=d.api_key_env or api_key_env, endpoint=d.endpoint,
                              pricing=prices.get(d.name, d.pricing)))
    return targets


def with_pricing(target: Target, pricing: Pricing | None) -> Target:
    return replace(target, pricing=pricing)
