"""Tests of gateway.simulator.chat_request: validation and what a request will produce."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.simulator.chat_request import ApiError, parse_chat_request, rate_limited
from gateway.simulator.config import EndpointProfile
from gateway.simulator.content import render

HELLO = [{"role": "user", "content": "hello world"}]
PROFILE = EndpointProfile(port=1, output_tokens=6, reasoning_tokens=2, accepts_prefix=True)


def parse(body: dict[str, Any], profile: EndpointProfile = PROFILE) -> Any:
    return parse_chat_request(orjson.dumps(body), profile)


def test_natural_length_and_stream_flags() -> None:
    job = parse({"model": "m", "messages": HELLO, "stream": True, "stream_options": {"include_usage": True}})
    assert (job.model, job.stream, job.include_usage) == ("m", True, True)
    assert (len(job.reasoning_ids), len(job.answer_ids), job.finish_reason) == (2, 6, "stop")
    assert job.prompt_tokens == 7 and job.prefix_tokens == 0
    assert job.usage()["completion_tokens_details"] == {"reasoning_tokens": 2}
    assert not parse({"model": "m", "messages": HELLO, "stream_options": {"include_usage": True}}).stream


@pytest.mark.parametrize(("limit", "reasoning", "answer"), [(1, 1, 0), (2, 2, 0), (5, 2, 3), (40, 2, 38)])
def test_limit_is_exact_and_counts_reasoning_first(limit: int, reasoning: int, answer: int) -> None:
    for key in ("max_tokens", "max_completion_tokens"):
        job = parse({"model": "m", "messages": HELLO, key: limit})
        assert (len(job.reasoning_ids), len(job.answer_ids), job.finish_reason) == (
            reasoning,
            answer,
            "length",
        )


def test_natural_stop_ends_under_a_roomy_limit_and_is_cut_by_a_tight_one() -> None:
    profile = PROFILE.model_copy(update={"natural_stop": True})
    roomy = parse({"model": "m", "messages": HELLO, "max_tokens": 40}, profile)
    assert (len(roomy.reasoning_ids), len(roomy.answer_ids), roomy.finish_reason) == (2, 6, "stop")
    tight = parse({"model": "m", "messages": HELLO, "max_tokens": 5}, profile)
    assert (len(tight.reasoning_ids), len(tight.answer_ids), tight.finish_reason) == (2, 3, "length")


def test_prefix_continues_the_same_answer() -> None:
    full = parse({"model": "m", "messages": HELLO})
    words = render(full.answer_ids)
    prefix = render(full.answer_ids[:4])
    cont = parse({"model": "m", "messages": [*HELLO, {"role": "assistant", "content": prefix}]})
    assert cont.prefix_tokens == 4 and cont.reasoning_ids == b""
    assert prefix + render(cont.answer_ids) == words
    over = parse({"model": "m", "messages": [*HELLO, {"role": "assistant", "content": words + " more"}]})
    assert over.answer_ids == b"" and over.finish_reason == "stop"
    empty = parse({"model": "m", "messages": [*HELLO, {"role": "assistant", "content": ""}]})
    assert (empty.reasoning_ids, empty.answer_ids) == (full.reasoning_ids, full.answer_ids)


@pytest.mark.parametrize(
    ("raw", "status", "code", "param"),
    [
        (b"{", 400, "invalid_json", None),
        (b"[]", 400, "invalid_json", None),
        (b'{"model": "m"}', 400, "missing_required_parameter", "messages"),
        (b'{"model": "m", "messages": "hi"}', 400, "invalid_value", "messages"),
        (b'{"model": "m", "messages": [{"content": "x"}]}', 400, "invalid_value", "messages"),
        (b'{"messages": [{"role": "user"}]}', 400, "missing_required_parameter", "model"),
        (
            b'{"model": "m", "messages": [{"role": "user"}], "max_tokens": true}',
            400,
            "invalid_value",
            "max_tokens",
        ),
        (
            b'{"model": "m", "messages": [{"role": "user"}], "max_completion_tokens": 0}',
            400,
            "invalid_value",
            "max_completion_tokens",
        ),
        (
            b'{"model": "m", "messages": [{"role": "user"}], "max_tokens": 1000000000000000}',
            400,
            "invalid_value",
            "max_tokens",
        ),
        (b'{"model": "x", "messages": [{"role": "user"}]}', 404, "model_not_found", "model"),
        (
            b'{"model": "m1", "messages": [{"role": "assistant", "content": "a"}]}',
            400,
            "prefix_not_supported",
            "messages",
        ),
    ],
)
def test_errors_have_openai_shape(raw: bytes, status: int, code: str, param: str | None) -> None:
    profile = (
        EndpointProfile(port=1, model="m1") if status == 404 or code == "prefix_not_supported" else PROFILE
    )
    with pytest.raises(ApiError) as info:
        parse_chat_request(raw, profile)
    assert info.value.status == status
    error = orjson.loads(info.value.body)["error"]
    assert (error["code"], error["param"]) == (code, param)
    assert error["type"] == "invalid_request_error" and error["message"]


def test_rate_limited_carries_retry_after() -> None:
    err = rate_limited(EndpointProfile(port=1, retry_after_s=2.5), "busy")
    assert err.status == 429 and err.outcome == "rate_limited"
    assert dict(err.headers) == {"retry-after": "2.5", "retry-after-ms": "2500"}
    assert orjson.loads(err.body)["error"]["type"] == "rate_limit_exceeded"


def test_a_continuation_s_limit_counts_its_new_tokens_only() -> None:
    """As real hosts count it: a continuation asked for what is left of the first limit ends where the
    uncut answer would have."""
    full = parse({"model": "m", "messages": HELLO, "max_tokens": 9})  # 2 reasoning + 7 answer
    prefix = render(full.answer_ids[:3])  # cut after 5 tokens: the reasoning and 3 answer words
    cont = parse({"model": "m", "messages": [*HELLO, {"role": "assistant", "content": prefix}], "max_tokens": 4})
    assert (len(cont.answer_ids), cont.reasoning_ids, cont.finish_reason) == (4, b"", "length")
    assert prefix + render(cont.answer_ids) == render(full.answer_ids)
