"""Prices from a gateway catalogue (`--catalogue providers.yaml`), so a bench need not repeat them.

Which endpoint's price applies to a target, first match wins:
1. the target's `endpoint` (an endpoint id, e.g. `fireworks/ultrafast`);
2. its `provider.only`, when it names exactly one endpoint (by id, provider or key, as the
   gateway's routing matches it);
3. its `speed`, when exactly one endpoint of the model has that tier.
The model is the target's model, looked up by public name or alias, else by upstream model id (for a
target that calls a provider's base_url directly).

Does: load the catalogue without reading any API key, and fill in the pricing of targets that have
none. Does not: override a price given on the command line or in a targets file; guess when the
choice is ambiguous (the target then stays unpriced and a note says why).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from gateway.bench.cost import Pricing
from gateway.bench.targets import BenchConfigError, Target, with_pricing
from gateway.config import Catalogue, ConfigError, Endpoint, load_catalogue


def read_catalogue(path: Path) -> Catalogue:
    try:
        # env={}: prices need no keys, and a bench has no business reading provider secrets.
        catalogue, _ = load_catalogue(path, env={})
    except ConfigError as err:
        raise BenchConfigError(str(err)) from None
    except OSError as err:
        raise BenchConfigError(f"{path}: cannot read: {err.strerror or err}") from None
    return catalogue


def _endpoints_of(catalogue: Catalogue, model: str) -> tuple[Endpoint, ...]:
    public = catalogue.resolve_model(model)
    if public is not None:
        return catalogue.models[public]
    return tuple(e for e in catalogue.endpoints() if e.upstream_model == model)


def _pricing_of(endpoint: Endpoint, source: str) -> Pricing:
    where = f"{source}: {endpoint.key}"
    if endpoint.hourly_cost is not None:
        return Pricing(hourly_cost=endpoint.hourly_cost, source=where)
    assert endpoint.price is not None  # the catalogue guarantees exactly one pricing kind
    return Pricing(input=endpoint.price.input, output=endpoint.price.output, source=where)


def price_target(catalogue: Catalogue, target: Target, source: str) -> tuple[Target, str | None]:
    """The target with its catalogue price, and a note when none could be chosen."""
    if target.pricing is not None:
        return target, None
    endpoints = _endpoints_of(catalogue, target.model)
    if not endpoints:
        return target, f"{target.name}: model {target.model!r} is not in {source}; no price"
    by_id = {e.id: e for e in endpoints}
    if target.endpoint is not None:
        if target.endpoint not in by_id:
            raise BenchConfigError(f"target {target.name!r}: endpoint {target.endpoint!r} is not an endpoint "
                                   f"of {target.model!r} in {source} ({', '.join(by_id)})")
        return with_pricing(target, _pricing_of(by_id[target.endpoint], source)), None
    if len(target.only) == 1:
        name = target.only[0]
        named = [e for e in endpoints if name in (e.id, e.provider.name, e.key)]
        if len(named) == 1:
            return with_pricing(target, _pricing_of(named[0], source)), None
    speed = target.body.get("speed")
    tiered = [e for e in endpoints if e.tier.value == speed]
    if len(tiered) == 1:
        return with_pricing(target, _pricing_of(tiered[0], source)), None
    if len(endpoints) == 1 and not speed and not target.only:
        return with_pricing(target, _pricing_of(endpoints[0], source)), None
    return target, (f"{target.name}: cannot tell which endpoint of {target.model!r} in {source} it pays for; "
                    "set endpoint=ID")


def price_targets(targets: Sequence[Target], path: Path) -> tuple[list[Target], list[str]]:
    catalogue = read_catalogue(path)
    priced, notes = [], []
    for target in targets:
        new, note = price_target(catalogue, target, path.name)
        priced.append(new)
        if note:
            notes.append(note)
    return priced, notes
