"""The Redis wire format: key names, flush payload lines, batch splitting, and parsing what a refresh reads."""

from __future__ import annotations

import time

import pytest

from gateway.redisconn import connect
from gateway.telemetry.bucket import Bucket
from gateway.telemetry.redis_wire import (
    DEDUP_TTL_S,
    LATE_KEEP_S,
    READ_SCRIPT,
    WRITE_SCRIPT,
    Batch,
    KeyLayout,
    encode_flush,
    estimate_commands,
    late_member,
    parse_bucket,
    parse_late_member,
    safe_key,
    split_batch,
    sum_in_flight,
)
from gateway.telemetry.window import EndpointWindows

from .conftest import build_sample

BUCKET_S = 10.0
TTL_S = 2400
NOW = 1_700_000_005.0  # 5 s into bucket 170_000_000
LAYOUT = KeyLayout("P")


def encode(batch: Batch, now: float = NOW, late_after_s: float = 1.0) -> list[str]:
    payload = encode_flush(batch, now, layout=LAYOUT, bucket_s=BUCKET_S, bucket_ttl_s=TTL_S,
                           late_after_s=late_after_s)
    return payload.split("\n") if payload else []


def windows(*buckets: tuple[int, Bucket], newest: float | None = None) -> EndpointWindows:
    w = EndpointWindows(BUCKET_S, 1800)
    for idx, b in buckets:
        w.set_bucket(idx, b)
    w.note_newest(newest)
    return w


def counts_bucket(ok: int = 2, tok_in: int = 100, cost: float = 0.5) -> Bucket:
    """A bucket without sketch data, so its hash fields are few and known."""
    b = Bucket()
    b.n["ok"] = ok
    b.tok_in = tok_in
    b.cost = cost
    return b


def sampled_windows(key: str, n: int, at: float) -> EndpointWindows:
    w = EndpointWindows(BUCKET_S, 1800)
    for i in range(n):
        w.add(build_sample(key, at=at - i * 0.01, ttft_ms=100.0 + i, input_tokens=10 + i, cost_usd=0.001 * i))
    return w


def apply_like_redis(lines: list[str]) -> dict[str, dict[str, str]]:
    """What WRITE_SCRIPT's HINCRBY/HINCRBYFLOAT lines leave in Redis (values as HGETALL returns them)."""
    hashes: dict[str, dict[str, str]] = {}
    for line in lines:
        cmd, *args = line.split("\t")
        if cmd == "HINCRBY":
            key, field, v = args
            h = hashes.setdefault(key, {})
            h[field] = str(int(h.get(field, "0")) + int(v))
        elif cmd == "HINCRBYFLOAT":
            key, field, v = args
            h = hashes.setdefault(key, {})
            h[field] = repr(float(h.get(field, "0")) + float(v))
    return hashes


def read_reply(h: dict[str, str]) -> str:
    """READ_SCRIPT's reply for one hash: fields and values joined by tabs."""
    return "\t".join(f"{f}\t{v}" for f, v in h.items())


def test_key_layout() -> None:
    assert LAYOUT.bucket("m/x", 12) == "P:b:m/x:12"
    assert LAYOUT.inflight("r1") == "P:inflight:r1"
    assert LAYOUT.flush("r1:abc:3") == "P:flush:r1:abc:3"
    assert (LAYOUT.endpoints, LAYOUT.replicas, LAYOUT.late) == ("P:endpoints", "P:replicas", "P:late")
    assert safe_key("m/a\tb\nc") == "m/a_b_c"
    assert safe_key("m/x") == "m/x"


