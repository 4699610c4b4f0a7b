"""aiohttp's connection, tuned for providers' streams: less Python per HTTP chunk.

A provider sends a stream as one HTTP chunk per event, 20-odd per network read. aiohttp handles each
chunk in Python several times over: its C parser calls the body reader's `begin_http_chunk_receiving`,
`feed_data` and `end_http_chunk_receiving`; reading takes the buffered chunks one by one
(`_read_nowait_chunk`), and after each the reader asks the protocol to `resume_reading()`, which re-ran
the parser on no data. Measured (benchmarks/instructions.py, JSON clients at c=8, the stub's 24
chunks sent as 24 or as one): ~12% of a request's instructions. Here:

- `StreamProtocol.resume_reading` does nothing unless reading is paused (a full buffer); then
  aiohttp's own resume runs.
- `StreamProtocol.data_received` parses a new response's head on its own, then makes the body
  reader aiohttp created for it a `LeanReader` before any of the body reaches it.
- `LeanReader` keeps no HTTP chunk boundaries (only `readchunk()` uses them; the gateway reads with
  `iter_any()`), and hands over everything buffered in one join. Flow control stays aiohttp's: it
  pauses the transport past its high water mark and is asked to resume once the buffer is read.

aiohttp offers no setting for either class (its C parser makes the reader with a class of its own;
`_factory` is how its connector makes protocols), so both lean on its internals: pyproject.toml bounds
aiohttp to the releases that have them (3.14: `resume_reading(resume_parser)`), the loopback tests in
tests/upstreams/test_aiohttp_tuned.py pin them, and `connector_class()` checks them once at start-up: where one
is missing (an install outside the bounds), the gateway runs aiohttp's stock classes (and sends its requests
through `ClientSession.post()`, not upstreams/aiohttp_post.py), slower but correct,
and says so in one warning, rather than fail with a TypeError in the middle of a stream.
"""

from __future__ import annotations

import functools
import inspect
import logging
from typing import Any

import aiohttp
from aiohttp.abc import AbstractCookieJar
from aiohttp.client_proto import ResponseHandler
from aiohttp.streams import StreamReader

_HEAD_END = b"\r\n\r\n"

log = logging.getLogger("ultraroute")


class LeanReader(StreamReader):
    """aiohttp's body reader without per-chunk bookkeeping. Made by changing the class of the
    reader aiohttp created (the same slots, so the same layout): no HTTP chunk boundaries are kept,
    and `readany()` (all that `iter_any()` calls) takes the whole buffer in one join."""

    __slots__ = ()

    def begin_http_chunk_receiving(self) -> None:
        pass

    def end_http_chunk_receiving(self) -> None:
        # aiohttp also pauses here past 1/16 of its limit in chunks, because taking many small chunks
        # one by one made a read dear; one join does not. Its pause by size (`feed_data`) still holds.
        pass

    def _read_nowait(self, n: int) -> bytes:
        buffer = self._buffer
        if n != -1 or self._buffer_offset or not buffer:  # a sized read, or one after it: aiohttp's
            return super()._read_nowait(n)
        self._timer.assert_timeout()
        data = buffer[0] if len(buffer) == 1 else b"".join(buffer)
        buffer.clear()
        self._size = 0
        self._cursor += len(data)
        if self._http_chunk_splits:  # boundaries of chunks read before the class changed: all behind us
            self._http_chunk_splits.clear()
        self._protocol.resume_reading()  # after the buffer is emptied: a resumed parser may refill it
        return data


class StreamProtocol(ResponseHandler):
    """aiohttp's connection protocol, with lean body readers and a `resume_reading()` that costs
    nothing when reading is not paused."""

    def data_received(self, data: bytes) -> None:
        current = self._payload
        if current is not None and not current.is_eof():  # more of the body being read: most reads
            super().data_received(data)
            return
        # A new response begins here. Its head alone first: parsing it creates the body's reader, which
        # is made lean before the rest of this read (often the whole body) is fed to it.
        end = data.find(_HEAD_END) + len(_HEAD_END)
        if len(_HEAD_END) <= end < len(data):
            super().data_received(data[:end])
            self._make_lean()
            if self.exception() is not None:  # a malformed head: the connection is already closed
                return
            data = data[end:]
        super().data_received(data)
        self._make_lean()  # a head that ended exactly here, or in a later read

    def _make_lean(self) -> None:
        payload = self._payload
        if type(payload) is StreamReader and not payload.is_eof():
            payload.__class__ = LeanReader

    def resume_reading(self, resume_parser: bool = True) -> None:
        # aiohttp's reader asks for this after every chunk it hands over; each call re-ran the HTTP
        # parser on no data and resumed a transport that was never paused.
        if self._reading_paused or getattr(self, "_buffer_paused", False):  # (not in every aiohttp 3.x)
            super().resume_reading(resume_parser)


