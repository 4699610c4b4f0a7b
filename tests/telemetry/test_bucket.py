"""One time bucket: its additive Redis hash fields round-trip."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gateway.telemetry.bucket import Bucket
from gateway.telemetry.sample import Outcome

from .conftest import SampleFactory


def test_bucket_fields_round_trip(make_sample: SampleFactory) -> None:
    b = Bucket()
    for outcome in (Outcome.OK, Outcome.OK, Outcome.TIMEOUT, Outcome.RATE_LIMITED):
        b.add_sample(make_sample(at=100.0, outcome=outcome, cached_input_tokens=3, cache_write_input_tokens=5,
                                 reasoning_tokens=4,
                                 ttft_ms=None if outcome == Outcome.TIMEOUT else 321.0), 100.0)
    fields = b.to_fields()
    assert fields["n:ok"] == 2 and fields["n:timeout"] == 1 and fields["tok:cin"] == 12
    assert fields["tok:cw"] == 20  # prompt-cache writes: a counter of their own
    back = Bucket.from_fields({k: str(v) for k, v in fields.items()} | {"future:field": "1"})
    assert back.n == {"ok": 2, "timeout": 1, "rate_limited": 1}
    assert (back.tok_in, back.tok_cached, back.tok_cache_write, back.tok_out, back.tok_reasoning) == (
        b.tok_in, b.tok_cached, 20, b.tok_out, b.tok_reasoning)
    assert Bucket.thaw(b.freeze()).tok_cache_write == 20
    assert back.cost == pytest.approx(b.cost)
    for name in ("ttft_ms", "ttfat_ms", "decode_tps", "e2e_ms"):
        assert back.sketch(name).bins() == b.sketch(name).bins()


def test_a_ttft_read_through_a_stall_of_the_gateways_loop_stays_out_of_the_fits(make_sample: SampleFactory) -> None:
    b = Bucket()
    clean = make_sample(at=1.0, ttft_ms=400.0, input_tokens=1000)
    b.add_sample(clean, 1.0)
    b.add_sample(replace(clean, ttft_lag_s=0.05), 1.0)  # 50 ms of a 400 ms wait: a busy loop, not a stall
    b.add_sample(replace(clean, ttft_s=1.4, ttft_lag_s=1.0), 1.0)  # read a second late: the gateway's stall
    assert b.ttft_ms.count == 3  # what clients waited, all of it
    assert b.fit_ttft.w == pytest.approx(2.0) and b.fit_prefill.w == pytest.approx(2.0)
    assert replace(clean, ttft_s=1.4, ttft_lag_s=1.0).fitted_ttft_s is None
    assert replace(clean, ttft_lag_s=0.05).fitted_ttft_s == pytest.approx(0.4)