def test_encode_flush_lines() -> None:
    idx = int(NOW // BUCKET_S)
    rk = f"P:b:m/x:{idx}"
    assert encode({"m/x": windows((idx, counts_bucket()), newest=NOW - 1)}) == [
        f"HINCRBY\t{rk}\tn:ok\t2",
        f"HINCRBY\t{rk}\ttok:in\t100",
        f"HINCRBYFLOAT\t{rk}\tcost\t0.5",
        f"EXPIRE\t{rk}\t{TTL_S + 5}",  # bucket end + bucket_ttl_s
        f"ZADD\tP:endpoints\tGT\t{NOW - 1!r}\tm/x",
        f"ZREMRANGEBYSCORE\tP:endpoints\t-inf\t{NOW - TTL_S!r}",
        f"EXPIRE\tP:endpoints\t{TTL_S}",
    ]


def test_encode_flush_marks_late_writes_and_skips_expired_buckets() -> None:
    cur = int(NOW // BUCKET_S)
    late = cur - 5  # ended 45 s ago: a reader may have cached it already
    expired = int((NOW - TTL_S) // BUCKET_S) - 1
    lines = encode({"m/a\tb": windows((late, counts_bucket()), (expired, counts_bucket()))})
    assert not any(f":{expired}\t" in line for line in lines)
    assert f"ZADD\tP:late\t{NOW!r}\t{late_member('m/a_b', late)}" in lines
    assert lines[-2:] == [f"ZREMRANGEBYSCORE\tP:late\t-inf\t{NOW - LATE_KEEP_S!r}",
                          f"EXPIRE\tP:late\t{int(2 * LATE_KEEP_S)}"]
    assert all("\tm/a\tb" not in line for line in lines)  # the tab in the key is not a separator
    assert encode({"m/x": windows((expired, counts_bucket()))}) == []  # nothing left to send


def test_encoded_bucket_comes_back_from_its_read_reply() -> None:
    w = sampled_windows("m/x", 20, NOW)
    (idx, sent), = w.items()
    hashes = apply_like_redis(encode({"m/x": w}))
    got = parse_bucket(read_reply(hashes[LAYOUT.bucket("m/x", idx)]))
    assert got is not None
    assert got.to_fields() == pytest.approx(sent.to_fields())
    assert got.requests == 20 and got.ttft_ms.count == 20
    assert parse_bucket("") is None  # no such hash


def test_late_member_round_trip() -> None:
    assert parse_late_member(late_member("m/a|b", 12)) == ("m/a|b", 12)
    assert parse_late_member("no-bucket-here") is None
    assert parse_late_member("m/x|notanint") is None


def test_sum_in_flight_adds_replicas_and_skips_garbage() -> None:
    hashes = [{"m/x": "2", "m/y": "1"}, {"m/x": "3", "m/z": "bad"}]
    assert sum_in_flight(hashes) == {"m/x": 5, "m/y": 1}
    assert sum_in_flight([]) == {}


def test_split_batch_sends_newest_buckets_within_budget() -> None:
    cur = int(NOW // BUCKET_S)
    b = counts_bucket()
    cost = estimate_commands(b)
    pending: Batch = {
        "m/a": windows((cur - 2, counts_bucket()), (cur - 1, counts_bucket()), newest=NOW - 10),
        "m/b": windows((cur, counts_bucket()), newest=NOW),
    }
    send, keep = split_batch(pending, 10 * cost)  # all fits: the batch itself goes out
    assert send is pending and keep == {}

    send, keep = split_batch(pending, 2 * cost)
    assert {k: w.indices() for k, w in send.items()} == {"m/b": [cur], "m/a": [cur - 1]}
    assert {k: w.indices() for k, w in keep.items()} == {"m/a": [cur - 2]}
    assert send["m/b"].newest == NOW  # the endpoint's newest sample time travels with its buckets

    send, keep = split_batch(keep, 1)  # a bucket larger than the budget still goes out, alone
    assert list(send) == ["m/a"] and keep == {}


async def test_scripts_round_trip_through_redis(redis_url: str, key_prefix: str) -> None:
    layout = KeyLayout.under(key_prefix)
    now = time.time()
    now = max(now, now - now % BUCKET_S + 0.2)  # the 20 samples (0.19 s) must fall in one bucket
    w = sampled_windows("m/x", 20, now)
    (idx, sent), = w.items()
    payload = encode_flush({"m/x": w}, now, layout=layout, bucket_s=BUCKET_S, bucket_ttl_s=TTL_S,
                           late_after_s=1.0)
    client = connect(redis_url, timeout_s=2.0, decode_responses=True)
    try:
        dedup = layout.flush("test-token")
        assert await client.eval(WRITE_SCRIPT, 1, dedup, DEDUP_TTL_S, payload) == len(payload.split("\n"))
        assert await client.eval(WRITE_SCRIPT, 1, dedup, DEDUP_TTL_S, payload) == 0  # applied once only
        replies = await client.eval(READ_SCRIPT, 2, layout.bucket("m/x", idx), layout.bucket("m/x", idx + 1))
        assert replies[1] == ""
        got = parse_bucket(replies[0])
        assert got is not None and got.to_fields() == pytest.approx(sent.to_fields())
        assert await client.zscore(layout.endpoints, "m/x") == pytest.approx(w.newest)
    finally:
        await client.aclose()
