"""Server-sent events: split an upstream byte stream into `data:` payloads, and write them back out.

Providers send `data: {json}\\n\\n` events (sometimes with `\\r\\n`, comments or multi-line data).
`SSEDecoder.feed()` takes whatever bytes a network read produced and returns the complete payloads;
a partial event waits for the next read. It does not interpret the JSON.
"""

from __future__ import annotations

DONE = b"[DONE]"
DONE_EVENT = b"data: [DONE]\n\n"


class SSEDecoder:
    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> list[bytes]:
        if b"\r" in data:
            data = data.replace(b"\r\n", b"\n")
        buffer = self._buffer + data if self._buffer else data
        if b"\n\n" not in buffer:
            self._buffer = buffer
            return []
        *events, self._buffer = buffer.split(b"\n\n")
        payloads: list[bytes] = []
        for event in events:
            if not event:
                continue
            if event.startswith(b"data: ") and b"\n" not in event:  # the common case, one line
                payloads.append(event[6:])
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
