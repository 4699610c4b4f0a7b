"""The routing race's scenarios: advertised figures are a vendor's claim, not the simulator's truth."""

from __future__ import annotations

from benchmarks.race_scenarios import scenarios

SEEDS = range(1, 6)


def test_advertised_figures_are_claims_some_of_them_optimistic() -> None:
    for seed in SEEDS:
        optimistic = 0
        for s in scenarios(seed).values():
            for r in s.racers:
                true_tps, true_ttft = r.profile["tokens_per_second"], r.profile["ttft_ms"]
                assert r.advertised_tps >= true_tps * 0.99  # a vendor never undersells
                if r.name != "liar" and r.advertised_tps >= true_tps * 1.19:
                    optimistic += 1
                    assert r.advertised_ttft_ms < true_ttft  # and claims a quicker first token too
        assert optimistic >= 3, f"seed {seed}: only {optimistic} optimistic claims"


def test_claims_are_deterministic_per_seed_and_leave_the_truth_alone() -> None:
    def figures(seed: int) -> list[tuple[str, float, float, dict[str, object]]]:
        return [(r.name, r.advertised_tps, r.advertised_ttft_ms, r.profile)
                for s in scenarios(seed).values() for r in s.racers]

    assert figures(1) == figures(1)
    assert [f[1] for f in figures(1)] != [f[1] for f in figures(2)]
    # The true profiles come from the seed's own generator: unchanged by the claims drawn beside them.
    first = scenarios(1)["capacity"].racers[0].profile
    assert first["tokens_per_second"] == 623.2 and first["ttft_ms"] == 162
