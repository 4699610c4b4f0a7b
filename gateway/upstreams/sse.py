"""Server-sent events: split an upstream byte stream into `data:` payloads, and write them back out.

Providers send `data: {json}\\n\\n` events (sometimes with `\\r\\n`, comments or multi-line data).
`SSEDecoder.feed()` takes whatever bytes a network read produced and returns the complete payloads;
a partial event waits for the next read. It does not interpret the JSON.
"""

from __future__ import annotations

import re

DONE = b"[DONE]"
# An `event:` and a `data: ` line (`.`: anything but a newline).
_NAMED = re.compile(rb"^event: .*\ndata: (.*)\n\n", re.MULTILINE)
DONE_EVENT = b"data: [DONE]\n\n"


class SSEDecoder:
    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> list[bytes]:
        buffer = self._buffer + data if self._buffer else data
        if buffer.find(b"\r") >= 0:  # CRLF line ends, made LF; over the buffer: a read may end between the two
            buffer = buffer.replace(b"\r\n", b"\n")
        end = buffer.rfind(b"\n\n")
        if end < 0:
            self._buffer = buffer
            return []
        events, self._buffer = buffer[:end], buffer[end + 2:]
        # The common read: one-line `data: ` events only. Split on the boundaries themselves; the
        # newline count proves there was nothing else (a comment, a multi-line event, an empty one).
        # Per event this is ~4x cheaper than the general walk below, and a read holds ~20 events.
        if events.startswith(b"data: "):
            payloads = events[6:].split(b"\n\ndata: ")
            if events.count(b"\n") == 2 * (len(payloads) - 1):
                return payloads
        elif events.startswith(b"event: "):
            # Anthropic's and OpenAI Responses' read: events of two lines, `event: <type>` and one
            # `data: ` line. One regex pass splits the read into each event's data and what lies
            # between the events: all of it empty proves the read holds nothing else (a third line, an
            # empty event), with no newline count (which costs about as much as the regex pass).
            parts = _NAMED.split(events + b"\n\n")
            if not any(parts[::2]):
                return parts[1::2]
        payloads = []
        for event in events.split(b"\n\n"):
            if not event:
                continue
            data_lines = [
                line[5:].removeprefix(b" ") for line in event.split(b"\n") if line.startswith(b"data:")
            ]
            if data_lines:
                payloads.append(b"\n".join(data_lines))
        return payloads

    @property
    def pending(self) -> bytes:
        """Bytes of an event not yet terminated (what a stream that ends abruptly leaves behind)."""
        return self._buffer


def encode_event(payload: bytes) -> bytes:
    return b"data: " + payload + b"\n\n"
