from gateway.config import Tier
from gateway.policy import Sort, Speed
from gateway.routing.tiers import tier_ranks

ALL = (Tier.STANDARD, Tier.FAST, Tier.ULTRAFAST)


def test_speed_orders_tiers_and_ultrafast_only_when_asked() -> None:
    assert tier_ranks(Speed.ULTRAFAST, None, ALL, True) == {Tier.ULTRAFAST: 0, Tier.FAST: 1, Tier.STANDARD: 2}
    assert tier_ranks(Speed.FAST, None, ALL, True) == {Tier.FAST: 0, Tier.STANDARD: 1}
    assert tier_ranks(None, None, ALL, True) == {Tier.STANDARD: 0}
    assert tier_ranks(None, Sort.THROUGHPUT, ALL, True) == {Tier.STANDARD: 0, Tier.FAST: 0}
    assert Tier.ULTRAFAST not in tier_ranks(None, Sort.THROUGHPUT, ALL, True)


def test_no_fallbacks_keeps_first_group_and_lowest_tier_without_standard() -> None:
    assert tier_ranks(Speed.FAST, None, ALL, False) == {Tier.FAST: 0}
    assert tier_ranks(None, None, (Tier.FAST, Tier.ULTRAFAST), True) == {Tier.FAST: 0}
