from gateway.sse import SSEDecoder


def test_split_across_reads_crlf_comments_and_multiline() -> None:
    d = SSEDecoder()
    assert d.feed(b'data: {"a"') == []
    assert d.feed(b': 1}\n\ndata: [DONE]\n\n') == [b'{"a": 1}', b"[DONE]"]
    assert d.feed(b": keep-alive\r\n\r\ndata: x\r\ndata: y\r\n\r\n") == [b"x\ny"]
    assert d.feed(b"data: partial") == [] and d.pending == b"data: partial"
