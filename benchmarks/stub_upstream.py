"""A chat-completions upstream cheap enough not to be what a benchmark measures (a few µs a request).

`python benchmarks/stub_upstream.py PORT` answers every POST on 127.0.0.1:PORT from prebuilt bytes:
a `chat.completion` JSON object, or -- when the body asks for `"stream":true` -- a 20-chunk SSE
stream (role chunk, 20 content chunks, a finish chunk, a usage chunk, `[DONE]`), chunked-encoded as
providers send it. A stream whose body names a model ending in `-paced` is paced as a model server
sends it: 10 writes 5 ms apart (PACED_CHUNKS, PACED_GAP_S), the head and the first token in the first,
the finish, usage and `[DONE]` in the last; the first token is no longer followed by the rest of the
answer in the same read. Raw asyncio on uvloop, keep-alive, no HTTP library: it parses only the request
line's headers and `content-length`.
"""

from __future__ import annotations

import asyncio
import json
import sys

import uvloop

MODEL = "upstream-bench"
CHUNKS = 20
PACED_CHUNKS = 10
PACED_GAP_S = 0.005


def _chunk(delta: dict[str, object], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    obj = {"id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": 1700000000, "model": MODEL,
           "choices": [choice]}
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def _sse_response() -> bytes:
    events = [_chunk({"role": "assistant", "content": ""})]
    events += [_chunk({"content": f"tok{i} "}) for i in range(CHUNKS)]
    events.append(_chunk({}, "stop"))
    usage = {"prompt_tokens": 12, "completion_tokens": CHUNKS, "total_tokens": 12 + CHUNKS}
    events.append(b"data: " + json.dumps({"id": "chatcmpl-stub", "object": "chat.completion.chunk",
                                          "created": 1700000000, "model": MODEL, "choices": [],
                                          "usage": usage}, separators=(",", ":")).encode() + b"\n\n")
    events.append(b"data: [DONE]\n\n")
    body = b"".join(b"%x\r\n%b\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"
    head = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
            b"transfer-encoding: chunked\r\n\r\n")
    return head + body


def _paced_writes() -> list[bytes]:
    """The paced stream's writes: each one HTTP chunk of the stream's events."""
    events = [[_chunk({"role": "assistant", "content": f"tok{i} "} if i == 0 else {"content": f"tok{i} "})]
              for i in range(PACED_CHUNKS)]
    usage = {"prompt_tokens": 12, "completion_tokens": PACED_CHUNKS, "total_tokens": 12 + PACED_CHUNKS}
    events[-1] += [_chunk({}, "stop"),
                   b"data: " + json.dumps({"id": "chatcmpl-stub", "object": "chat.completion.chunk",
                                           "created": 1700000000, "model": MODEL, "choices": [],
                                           "usage": usage}, separators=(",", ":")).encode() + b"\n\n",
                   b"data: [DONE]\n\n"]
    writes = [b"%x\r\n%b\r\n" % (len(b"".join(e)), b"".join(e)) for e in events]
    writes[0] = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
                 b"transfer-encoding: chunked\r\n\r\n") + writes[0]
    writes[-1] += b"0\r\n\r\n"
    return writes


def _json_response() -> bytes:
    completion = {"id": "chatcmpl-stub", "object": "chat.completion", "created": 1700000000, "model": MODEL,
                  "choices": [{"index": 0, "message": {"role": "assistant",
                                                       "content": "".join(f"tok{i} " for i in range(CHUNKS))},
                               "logprobs": None, "finish_reason": "stop"}],
                  "usage": {"prompt_tokens": 12, "completion_tokens": CHUNKS, "total_tokens": 12 + CHUNKS}}
    body = json.dumps(completion, separators=(",", ":")).encode()
    return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%b" % (len(body), body)


SSE = _sse_response()
JSON = _json_response()
PACED = _paced_writes()


class Stub(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        self.buffer = b""

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer + data if self.buffer else data
        while (end := buffer.find(b"\r\n\r\n")) >= 0:
            head = buffer[:end].lower()
            at = head.find(b"content-length:")
            length = int(head[at + 15:head.find(b"\r\n", at) if b"\r\n" in head[at:] else None]) if at >= 0 else 0
            if len(buffer) < end + 4 + length:
                break
            body = buffer[end + 4:end + 4 + length]
            buffer = buffer[end + 4 + length:]
            if b'"stream":true' not in body.replace(b" ", b""):
                self.transport.write(JSON)
            elif b'-paced"' in body:
                self._paced()
            else:
                self.transport.write(SSE)
        self.buffer = buffer

    def _paced(self) -> None:
        loop = asyncio.get_running_loop()
        self.transport.write(PACED[0])
        for i, data in enumerate(PACED[1:], 1):
            loop.call_later(i * PACED_GAP_S, self._write, data)

    def _write(self, data: bytes) -> None:
        if not self.transport.is_closing():
            self.transport.write(data)


async def serve(port: int) -> None:
    server = await asyncio.get_running_loop().create_server(Stub, "127.0.0.1", port, backlog=1024)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    uvloop.run(serve(int(sys.argv[1])))
