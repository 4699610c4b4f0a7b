"""End to end: what the README promises `/v1/messages` clients about errors and finish reasons, with the
official `anthropic` SDK in front of the simulator.

Errors come with Anthropic's types: 403 `permission_error` (a model the key may not use), 413
`request_too_large` (a body over `gateway.max_body_bytes`), and an upstream's 500 and 502 `api_error`,
503 `overloaded_error`, 504 `timeout_error` (a hang past the first-token budget). A finish reason `stop`
is `end_turn`, streamed or not. Own simulator and gateway: these tests break their endpoint on purpose.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from gateway.simulator.testing import SimProcess, make_sim_config
from tests.harness import GatewayProcess, catalogue_for

PROFILE = {"ttft_ms": 5, "ttft_jitter": 0, "tokens_per_second": 2000, "output_tokens": 6}
HELLO = [{"role": "user", "content": "Say hello"}]


class Gateway(GatewayProcess):
    key: str  # any model
    only_ok: str  # model "ok" only


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    # natural_stop: an answer ends on its own (finish "stop") when max_tokens leaves room for it.
    with SimProcess(make_sim_config({"good": {**PROFILE, "natural_stop": True}, "bad": dict(PROFILE)})) as sim:
        yield sim


@pytest.fixture(scope="module")
def gateway(sim: SimProcess) -> Iterator[Gateway]:
    catalogue = catalogue_for(sim, {"ok": [{"sim": "good"}], "up": [{"sim": "bad", "first_token_budget_s": 1}]},
                              gateway={"breaker_failures": 1000, "max_body_bytes": 4096})
    gw = Gateway(catalogue, open_access=False)
    gw.key = gw.create_key()
    gw.only_ok = gw.create_key("--models", "ok")
    with gw:
        yield gw


@pytest.fixture
def bad(sim: SimProcess) -> Iterator[SimProcess]:
    yield sim
    sim.patch("bad", faults={"error_rate": 0.0, "hang_rate": 0.0})


def client(gw: Gateway, key: str | None = None) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gw.url, api_key=key or gw.key, max_retries=0)


def error_of(gw: Gateway, model: str, key: str | None = None, **extra: Any) -> anthropic.APIStatusError:
    with pytest.raises(anthropic.APIStatusError) as caught:
        client(gw, key).messages.create(model=model, max_tokens=50, messages=HELLO, **extra)  # type: ignore[arg-type]
    body = caught.value.body
    assert isinstance(body, dict) and body["type"] == "error" and body["error"]["message"], body
    return caught.value


def error_type(err: anthropic.APIStatusError) -> str:
    return err.body["error"]["type"]  # type: ignore[index,no-any-return]


def test_a_model_the_key_may_not_use_is_403_permission_error(gateway: Gateway) -> None:
    err = error_of(gateway, "up", gateway.only_ok)
    assert isinstance(err, anthropic.PermissionDeniedError) and error_type(err) == "permission_error"


def test_a_body_over_the_cap_is_413_request_too_large(gateway: Gateway) -> None:
    err = error_of(gateway, "ok", system="x" * 5000)
    assert err.status_code == 413 and error_type(err) == "request_too_large"


@pytest.mark.parametrize(("status", "kind"), [(500, "api_error"), (502, "api_error"), (503, "overloaded_error")])
def test_an_upstream_error_has_anthropics_type(gateway: Gateway, bad: SimProcess, status: int, kind: str) -> None:
    bad.patch("bad", faults={"error_rate": 1.0, "error_status": status})
    err = error_of(gateway, "up")
    assert err.status_code == status and error_type(err) == kind


def test_an_upstream_that_hangs_past_the_first_token_budget_is_504_timeout_error(gateway: Gateway,
                                                                                 bad: SimProcess) -> None:
    bad.patch("bad", faults={"hang_rate": 1.0})
    err = error_of(gateway, "up")
    assert err.status_code == 504 and error_type(err) == "timeout_error"


def test_finish_reason_stop_is_end_turn(gateway: Gateway) -> None:
    message = client(gateway).messages.create(model="ok", max_tokens=100, messages=HELLO)  # type: ignore[arg-type]
    assert message.stop_reason == "end_turn" and message.usage.output_tokens == 6
    with client(gateway).messages.stream(model="ok", max_tokens=100, messages=HELLO) as stream:  # type: ignore[arg-type]
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert final.stop_reason == "end_turn" and final.content[0].text == text  # type: ignore[union-attr]
    # The control: cut by max_tokens, it is max_tokens, not end_turn.
    cut = client(gateway).messages.create(model="ok", max_tokens=3, messages=HELLO)  # type: ignore[arg-type]
    assert cut.stop_reason == "max_tokens"