class StreamConnector(aiohttp.TCPConnector):
    """aiohttp's connector, making `StreamProtocol`s: `_factory` is what aiohttp's own connector makes
    its protocols with, and has no public setting."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._factory = functools.partial(StreamProtocol, loop=self._loop)


# What the classes above touch of aiohttp's, by where it lives.
_READER_SLOTS = ("_buffer", "_buffer_offset", "_size", "_cursor", "_http_chunk_splits", "_timer", "_protocol")
_READER_METHODS = ("_read_nowait", "begin_http_chunk_receiving", "end_http_chunk_receiving", "is_eof")
_HANDLER_FIELDS = ("_payload", "_reading_paused")  # set in its (or its bases') __init__, not on the class
# What upstreams/aiohttp_post.py's requests (sent with the tuned classes) touch.
_SESSION_FIELDS = ("_read_bufsize", "_max_line_size", "_max_field_size", "_max_headers", "_response_class")
_RESPONSE_PARAMS = ("timer", "read_until_eof", "auto_decompress", "read_timeout", "read_bufsize",
                    "timeout_ceil_threshold", "max_line_size", "max_field_size", "max_headers")


def missing_internals() -> list[str]:
    """The aiohttp internals the tuned classes rely on that this aiohttp lacks (none on a release
    pyproject.toml allows). Read from the classes and their `__init__` code, without making any."""
    missing = [f"StreamReader.{name}" for name in _READER_SLOTS if name not in getattr(StreamReader, "__slots__", ())]
    missing += [f"StreamReader.{name}()" for name in _READER_METHODS if not hasattr(StreamReader, name)]
    handler_init = {name for cls in ResponseHandler.__mro__ if "__init__" in vars(cls)
                    and hasattr(cls.__init__, "__code__") for name in cls.__init__.__code__.co_names}
    missing += [f"ResponseHandler.{name}" for name in _HANDLER_FIELDS if name not in handler_init]
    if "resume_parser" not in inspect.signature(ResponseHandler.resume_reading).parameters:
        missing.append("ResponseHandler.resume_reading(resume_parser)")
    if "_factory" not in aiohttp.BaseConnector.__init__.__code__.co_names:
        missing.append("BaseConnector._factory")
    return missing + _missing_for_posts()


def _missing_for_posts() -> list[str]:
    session_init = aiohttp.ClientSession.__init__.__code__.co_names
    missing = [f"ClientSession.{name}" for name in _SESSION_FIELDS if name not in session_init]
    if "_timeout_ceil_threshold" not in aiohttp.BaseConnector.__init__.__code__.co_names:
        missing.append("BaseConnector._timeout_ceil_threshold")
    params = inspect.signature(ResponseHandler.set_response_params).parameters
    missing += [f"ResponseHandler.set_response_params({name})" for name in _RESPONSE_PARAMS if name not in params]
    if "stream_writer" not in inspect.signature(aiohttp.ClientResponse.__init__).parameters:
        missing.append("ClientResponse(stream_writer)")
    if not hasattr(aiohttp.ClientResponse, "_raw_cookie_headers"):
        missing.append("ClientResponse._raw_cookie_headers")
    if not hasattr(AbstractCookieJar, "update_cookies_from_headers"):
        missing.append("AbstractCookieJar.update_cookies_from_headers()")
    return missing


def connector_class() -> type[aiohttp.TCPConnector]:
    """The connector class for providers' sessions: the tuned one, or, where this aiohttp lacks
    what it relies on, aiohttp's own (with one warning). Called once, when the gateway starts."""
    missing = missing_internals()
    if not missing:
        return StreamConnector
    log.warning("aiohttp %s lacks %s: provider streams run on aiohttp's stock classes (slower); "
                "install the aiohttp pyproject.toml allows", aiohttp.__version__, ", ".join(missing))
    return aiohttp.TCPConnector
