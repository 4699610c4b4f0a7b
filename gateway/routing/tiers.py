"""Speed tiers: which tiers a request may be served by, and in which order they are tried.

- `speed: ultrafast`: ultrafast, then fast, then standard. `speed: fast`: fast, then standard.
  `speed: standard`: standard only.
- No speed: standard tiers; with `sort: throughput` (or `:nitro`) or `sort: e2e` standard and fast are ranked
  together, as OpenRouter's Nitro admits its priority endpoints. A model with no standard tier is
  served by its lowest tier. Ultrafast (6-8x the price) is never chosen unless asked for.
- `allow_fallbacks: false` keeps only the first tier group.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gateway.config import Tier
from gateway.policy import Sort, Speed

_ORDER = (Tier.STANDARD, Tier.FAST, Tier.ULTRAFAST)


def tier_ranks(speed: Speed | None, sort: Sort | None, present: Iterable[Tier],
               allow_fallbacks: bool) -> Mapping[Tier, int]:
    """Tier -> group rank (0 is tried first). Tiers not in the mapping may not serve."""
    if speed is Speed.ULTRAFAST:
        ranks = {Tier.ULTRAFAST: 0, Tier.FAST: 1, Tier.STANDARD: 2}
    elif speed is Speed.FAST:
        ranks = {Tier.FAST: 0, Tier.STANDARD: 1}
    elif speed is Speed.STANDARD:
        ranks = {Tier.STANDARD: 0}
    elif sort is Sort.THROUGHPUT or sort is Sort.E2E:  # speed asked for: fast hosts compete on measurements
        ranks = {Tier.STANDARD: 0, Tier.FAST: 0}
    else:
        tiers = set(present)
        lowest = next((t for t in _ORDER if t in tiers), Tier.STANDARD)
        ranks = {Tier.STANDARD: 0} if Tier.STANDARD in tiers else {lowest: 0}
    if not allow_fallbacks:
        ranks = {t: r for t, r in ranks.items() if r == 0}
    return ranks


def tier_exclusion(tier: Tier, speed: Speed | None) -> str:
    asked = speed.value if speed else "unset"
    return f"tier {tier.value} not used for speed {asked}"
