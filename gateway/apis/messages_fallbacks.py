"""Anthropic's server-side `fallbacks` on a Messages request (beta `server-side-fallback-2026-07-01`),
served by the gateway as its own `models` fallback, across providers and APIs, never forwarded.

    fallbacks: [{model, max_tokens?, thinking?, output_config?, speed?}, ...]

Each entry's own fields apply to the attempts at its model only, by Anthropic's rules (the SDK's
`BetaFallbackParam`):

    max_tokens      in place of the request's (absent or null: the request's)
    thinking        in place of the request's; null: none (the model's own default)
    output_config   the request's, field by field: an entry's field replaces the request's, a field
                    set to null is removed; `output_config: null` removes it all
    speed           routing, not the body: `fast` ranks the model's fast tiers first, then standard;
                    `standard`, or null, standard only; absent: the request's own speed

An entry's model gets the Messages body with those applied: as it is for an `anthropic` endpoint,
translated for the others (apis/messages.py). Any other key in an entry is refused (400), as
Anthropic refuses it: an override that silently did nothing would serve the fallback otherwise than
asked. `fallbacks: "default"` (Anthropic's own choice of models) has no gateway equivalent: ignored.
"""

from __future__ import annotations

from typing import Any

from gateway.apis.messages_content import bad, field_name
from gateway.parse import MAX_FALLBACK_MODELS
from gateway.policy import Speed

OVERRIDES = frozenset({"max_tokens", "thinking", "output_config", "speed"})
_ENTRY_FIELDS = OVERRIDES | {"model"}


def entries(raw: Any) -> list[dict[str, Any]]:
    """The `fallbacks` entries, checked: each an object with a `model` and known fields of the right
    types. None or "default": none."""
    if raw is None or raw == "default":
        return []
    if not isinstance(raw, list) or len(raw) > MAX_FALLBACK_MODELS:
        raise bad(f"'fallbacks' must be \"default\" or an array of at most {MAX_FALLBACK_MODELS} objects.",
                  "fallbacks")
    for i, entry in enumerate(raw):
        where = f"fallbacks[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("model"), str) or not entry["model"]:
            raise bad(f"'{where}' must be an object with a 'model'.", where)
        unknown = sorted(f"{where}.{field_name(k)}" for k in entry if k not in _ENTRY_FIELDS)
        if unknown:
            raise bad(f"'{where}': unknown field(s) {', '.join(unknown)}; known: model, "
                      f"{', '.join(sorted(OVERRIDES))}.", unknown[0])
        max_tokens = entry.get("max_tokens")
        if max_tokens is not None and (type(max_tokens) is not int or max_tokens < 1):
            raise bad(f"'{where}.max_tokens' must be an integer >= 1.", f"{where}.max_tokens")
        for name in ("thinking", "output_config"):
            if entry.get(name) is not None and not isinstance(entry[name], dict):
                raise bad(f"'{where}.{name}' must be an object or null.", f"{where}.{name}")
        if entry.get("speed") is not None:
            try:
                Speed(entry["speed"])  # any JSON value but the three strings is a ValueError
            except ValueError:
                raise bad(f"'{where}.speed' must be one of standard, fast, ultrafast, or null.",
                          f"{where}.speed") from None
    return raw


def speed_of(entry: dict[str, Any]) -> Speed | None:
    """The speed an entry's model is ranked for: None (the request's own) when it names none; null
    runs the attempt at standard speed."""
    if "speed" not in entry:
        return None
    return Speed.STANDARD if entry["speed"] is None else Speed(entry["speed"])


def body_for(body: dict[str, Any], entry: dict[str, Any]) -> dict[str, Any] | None:
    """The Messages body `entry`'s model is sent (without `fallbacks`), or None when the entry
    changes none of it (only its speed, or nothing)."""
    if entry.get("max_tokens") is None and "thinking" not in entry and "output_config" not in entry:
        return None
    own = {k: v for k, v in body.items() if k != "fallbacks"}
    if entry.get("max_tokens") is not None:
        own["max_tokens"] = entry["max_tokens"]
    if "thinking" in entry:
        if entry["thinking"] is None:
            own.pop("thinking", None)
        else:
            own["thinking"] = entry["thinking"]
    if "output_config" in entry:
        config = entry["output_config"]
        asked = body.get("output_config")
        merged = {} if config is None else {**(asked if isinstance(asked, dict) else {}), **config}
        merged = {k: v for k, v in merged.items() if v is not None}
        if merged:
            own["output_config"] = merged
        else:
            own.pop("output_config", None)
    return own
