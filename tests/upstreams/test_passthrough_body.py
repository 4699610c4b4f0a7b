"""The body an endpoint of the client's own API is passed (unit tests): the client's as sent, in its
order, unknown fields kept, `model` the endpoint's and the gateway's own fields out -- whether or
not the client sent any of them (a body without them is copied whole, the others filtered)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.config import Endpoint, build_catalogue, parse_catalogue
from gateway.upstreams import anthropic, openai_responses


def _endpoint(api: str) -> Endpoint:
    data = {"providers": {"p": {"base_url": "http://p.test/v1", "api": api}},
            "models": {"m": {"endpoints": [{"provider": "p", "model": "up", "id": "p/e",
                                            "price": {"input": 1, "output": 2}}]}}}
    return build_catalogue(parse_catalogue(data, "t.yaml"), "t.yaml", env={}).endpoints()[0]


MESSAGES = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "Hi"}], "stream": False,
            "brand_new_field": [1]}
RESPONSES = {"model": "m", "input": "Hi", "max_output_tokens": 16, "brand_new_field": [1]}


@pytest.mark.parametrize("routing", [{}, {"provider": {"only": ["p"]}, "session_id": "s1", "models": ["m"]}])
def test_a_messages_body_is_passed_as_sent_less_the_gateway_s_fields(routing: dict[str, Any]) -> None:
    client = {**MESSAGES, **routing}
    body = anthropic.passthrough_body(client, _endpoint("anthropic"))
    assert list(body) == ["model", "max_tokens", "messages", "stream", "brand_new_field"]
    assert body == {**MESSAGES, "model": "up", "stream": True}
    assert client == {**MESSAGES, **routing}  # the client's body is left as it was


@pytest.mark.parametrize("routing", [{}, {"store": True, "previous_response_id": None, "speed": "fast"}])
def test_a_responses_body_is_passed_as_sent_less_the_gateway_s_fields(routing: dict[str, Any]) -> None:
    client = {**RESPONSES, **routing}
    body = openai_responses.passthrough_body(client, _endpoint("openai-responses"))
    assert list(body) == ["model", "input", "max_output_tokens", "brand_new_field", "stream", "store"]
    assert body == {**RESPONSES, "model": "up", "stream": True, "store": False}
    assert client == {**RESPONSES, **routing}


@pytest.mark.parametrize(("betas", "sent"), [(None, None), ("", None), (" , ", None),
                                             ("a, b", {"anthropic-beta": "a,b"})])
def test_the_client_s_betas_are_sent_trimmed_and_none_is_no_header(betas: str | None,
                                                                   sent: dict[str, str] | None) -> None:
    assert anthropic.speed_headers(_endpoint("anthropic"), betas) == sent
