"""Build the ordered plan for one request: resolve the model, filter endpoints, order the rest.

This does not call any upstream and does not read Redis: it works from the catalogue and the
telemetry store's cached view only, so it is cheap enough to run on every request.
"""

from __future__ import annotations

from gateway.config import Catalogue
from gateway.context import ChatRequest, Exclusion, Plan
from gateway.errors import ModelNotFound, NoMatchingEndpoint


def split_suffix(model: str) -> tuple[str, str | None]:
    """`"name:nitro"` -> `("name", "nitro")`. Model names may contain slashes, not colons."""
    name, sep, suffix = model.rpartition(":")
    return (name, suffix) if sep and name else (model, None)


def plan(catalogue: Catalogue, request: ChatRequest) -> Plan:
    base, _suffix = split_suffix(request.model)
    model = catalogue.resolve_model(request.model) or catalogue.resolve_model(base)
    if model is None:
        raise ModelNotFound(request.model)
    candidates = []
    excluded = []
    for endpoint in catalogue.models[model]:
        if endpoint.available:
            candidates.append(endpoint)
        else:
            excluded.append(Exclusion(endpoint.key, "unavailable: provider key not set"))
    if not candidates:
        reasons = "; ".join(f"{e.endpoint_key}: {e.reason}" for e in excluded)
        raise NoMatchingEndpoint(f"No endpoint of '{model}' can serve this request: {reasons}", param="model")
    return Plan(model=model, candidates=tuple(candidates), excluded=tuple(excluded))
