"""A chat-completions upstream cheap enough not to be what a benchmark measures (a few µs a request).

`python benchmarks/stub_upstream.py PORT` answers every POST on 127.0.0.1:PORT from prebuilt bytes:
a `chat.completion` JSON object, or -- when the body asks for `"stream":true` -- a 20-chunk SSE
stream (role chunk, 20 content chunks, a finish chunk, a usage chunk, `[DONE]`), chunked-encoded as
providers send it. A stream whose body names a model ending in `-paced` is paced as a model server
sends it: 10 writes 5 ms apart (PACED_CHUNKS, PACED_GAP_S), the head and the first token in the first,
the finish, usage and `[DONE]` in the last; the first token is no longer followed by the rest of the
answer in the same read.

`POST /v1/messages` (Anthropic Messages) and `POST /v1/responses` (OpenAI Responses) get those APIs'
own answers, with the same 20 tokens, 12 prompt tokens and 20 output tokens, so a pass-through
request is measured against a chat one fairly: a `message` or `response` object, or their real event
sequences -- message_start (usage with `speed`), ping, content_block_start, 20 content_block_delta
(text_delta), content_block_stop, message_delta (stop_reason, usage with `speed`), message_stop;
response.created, response.in_progress, output_item.added, content_part.added, 20
response.output_text.delta, output_text.done, content_part.done, output_item.done, response.completed
(usage, `service_tier`). Each event is one HTTP chunk, as for chat. Raw asyncio on uvloop, keep-alive,
no HTTP library: it parses only the request line, the headers' `content-length` and whether the body
asks for `"stream":true`.
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


def _named(kind: str, payload: dict[str, object]) -> bytes:
    """An event as Anthropic and OpenAI Responses send them: its type named, then its data line."""
    return b"event: " + kind.encode() + b"\ndata: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def _stream(events: list[bytes]) -> bytes:
    body = b"".join(b"%x\r\n%b\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"
    head = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
            b"transfer-encoding: chunked\r\n\r\n")
    return head + body


def _json(obj: dict[str, object]) -> bytes:
    body = json.dumps(obj, separators=(",", ":")).encode()
    return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%b" % (len(body), body)


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
    return _stream(events)


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
    return _json(completion)


TEXT = "".join(f"tok{i} " for i in range(CHUNKS))


def _message_usage(output: int) -> dict[str, object]:
    return {"input_tokens": 12, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
            "output_tokens": output, "service_tier": "standard", "speed": "standard"}


def _message(content: list[dict[str, object]], stop: str | None, output: int) -> dict[str, object]:
    return {"id": "msg_stub", "type": "message", "role": "assistant", "model": MODEL, "content": content,
            "stop_reason": stop, "stop_sequence": None, "usage": _message_usage(output)}


def _messages_sse() -> bytes:
    events = [_named("message_start", {"type": "message_start", "message": _message([], None, 1)}),
              _named("ping", {"type": "ping"}),
              _named("content_block_start", {"type": "content_block_start", "index": 0,
                                             "content_block": {"type": "text", "text": ""}})]
    events += [_named("content_block_delta", {"type": "content_block_delta", "index": 0,
                                              "delta": {"type": "text_delta", "text": f"tok{i} "}})
               for i in range(CHUNKS)]
    events += [_named("content_block_stop", {"type": "content_block_stop", "index": 0}),
               _named("message_delta", {"type": "message_delta",
                                        "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                                        "usage": _message_usage(CHUNKS)}),
               _named("message_stop", {"type": "message_stop"})]
    return _stream(events)


def _response(status: str, output: list[dict[str, object]]) -> dict[str, object]:
    out: dict[str, object] = {
        "id": "resp_stub", "object": "response", "created_at": 1700000000, "status": status, "model": MODEL,
        "output": output, "error": None, "incomplete_details": None, "instructions": None, "metadata": {},
        "parallel_tool_calls": True, "temperature": 1.0, "top_p": 1.0, "tool_choice": "auto", "tools": [],
        "service_tier": "default", "store": False}
    if status == "completed":
        out["usage"] = {"input_tokens": 12, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": CHUNKS,
                        "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 12 + CHUNKS}
    return out


_PART = {"type": "output_text", "text": TEXT, "annotations": []}
_ITEM = {"id": "msg_stub", "type": "message", "role": "assistant", "status": "completed", "content": [_PART]}


def _responses_sse() -> bytes:
    kinds_fields: list[tuple[str, dict[str, object]]] = [
        ("response.created", {"response": _response("in_progress", [])}),
        ("response.in_progress", {"response": _response("in_progress", [])}),
        ("response.output_item.added", {"output_index": 0, "item": {**_ITEM, "status": "in_progress",
                                                                    "content": []}}),
        ("response.content_part.added", {"item_id": "msg_stub", "output_index": 0, "content_index": 0,
                                         "part": {**_PART, "text": ""}})]
    kinds_fields += [("response.output_text.delta", {"item_id": "msg_stub", "output_index": 0, "content_index": 0,
                                                     "delta": f"tok{i} ", "logprobs": []}) for i in range(CHUNKS)]
    kinds_fields += [
        ("response.output_text.done", {"item_id": "msg_stub", "output_index": 0, "content_index": 0, "text": TEXT,
                                       "logprobs": []}),
        ("response.content_part.done", {"item_id": "msg_stub", "output_index": 0, "content_index": 0,
                                        "part": _PART}),
        ("response.output_item.done", {"output_index": 0, "item": _ITEM}),
        ("response.completed", {"response": _response("completed", [_ITEM])})]
    return _stream([_named(kind, {"type": kind, **fields, "sequence_number": n})
                    for n, (kind, fields) in enumerate(kinds_fields)])


SSE = _sse_response()
JSON = _json_response()
PACED = _paced_writes()
# By the request line's path: (JSON answer, SSE answer); any other path gets chat's.
NATIVE = {b"/v1/messages": (_json(_message([{"type": "text", "text": TEXT}], "end_turn", CHUNKS)), _messages_sse()),
          b"/v1/responses": (_json(_response("completed", [_ITEM])), _responses_sse())}


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
            path = head[5:head.find(b" ", 5)].partition(b"?")[0]  # `post /v1/... http/1.1`
            native = NATIVE.get(path)
            stream = b'"stream":true' in body.replace(b" ", b"")
            if native is not None:
                self.transport.write(native[stream])
            elif not stream:
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
