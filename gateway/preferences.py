"""Stage 2, resolve: merge every source of routing options into one `Preferences`.

Precedence, highest first: the body (`provider`, `speed`, OpenRouter's fast `service_tier`) >
headers (`x-ultraroute-speed`) > the model suffix (`:nitro`, `:floor`, `:fast`, `:ultrafast`) >
the named policy (`x-ultraroute-policy`, else the client key's policy) > the `default` policy. A
field left unset at one level
falls through to the next. This stage does not look at endpoints or stats.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.context import ChatRequest, Preferences
from gateway.errors import InvalidRequest, ModelNotFound
from gateway.policy import PercentileThreshold, PolicySet, ProviderOptions, Sort, Speed
from gateway.routing.router import split_suffix

SUFFIXES: Mapping[str, dict[str, Any]] = {
    "nitro": {"sort": Sort.THROUGHPUT},
    "floor": {"sort": Sort.PRICE},
    "fast": {"speed": Speed.FAST},
    "ultrafast": {"speed": Speed.ULTRAFAST},
}


def _layer(options: ProviderOptions | None) -> dict[str, Any]:
    """The fields a level actually sets, with the sort flattened to its key."""
    if options is None:
        return {}
    layer = {name: getattr(options, name) for name in options.model_fields_set}
    layer = {k: v for k, v in layer.items() if v is not None}
    if "sort" in layer:
        layer["sort"] = options.sort_key
    return layer


def _threshold(value: float | PercentileThreshold | None) -> PercentileThreshold | None:
    if value is None or isinstance(value, PercentileThreshold):
        return value
    return PercentileThreshold(p50=value)


class Resolver:
    """`resolve()` with its results cached: clients send the same few option sets over and over."""

    def __init__(self, policies: PolicySet, max_entries: int = 4096) -> None:
        self.policies = policies
        self._max = max_entries
        self._cache: dict[tuple[object, ...], Preferences] = {}

    def __call__(self, request: ChatRequest, headers: Mapping[str, str],
                 key_policy: str | None = None) -> Preferences:
        model = request.model
        key = (headers.get("x-ultraroute-policy"), headers.get("x-ultraroute-speed"),
               split_suffix(model)[1] if ":" in model else None, request.options, request.speed, key_policy)
        hit = self._cache.get(key)
        if hit is None:
            if len(self._cache) >= self._max:
                self._cache.clear()
            hit = self._cache[key] = resolve(request, headers, self.policies, key_policy)
        return hit


def resolve(request: ChatRequest, headers: Mapping[str, str], policies: PolicySet,
            key_policy: str | None = None) -> Preferences:
    """`key_policy`: the client key's default policy, used when the request names none."""
    name = headers.get("x-ultraroute-policy") or key_policy or "default"
    policy = policies.get(name)
    if policy is None:
        raise InvalidRequest(f"Unknown policy '{name}'. Known: {', '.join(sorted(policies.policies))}.",
                             param="x-ultraroute-policy")

    merged: dict[str, Any] = _layer(policies.default)
    merged.update(_layer(policy))
    _, suffix = split_suffix(request.model)
    if suffix is not None:
        if suffix not in SUFFIXES:
            # No model has this name: a 404 like any unknown model, saying which suffixes exist.
            raise ModelNotFound(request.model, f" ':{suffix}' is not a routing suffix (known: {', '.join(SUFFIXES)}).")
        merged.update(SUFFIXES[suffix])
    speed_header = headers.get("x-ultraroute-speed")
    if speed_header:
        try:
            merged["speed"] = Speed(speed_header)
        except ValueError:
            raise InvalidRequest("x-ultraroute-speed must be one of standard, fast, ultrafast.",
                                 param="x-ultraroute-speed") from None
    merged.update(_layer(request.options))
    if request.speed is not None:
        merged["speed"] = request.speed

    max_price = merged.get("max_price")
    return Preferences(
        policy_name=name,
        speed=merged.get("speed"),
        sort=merged.get("sort"),
        order=tuple(merged.get("order") or ()),
        only=merged.get("only"),
        ignore=tuple(merged.get("ignore") or ()),
        allow_fallbacks=merged.get("allow_fallbacks", True),
        quantizations=merged.get("quantizations"),
        data_collection=merged.get("data_collection"),
        max_price_prompt=max_price.prompt if max_price else None,
        max_price_completion=max_price.completion if max_price else None,
        min_throughput=_threshold(merged.get("preferred_min_throughput")),
        max_latency_s=_threshold(merged.get("preferred_max_latency")),
        require_parameters=bool(merged.get("require_parameters", False)),
        regions=merged.get("regions"),
        hedge_after_ms=merged.get("hedge_after_ms"),
        sticky=merged.get("sticky"),
        mid_stream_recovery=merged.get("mid_stream_recovery", True),
    )
