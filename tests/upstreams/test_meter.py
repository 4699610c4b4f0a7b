"""`upstreams/meter.Meter`: the decode rate counts what came after the first read."""

from __future__ import annotations

from gateway.upstreams.meter import Meter


def test_the_decode_rate_is_tokens_after_the_first_over_the_time_after_it() -> None:
    # One chunk a read: 11 chunks over 1 s, the first at t_first -> 10 tokens/s.
    assert Meter(t_sent=0.0, t_first=1.0, t_last=2.0, token_chunks=11).decode_tps == 10.0


def test_chunks_that_came_with_the_first_read_are_not_spread_over_the_decode() -> None:
    # The first read brought 6 chunks at once (a busy gateway read the stream late, or the upstream
    # batches): they were made before t_first, so only the 5 after it count over the second after it.
    # Counting all 10 after the first put an endpoint at twice its speed, and the router piled onto it.
    meter = Meter(t_sent=0.0, t_first=1.0, t_last=2.0, token_chunks=11, first_chunks=6)
    assert meter.chunks_per_s() == 5.0
    assert meter.decode_tps == 5.0


def test_the_rate_is_in_tokens_when_the_usage_says_how_many_chunks_held() -> None:
    meter = Meter(t_sent=0.0, t_first=1.0, t_last=2.0, token_chunks=11, first_chunks=1,
                  usage={"prompt_tokens": 1, "completion_tokens": 22})
    assert meter.decode_tps == 20.0  # 10 chunks/s, two tokens each


def test_no_rate_when_every_chunk_came_in_one_read() -> None:
    assert Meter(t_sent=0.0, t_first=1.0, t_last=1.0, token_chunks=5, first_chunks=5).decode_tps is None
    assert Meter(t_sent=0.0).decode_tps is None
