"""End to end: conversations kept by the gateway (`store: true`, `previous_response_id`) with the official
`openai` SDK: shared by replicas through Redis, surviving a restart, private to the client key that
made them, and a clear 503 (never a hang) when Redis is down."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import openai
import pytest
import redis

from gateway.simulator.testing import SimProcess, make_sim_config
from tests.apis.conftest import last_request
from tests.conftest import PrivateRedis
from tests.harness import GatewayProcess, catalogue_for, together


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    profile = {"ttft_ms": 20, "ttft_jitter": 0, "tokens_per_second": 2000, "output_tokens": 6}
    with SimProcess(make_sim_config({"s": profile})) as process:
        yield process


@pytest.fixture
def prefix(redis_url: str) -> Iterator[str]:
    """A Redis key prefix of this test's own, removed afterwards from the shared server."""
    name = f"t15-{os.urandom(4).hex()}"
    yield name
    if not redis_url.startswith("redis://"):
        return  # a test cluster of the fixtures' own, thrown away after the session
    client = redis.Redis.from_url(redis_url)
    for key in client.scan_iter(f"{name}:*"):
        client.delete(key)
    client.close()


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, str | None]:
    return {"role": "assistant", "content": text}


def test_three_turns_across_replicas_a_restart_and_keys(sim: SimProcess, redis_url: str, prefix: str) -> None:
    catalogue = catalogue_for(sim, {"m": [{"sim": "s"}]}, gateway={"redis_key_prefix": prefix})
    env = {"REDIS_URL": redis_url}
    first, second = (GatewayProcess(catalogue, env=env, open_access=False) for _ in range(2))
    key, other = first.create_key(), first.create_key()
    with together(first, second):
        on_first = openai.OpenAI(base_url=first.base_url, api_key=key, max_retries=0)
        one = on_first.responses.create(model="m", input="First question", store=True)
        two = on_first.responses.create(model="m", input="Second question", previous_response_id=one.id, store=True)
        assert two.previous_response_id == one.id
        first.stop()
        first.start()  # whatever it held in memory is gone
        on_second = openai.OpenAI(base_url=second.base_url, api_key=key, max_retries=0)
        three = on_second.responses.create(model="m", input=[user("Third question")], previous_response_id=two.id,
                                           store=True)
        # The upstream received the whole conversation, in order.
        assert last_request(sim, "s", "/chat/completions")["messages"] == [
            user("First question"), assistant(one.output_text), user("Second question"), assistant(two.output_text),
            user("Third question")]
        restarted = openai.OpenAI(base_url=first.base_url, api_key=key, max_retries=0)
        assert restarted.responses.retrieve(three.id).output_text == three.output_text

        stranger = openai.OpenAI(base_url=second.base_url, api_key=other, max_retries=0)
        with pytest.raises(openai.NotFoundError) as refused:
            stranger.responses.create(model="m", input="Go on", previous_response_id=two.id)
        assert refused.value.body["param"] == "previous_response_id"  # type: ignore[index]
        assert refused.value.body["code"] == "response_not_found"  # type: ignore[index]
        with pytest.raises(openai.NotFoundError):
            stranger.responses.retrieve(one.id)
        with pytest.raises(openai.NotFoundError):
            stranger.responses.delete(one.id)

        on_second.responses.delete(three.id)
        with pytest.raises(openai.NotFoundError):
            restarted.responses.retrieve(three.id)
        with pytest.raises(openai.NotFoundError) as unknown:
            on_second.responses.create(model="m", input="Hi", previous_response_id="resp_unknown")
        assert "resp_unknown" in unknown.value.body["message"]  # type: ignore[index]
        unstored = on_second.responses.create(model="m", input="Not kept")  # stateless by default
        with pytest.raises(openai.NotFoundError):
            on_second.responses.retrieve(unstored.id)


def test_redis_down_is_a_quick_503_for_continuations_only(sim: SimProcess, private_redis: PrivateRedis) -> None:
    catalogue = catalogue_for(sim, {"m": [{"sim": "s"}]})
    with GatewayProcess(catalogue, env={"REDIS_URL": private_redis.url}) as gw:
        client = openai.OpenAI(base_url=gw.base_url, api_key="open", max_retries=0)
        kept = client.responses.create(model="m", input="Remember this", store=True)
        assert client.responses.retrieve(kept.id).id == kept.id
        private_redis.stop()
        started = time.perf_counter()
        with pytest.raises(openai.InternalServerError) as down:
            client.responses.create(model="m", input="Go on", previous_response_id=kept.id)
        assert time.perf_counter() - started < 5.0  # sessions.timeout_s (1 s) bounds it, with margin
        assert down.value.status_code == 503 and down.value.body["param"] == "previous_response_id"  # type: ignore[index]
        assert client.responses.create(model="m", input="Stateless still works").output_text
