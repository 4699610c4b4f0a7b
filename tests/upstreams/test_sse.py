import random

from gateway.upstreams.sse import SSEDecoder


def test_split_across_reads_crlf_comments_and_multiline() -> None:
    d = SSEDecoder()
    assert d.feed(b'data: {"a"') == []
    assert d.feed(b': 1}\n\ndata: [DONE]\n\n') == [b'{"a": 1}', b"[DONE]"]
    assert d.feed(b": keep-alive\r\n\r\ndata: x\r\ndata: y\r\n\r\n") == [b"x\ny"]
    assert d.feed(b"data: partial") == [] and d.pending == b"data: partial"


def _by_the_spec(stream: bytes) -> list[bytes]:
    """The data of each complete event, read line by line as the SSE spec says (the reference)."""
    payloads, lines = [], []
    for line in stream.replace(b"\r\n", b"\n").split(b"\n")[:-1]:  # the part after the last newline is unfinished
        if line == b"":
            if lines:
                payloads.append(b"\n".join(lines))
            lines = []
        elif line.startswith(b"data:"):
            lines.append(line[5:].removeprefix(b" "))
    return payloads


def test_every_shape_of_read_decodes_as_the_spec_says() -> None:
    """Reads of one-line `data:` events, and of `event:` + one `data:` line events (Anthropic's and
    OpenAI Responses'), take fast paths; any read with something else in it (a comment, a multi-line
    or empty event, `data:` without its space, an event line without data, CRLF) must decode the same
    as a line-by-line reading, wherever the reads are cut (also between a CR and its LF)."""
    rng = random.Random(7)
    shapes = [b'data: {"n":%d}\n\n', b"data: [DONE]\n\n", b": keep-alive\n\n", b"data: a\ndata: b%d\n\n",
              b"\n\n", b'data:{"n":%d}\n\n', b"event: x\ndata: %d\n\n", b"data: %d\r\n\r\n", b"data: \n\n",
              b"event: x\n\n", b"event: x\ndata:%d\n\n", b"event: x\ndata: a\ndata: %d\n\n",
              b"event: x\nid: %d\n\n", b"event: x\ndata: \n\n", b"event: x\ndata: %d\r\n\r\n",
              b"data: a event: x\ndata: %d\n\n"]
    named = b'event: content_block_delta\ndata: {"type":"content_block_delta","n":%d}\n\n'
    for _ in range(600):
        common = rng.random()  # a third of the streams are one-line data events only, a third named ones
        events = [(shapes[0] if common < 1 / 3 else named if common < 2 / 3 and rng.random() < 0.9
                   else rng.choice(shapes)).replace(b"%d", str(i).encode())
                  for i in range(rng.randint(1, 30))]
        stream = b"".join(events) + (b"data: unfinished" if rng.random() < 0.3 else b"")
        cuts = sorted(rng.sample(range(1, len(stream)), min(len(stream) - 1, rng.randint(0, 4))))
        decoder, got = SSEDecoder(), []
        for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True):
            got += decoder.feed(stream[start:end])
        assert got == _by_the_spec(stream), stream
