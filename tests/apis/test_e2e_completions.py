"""End to end: legacy `POST /v1/completions` and `POST /v1/embeddings` with the official `openai` SDK,
routed to the endpoints whose catalogue entry lists those APIs."""

from __future__ import annotations

import httpx
import openai
import pytest

from gateway.simulator.testing import SimProcess
from tests.apis.conftest import FAST, FELL_BACK_FROM_FAST, KeyedGateway, access_line, last_request


def client(gw: KeyedGateway, key: str | None = None) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url, api_key=key or gw.key, max_retries=0)


def test_completion_plain_and_streamed(api_gateway: KeyedGateway, api_sim: SimProcess) -> None:
    raw = client(api_gateway).completions.with_raw_response.create(model="m", prompt="Once upon", max_tokens=6,
                                                                   extra_body=FAST)
    completion = raw.parse()
    assert completion.object == "text_completion" and completion.model == "m"
    assert len(completion.choices[0].text.split()) == 6 and completion.choices[0].finish_reason == "length"
    assert completion.usage is not None and completion.usage.completion_tokens == 6
    assert raw.headers["x-ultraroute-endpoint"] == "fast" and raw.headers["x-ultraroute-tier"] == "fast"
    assert last_request(api_sim, "fast", "/completions")["prompt"] == "Once upon"
    chunks = list(client(api_gateway).completions.create(model="m", prompt="Once upon", max_tokens=6, stream=True,
                                                         extra_body=FAST))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == completion.choices[0].text
    assert all(c.model == "m" for c in chunks)


def test_embeddings(api_gateway: KeyedGateway, api_sim: SimProcess) -> None:
    raw = client(api_gateway).embeddings.with_raw_response.create(model="e", input=["one", "two", "one"],
                                                                  extra_body=FAST)
    result = raw.parse()
    vectors = [d.embedding for d in result.data]
    assert len(vectors) == 3 and all(len(v) == 8 for v in vectors) and vectors[0] == vectors[2] != vectors[1]
    assert result.model == "e" and result.usage.prompt_tokens == 3
    assert raw.headers["x-ultraroute-endpoint"] == "fast"
    assert last_request(api_sim, "fast", "/embeddings")["encoding_format"] == "base64"  # the SDK's default


@pytest.mark.usefixtures("failing_fast")
def test_fallback_from_a_failing_fast_tier(api_gateway: KeyedGateway) -> None:
    c = client(api_gateway)
    raw = c.completions.with_raw_response.create(model="m", prompt="Hi", max_tokens=4, extra_body=FAST)
    assert raw.parse().choices[0].text and FELL_BACK_FROM_FAST.match(raw.headers["x-ultraroute-fallback"])
    raw = c.embeddings.with_raw_response.create(model="e", input="Hi", extra_body=FAST)
    assert raw.parse().data and raw.headers["x-ultraroute-endpoint"] == "std"
    assert FELL_BACK_FROM_FAST.match(raw.headers["x-ultraroute-fallback"]), raw.headers


def test_errors_and_the_catalogue_apis(api_gateway: KeyedGateway) -> None:
    c = client(api_gateway)
    for unknown_model in (lambda: c.embeddings.create(model="nope", input="Hi"),
                          lambda: c.completions.create(model="nope", prompt="Hi")):
        with pytest.raises(openai.NotFoundError) as unknown:
            unknown_model()
        assert unknown.value.body["code"] == "model_not_found"  # type: ignore[index]
    with pytest.raises(openai.NotFoundError) as wrong_api:  # `m` has no endpoint that serves embeddings
        c.embeddings.create(model="m", input="Hi")
    assert wrong_api.value.body["code"] == "no_matching_endpoint"  # type: ignore[index]
    assert "does not serve the embeddings API" in wrong_api.value.body["message"]  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as invalid:
        c.completions.create(model="m", prompt=[{"not": "a prompt"}])  # type: ignore[list-item]
    assert invalid.value.body["param"] == "prompt"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as streamed:
        c.embeddings.create(model="e", input="Hi", extra_body={"stream": True})
    assert streamed.value.body["param"] == "stream"  # type: ignore[index]
    limited = api_gateway.spent_key()
    for call in (lambda k: client(api_gateway, k).completions.create(model="m", prompt="Hi"),
                 lambda k: client(api_gateway, k).embeddings.create(model="e", input="Hi")):
        with pytest.raises(openai.RateLimitError):
            call(limited)


def test_metrics_and_access_log_name_the_client_api(api_gateway: KeyedGateway) -> None:
    served = client(api_gateway).embeddings.with_raw_response.create(model="e", input="count me")
    with pytest.raises(openai.RateLimitError) as refused:
        client(api_gateway, api_gateway.spent_key()).embeddings.create(model="e", input="count me")
    # A served answer is recorded once it has been sent (off the client's path): its log line first.
    ok, limited = (access_line(api_gateway, r.headers["x-request-id"]) for r in (served, refused.value.response))
    assert (ok["api"], ok["status"], limited["api"], limited["status"]) == ("embeddings", 200, "embeddings", 429)
    metrics = httpx.get(f"{api_gateway.url}/metrics").text
    assert 'ultraroute_client_requests_total{api="embeddings",status="2xx"}' in metrics
    assert 'ultraroute_client_requests_total{api="embeddings",status="4xx"}' in metrics
    assert 'ultraroute_rejected_requests_total{api="embeddings",reason="client_rate_limited"}' in metrics
