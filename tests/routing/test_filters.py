from pathlib import Path

from gateway.context import ChatRequest, Preferences
from gateway.routing.filters import exclusion_reason, request_shape
from tests.routing.helpers import catalogue, chat, endpoint


def test_each_filter_excludes_what_it_should(tmp_path: Path) -> None:
    cat = catalogue(tmp_path, [
        endpoint("a", quantization="fp8", capabilities=["tools"], context_length=1000,
                 price={"input": 0.3, "output": 1.2}),
        endpoint("b", quantization="fp4", price={"input": 3, "output": 9}, max_output_tokens=100),
    ], regions={"a": "eu", "b": "us"})
    a, b = cat.models["m"]
    shape = request_shape(chat())

    def reasons(prefs: Preferences, shape=shape) -> tuple[str | None, str | None]:
        return exclusion_reason(a, shape, prefs), exclusion_reason(b, shape, prefs)

    assert reasons(Preferences()) == (None, None)
    assert reasons(Preferences(regions=("eu",)))[1].startswith("region us")
    assert reasons(Preferences(quantizations=("fp8",)))[1].startswith("quantization fp4")
    assert reasons(Preferences(only=("a",)))[1] == "not in provider.only"
    assert reasons(Preferences(ignore=("a/standard",)))[0] == "in provider.ignore"
    assert reasons(Preferences(max_price_completion=2.0))[1].startswith("output price 9")
    assert reasons(Preferences(max_price_prompt=1.0))[1].startswith("input price 3")
    tools = request_shape(chat(tools=[{"type": "function"}]))
    assert reasons(Preferences(require_parameters=True), tools)[1] == "does not support tools (require_parameters)"
    assert reasons(Preferences(require_parameters=False), tools) == (None, None)
    long = request_shape(chat(max_tokens=2000))
    assert reasons(Preferences(), long)[0].startswith("context length 1000")
    assert reasons(Preferences(), long)[1].startswith("max_output_tokens 100")


def test_data_collection_deny(tmp_path: Path) -> None:
    cat = catalogue(tmp_path, [endpoint("a"), endpoint("b")], provider_fields={"b": {"data_collection": "allow"}})
    a, b = cat.models["m"]
    shape, deny = request_shape(chat()), Preferences(data_collection="deny")
    assert exclusion_reason(a, shape, deny) is None
    assert exclusion_reason(b, shape, deny) == "provider may retain data (data_collection: deny)"
    assert exclusion_reason(b, shape, Preferences(data_collection="allow")) is None


def sized(chars: int) -> ChatRequest:
    return chat()._replace(prompt_chars=chars)


def test_a_cold_prompt_above_max_uncached_input_tokens_excludes_the_endpoint(tmp_path: Path) -> None:
    cat = catalogue(tmp_path, [endpoint("fast", max_uncached_input_tokens=8192), endpoint("std")])
    fast, std = cat.models["m"]
    small, large = request_shape(sized(4 * 8000)), request_shape(sized(4 * 9000))
    assert exclusion_reason(fast, small, Preferences()) is None
    assert exclusion_reason(fast, large, Preferences()).startswith(
        "cold prompt ~9216 tokens > max_uncached_input_tokens 8192")
    assert exclusion_reason(std, large, Preferences()) is None


def test_a_warm_turn_on_an_endpoint_with_max_uncached_input_tokens_is_judged_by_what_its_cache_leaves(
        tmp_path: Path) -> None:

    from tests.routing.helpers import router
    cat = catalogue(tmp_path, [endpoint("fast", max_uncached_input_tokens=8192), endpoint("std")])
    r, _ = router(cat)
    turn = chat(session_id="agent")._replace(prompt_chars=4 * 12_000)  # ~12k tokens: too large cold
    plan = r.plan(turn, Preferences())
    assert [c.endpoint.id for c in plan.candidates] == ["std/standard"]
    r.sessions.remember("agent", "m/fast/standard", 11_000)  # fast holds 11k of it: ~1k uncached
    plan = r.plan(turn, Preferences())
    assert plan.candidates[0].endpoint.id == "fast/standard" and plan.candidates[0].notes[0] == "sticky"
    assert not plan.excluded
    r.sessions.remember("agent", "m/fast/standard", 2_000)  # holds too little: still a cold prompt there
    assert [c.endpoint.id for c in r.plan(turn, Preferences()).candidates] == ["std/standard"]


def test_context_length_filters_on_the_estimated_prompt_before_the_provider_refuses(tmp_path: Path) -> None:
    cat = catalogue(tmp_path, [endpoint("short", context_length=32_768), endpoint("long", context_length=200_000)])
    short, long = cat.models["m"]
    big = request_shape(sized(4 * 40_000))
    assert exclusion_reason(short, big, Preferences()).startswith("context length 32768 too small")
    assert exclusion_reason(long, big, Preferences()) is None


def test_large_prompts_share_a_plan_within_a_few_percent_and_never_round_down() -> None:
    sizes = [request_shape(sized(4 * n)).prompt_tokens for n in range(5_000, 60_000, 97)]
    assert all(s >= n for s, n in zip(sizes, range(5_000, 60_000, 97), strict=True))
    assert all(s <= n * 1.07 for s, n in zip(sizes, range(5_000, 60_000, 97), strict=True))
    assert len(set(sizes)) < len(sizes) / 5  # a growing agent context reuses cached plans
