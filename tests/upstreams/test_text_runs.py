"""`text_runs`: a JSON client's runs of text chunks decoded in one call, read by `UpstreamStream`
as they would be chunk by chunk (the same answer, tokens and usage), in fewer chunks."""

from __future__ import annotations

import time
from typing import Any

import orjson

from gateway.config import Endpoint
from gateway.relay import collect
from gateway.upstreams.stream import Meter, UpstreamStream
from gateway.upstreams.text_runs import text_run
from tests.upstreams.test_stream import ScriptedResponse, chunk, event
from tests.upstreams.test_stream import endpoint as endpoint  # the fixture

USAGE = event({"id": "c1", "object": "chat.completion.chunk", "model": "up", "choices": [],
               "usage": {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}})


def answer_of(*texts: str) -> bytes:
    """A whole answer in one read: role chunk, a text chunk per text, finish, usage, [DONE]."""
    return b"".join([chunk({"role": "assistant", "content": ""}), *(chunk({"content": t}) for t in texts),
                     chunk({}, "stop"), USAGE, event("[DONE]")])


async def read_all(endpoint: Endpoint, *reads: bytes, joins_text: bool) -> tuple[UpstreamStream, list[Any]]:
    stream = UpstreamStream(endpoint, ScriptedResponse(*reads), Meter(t_sent=time.perf_counter()), stall_s=5.0,
                            joins_text=joins_text)
    await stream.open_gate(5.0)
    chunks = []
    while (batch := await stream.next_batch()) is not None:
        chunks += [c for _, c in batch]
    return stream, chunks


async def both_ways(endpoint: Endpoint, *reads: bytes) -> tuple[list[Any], list[Any]]:
    """The chunks read chunk by chunk and with runs joined, after checking the meters agree."""
    apart, apart_chunks = await read_all(endpoint, *reads, joins_text=False)
    joined, joined_chunks = await read_all(endpoint, *reads, joins_text=True)
    assert "".join(joined.answer) == "".join(apart.answer)
    for field in ("token_chunks", "usage", "done", "malformed"):
        assert getattr(joined.meter, field) == getattr(apart.meter, field), field
    return apart_chunks, joined_chunks


def contents(chunks: list[Any]) -> list[str]:
    return [c["choices"][0]["delta"].get("content") for c in chunks if c.get("choices")]


async def test_a_run_of_text_chunks_becomes_one_chunk_with_the_same_answer_and_tokens(endpoint: Endpoint) -> None:
    texts = ["Hel", "lo", ", wor", "ld \u00e9\U0001f600", ' "quoted" \\ \n', "end"]
    apart, joined = await both_ways(endpoint, answer_of(*texts))
    assert contents(apart) == ["", *texts, None]
    # The first text chunk as sent; the rest of the run joined into one chunk that is the first one
    # but for its text (id, model, finish_reason as the upstream sent them).
    assert contents(joined) == ["", "Hel", "".join(texts[1:]), None]
    assert joined[2] == {**apart[2], "choices": [{**apart[2]["choices"][0], "delta": {"content": "".join(texts[1:])}}]}
    assert len(joined) == len(apart) - len(texts) + 2


async def test_a_json_answer_assembled_from_joined_runs_is_the_same(endpoint: Endpoint) -> None:
    read = answer_of(*(f"tok{i} " for i in range(20)))
    answers = []
    for joins in (False, True):
        stream = UpstreamStream(endpoint, ScriptedResponse(read), Meter(t_sent=time.perf_counter()), stall_s=5.0,
                                joins_text=joins)
        await stream.open_gate(5.0)
        answers.append(await collect(stream, "m"))
    assert answers[0] == answers[1]
    assert answers[1]["choices"][0]["message"]["content"] == "".join(f"tok{i} " for i in range(20))


async def test_runs_that_do_not_decode_as_one_string_are_read_chunk_by_chunk(endpoint: Endpoint) -> None:
    good = chunk({"content": "a"})
    malformed = good.replace(b'"a"', b'"b\\"', 1)  # its closing quote escaped: not JSON
    ends_in_backslash = good.replace(b'"a"', b'"c\\\\"', 1)  # text `c\`: would join its neighbour's escape
    unescaped_quote = good.replace(b'"a"', b'"a"b"', 1)  # in the run's form, but not JSON: the run does not decode
    for odd in (malformed, ends_in_backslash, unescaped_quote):
        apart, joined = await both_ways(endpoint, good + odd + good + good + event("[DONE]"))
        assert contents(joined) == contents(apart)


async def test_chunks_in_other_forms_are_read_chunk_by_chunk(endpoint: Endpoint) -> None:
    varied = b"".join(chunk({"content": f"t{i}"}, obfuscation="x" * i) for i in range(4))  # a field per chunk
    logprobs = b"".join(event({"id": "c1", "choices": [{"index": 0, "delta": {"content": "t"},
                                                        "logprobs": {"content": [{"token": "t"}]}}]})
                        for _ in range(3))
    two_fields = b"".join(chunk({"content": "t", "role": "assistant"}) for _ in range(3))
    for read in (varied, logprobs, two_fields):
        apart, joined = await both_ways(endpoint, read + event("[DONE]"))
        assert joined == apart


def test_a_run_stops_at_the_first_chunk_in_another_form() -> None:
    payloads = [orjson.dumps({"id": "c1", "choices": [{"index": 0, "delta": {"content": t}}]}) for t in "abc"]
    payloads.append(orjson.dumps({"id": "c1", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
    run = text_run(payloads, 1, payloads[0], orjson.loads(payloads[0]))
    assert run is not None and run.count == 2 and run.text == "bc"
