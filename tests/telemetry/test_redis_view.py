"""The read side of RedisStore without Redis: which buckets a refresh reads, and applying the replies."""

from __future__ import annotations

from typing import Any

from gateway.telemetry.bucket import Bucket
from gateway.telemetry.redis_view import ReadPlanner, RemoteView
from gateway.telemetry.redis_wire import READ_SCRIPT, KeyLayout
from gateway.telemetry.window import EndpointWindows

BUCKET_S = 10.0
NOW = 1_000_005.0  # 5 s into bucket 100_000; bucket 99_999 has settled (settle_s = 2)
CUR = int(NOW // BUCKET_S)


def planner(max_reads: int = 3) -> ReadPlanner:
    return ReadPlanner(bucket_s=BUCKET_S, max_window_s=100.0, settle_s=2.0, max_reads=max_reads)


def read_all(p: ReadPlanner, now: float, known: dict[str, float]) -> int:
    """Plan and 'read' until no backlog is left; returns the rounds it took."""
    rounds = 0
    more = True
    while more:
        reads, more = p.plan(now, known)
        p.note_read(reads, now)
        rounds += 1
    return rounds


def test_new_endpoint_reads_live_bucket_then_backlog_newest_first() -> None:
    p = planner(max_reads=3)
    reads, more = p.plan(NOW, {"m/x": NOW})
    assert reads == [("m/x", CUR), ("m/x", CUR - 1), ("m/x", CUR - 2)]
    assert more  # older settled buckets are left for the next rounds


def test_settled_buckets_are_read_once() -> None:
    p = planner(max_reads=3)
    known = {"m/x": NOW}
    assert read_all(p, NOW, known) == 5  # 10 settled buckets in the window, 2 per round
    assert p.plan(NOW, known) == ([("m/x", CUR)], False)  # steady state: the live bucket only
    # the bucket settles: one final read, then nothing (no newer sample)
    later = NOW + BUCKET_S
    assert p.plan(later, known) == ([("m/x", CUR)], False)
    p.note_read([("m/x", CUR)], later)
    assert p.plan(later, known) == ([], False)


def test_late_marker_triggers_one_more_read() -> None:
    p = planner()
    known = {"m/x": NOW}
    read_all(p, NOW, known)
    p.note_late([(f"m/x|{CUR - 5}", NOW)])
    reads, _ = p.plan(NOW, known)
    assert reads == [("m/x", CUR - 5), ("m/x", CUR)]
    p.note_read(reads, NOW)
    p.note_late([(f"m/x|{CUR - 5}", NOW)])  # the same marker again: already read
    assert p.plan(NOW, known)[0] == [("m/x", CUR)]
    p.note_late([(f"m/x|{CUR - 5}", NOW + 1)])  # moved: another late write
    assert p.plan(NOW, known)[0] == [("m/x", CUR - 5), ("m/x", CUR)]
    p.retain({})
    assert p.cold_done == {}


class RecordingPipe:
    """Stands in for a redis-py pipeline: records the commands queued on it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kw: self.calls.append((name, args))


def ok_bucket(n: int) -> Bucket:
    b = Bucket()
    b.n["ok"] = n
    return b


def test_remote_view_queues_reads_and_applies_replies() -> None:
    view = RemoteView(KeyLayout("P"), replica_id="A", bucket_s=BUCKET_S, max_window_s=100.0, settle_s=2.0,
                      max_reads=2)
    pipe = RecordingPipe()
    first = view.queue_refresh(pipe, NOW)
    assert [c[0] for c in pipe.calls] == ["zrangebyscore"] * 3 and first.reads == []
    assert view.apply_refresh(first, [[("m/x", NOW)], ["A", "B"], []], NOW)  # a new endpoint: again soon
    assert view.known == {"m/x": NOW} and view.keys() == {"m/x"}

    pipe = RecordingPipe()
    second = view.queue_refresh(pipe, NOW)
    assert second.others == ["B"] and second.reads == [("m/x", CUR), ("m/x", CUR - 1)]
    assert [c[0] for c in pipe.calls] == ["zrangebyscore"] * 3 + ["hgetall", "eval"]
    assert pipe.calls[3][1] == ("P:inflight:B",)
    assert pipe.calls[4][1] == (READ_SCRIPT, 2, f"P:b:m/x:{CUR}", f"P:b:m/x:{CUR - 1}")
    replies = ["n:ok\t3", ""]
    more = view.apply_refresh(second, [[("m/x", NOW)], ["A", "B"], [], {"m/x": "2"}, replies], NOW)
    assert more  # backlog left
    assert view.others_in_flight == {"m/x": 2}
    w = view.windows["m/x"]
    assert w.indices() == [CUR] and w.bucket(CUR).count("ok") == 3  # type: ignore[union-attr]

    # own flushes go into the view until the next read replaces them
    sent = EndpointWindows(BUCKET_S, 100.0)
    sent.set_bucket(CUR, ok_bucket(2))
    view.merge({"m/x": sent, "m/y": sent})
    assert w.bucket(CUR).count("ok") == 5  # type: ignore[union-attr]
    assert view.keys() == {"m/x", "m/y"}
    view.prune(NOW + 1000.0)  # everything too old; m/y is not in the directory
    assert view.keys() == {"m/x"}


def _refresh(view: RemoteView, replies: list[str], now: float = NOW) -> list[tuple[str, int]]:
    """One refresh round of `view` answered with `replies` for its bucket reads; returns the reads."""
    round_ = view.queue_refresh(RecordingPipe(), now)
    res: list[Any] = [[("m/x", now)], ["A"], []]
    view.apply_refresh(round_, res + ([replies[:len(round_.reads)]] if round_.reads else []), now)
    return round_.reads


def counting_parses(monkeypatch: Any) -> list[str]:
    """The replies `RemoteView` parses from now on."""
    import gateway.telemetry.redis_view as redis_view

    parsed: list[str] = []
    real = redis_view.parse_bucket

    def parse(reply: str) -> Bucket | None:
        parsed.append(reply)
        return real(reply)
    monkeypatch.setattr(redis_view, "parse_bucket", parse)
    return parsed


def test_a_live_bucket_read_again_unchanged_is_not_parsed_again(monkeypatch: Any) -> None:
    view = RemoteView(KeyLayout("P"), replica_id="A", bucket_s=BUCKET_S, max_window_s=20.0, settle_s=2.0,
                      max_reads=10)
    parsed = counting_parses(monkeypatch)
    _refresh(view, [])  # the directory: m/x is new
    assert _refresh(view, ["n:ok\t3", "", ""])[0] == ("m/x", CUR)
    assert parsed == ["n:ok\t3", "", ""]
    parsed.clear()
    assert _refresh(view, ["n:ok\t3"]) == [("m/x", CUR)]  # the live bucket, every round
    assert parsed == []  # the same reply: the view already holds it
    assert view.windows["m/x"].bucket(CUR).count("ok") == 3  # type: ignore[union-attr]
    _refresh(view, ["n:ok\t4"])
    assert parsed == ["n:ok\t4"] and view.windows["m/x"].bucket(CUR).count("ok") == 4  # type: ignore[union-attr]


def test_after_its_own_flush_a_bucket_is_parsed_again_whatever_its_reply(monkeypatch: Any) -> None:
    """A flush retried after Redis had applied it (its reply lost) is merged into the view once more:
    the next read, though unchanged, must replace that view, not be skipped."""
    view = RemoteView(KeyLayout("P"), replica_id="A", bucket_s=BUCKET_S, max_window_s=20.0, settle_s=2.0,
                      max_reads=10)
    _refresh(view, [])
    _refresh(view, ["n:ok\t3", "", ""])
    parsed = counting_parses(monkeypatch)
    sent = EndpointWindows(BUCKET_S, 20.0)
    sent.set_bucket(CUR, ok_bucket(2))
    view.merge({"m/x": sent})
    assert view.windows["m/x"].bucket(CUR).count("ok") == 5  # type: ignore[union-attr]
    _refresh(view, ["n:ok\t3"])
    assert parsed == ["n:ok\t3"] and view.windows["m/x"].bucket(CUR).count("ok") == 3  # type: ignore[union-attr]


def test_replies_are_kept_only_while_their_bucket_can_change(monkeypatch: Any) -> None:
    view = RemoteView(KeyLayout("P"), replica_id="A", bucket_s=BUCKET_S, max_window_s=20.0, settle_s=2.0,
                      max_reads=10)
    _refresh(view, [])
    _refresh(view, ["n:ok\t3", "n:ok\t1", ""])
    assert set(view._replies) == {("m/x", CUR)}  # the settled ones had their final read
    later = NOW + 6.0  # bucket CUR ended 1 s ago, not yet settled: read again, unchanged
    parsed = counting_parses(monkeypatch)
    view.apply_refresh(view.queue_refresh(RecordingPipe(), later), [[("m/x", NOW)], ["A"], [], ["n:ok\t3"]], later)
    assert parsed == []
    settled = NOW + 8.0  # now it has settled: its final read is parsed, and not kept
    view.apply_refresh(view.queue_refresh(RecordingPipe(), settled), [[("m/x", NOW)], ["A"], [], ["n:ok\t3"]],
                       settled)
    assert parsed == ["n:ok\t3"] and view._replies == {}
