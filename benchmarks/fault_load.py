"""The fault run's clients: N threads, each with one keep-alive connection, asking until told to stop.

Each request is a chat completion with `max_tokens` set, streamed (with `stream_options.include_usage`)
or not, half of them asking for the fast tier. What the client saw is kept as a `Record`: the tokens it
received (the simulator's tokens are words), the usage it was given, the finish reason, whether a
stream carried an error event, and how it ended. Judging the records is `fault_run.py`'s job.

Does not: assert anything (this runs in background threads), retry, or look at the gateway's logs.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

MAX_TOKENS = (4, 60)  # drawn per request; the simulator's answer then has exactly that many tokens


@dataclass
class Record:
    """One request, as its client saw it."""

    client: int
    started: float  # time.monotonic()
    stream: bool
    fast: bool
    max_tokens: int
    ended: float = 0.0
    status: int | None = None  # None: no HTTP answer at all (the connection failed)
    transport: str = ""  # the exception's class name when the connection failed
    connect_failed: bool = False  # nothing was sent: the connection was refused
    text: str = ""
    finish: str | None = None
    usage: dict[str, Any] | None = None
    error_event: bool = False  # a stream that carried an `error` object
    done: bool = False  # a stream's `data: [DONE]`
    endpoint: str = ""  # x-ultraroute-endpoint
    error_code: str = ""
    retry_after_s: float = 0.0

    @property
    def tokens(self) -> int:
        return len(self.text.split())


@dataclass
class Load:
    """`clients` threads sending requests to `base_url` with `key` until `stop()`."""

    base_url: str
    key: str
    clients: int = 16
    seed: int = 1
    records: list[Record] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        for i in range(self.clients):
            thread = threading.Thread(target=self._client, args=(i,), name=f"fault-client-{i}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout_s: float = 60.0) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout_s)

    def _client(self, index: int) -> None:
        rng = random.Random(self.seed * 1000 + index)
        # One connection per client (a keep-alive client stays with the worker that accepted it).
        with httpx.Client(base_url=self.base_url, timeout=httpx.Timeout(60.0, connect=5.0),
                          headers={"authorization": f"Bearer {self.key}"},
                          limits=httpx.Limits(max_connections=1)) as http:
            n = 0
            while not self._stop.is_set():
                record = Record(client=index, started=time.monotonic(), stream=rng.random() < 0.5,
                                fast=rng.random() < 0.5, max_tokens=rng.randint(*MAX_TOKENS))
                body: dict[str, Any] = {
                    "model": "m", "max_tokens": record.max_tokens, "stream": record.stream,
                    "messages": [{"role": "user", "content": f"client {index} question {n}: tell me a story"}]}
                if record.stream:
                    body["stream_options"] = {"include_usage": True}
                if record.fast:
                    body["speed"] = "fast"
                _ask(http, body, record)
                record.ended = time.monotonic()
                with self._lock:
                    self.records.append(record)
                n += 1
                if record.status is None:
                    time.sleep(0.05)  # a refused connection: do not spin
                elif record.status in (429, 503) and record.retry_after_s:
                    # As the official SDKs do: a 503 `shutting_down` or `overloaded` says when to come back.
                    self._stop.wait(min(record.retry_after_s, 2.0))


def _ask(http: httpx.Client, body: dict[str, Any], record: Record) -> None:
    try:
        with http.stream("POST", "/chat/completions", json=body) as response:
            record.status = response.status_code
            record.endpoint = response.headers.get("x-ultraroute-endpoint", "")
            if response.status_code != 200:
                response.read()
                record.retry_after_s = float(response.headers.get("retry-after") or 0)
                record.error_code = _error_code(response.content)
            elif record.stream:
                _read_stream(response, record)
            else:
                _read_json(response.read(), record)
    except httpx.ConnectError as err:
        record.transport, record.connect_failed = type(err).__name__, True
    except httpx.TransportError as err:  # reset, closed mid-answer, timed out
        record.transport = type(err).__name__


def _read_stream(response: httpx.Response, record: Record) -> None:
    parts: list[str] = []
    for line in response.iter_lines():
        if not line.startswith("data: "):
            continue
        data = line[6:]
        if data == "[DONE]":
            record.done = True
            continue
        event = orjson.loads(data)
        if event.get("error"):
            record.error_event = True
            record.error_code = str(event["error"].get("code") or event["error"].get("type") or "")
        if event.get("usage"):
            record.usage = event["usage"]
        for choice in event.get("choices") or ():
            parts.append((choice.get("delta") or {}).get("content") or "")
            record.finish = choice.get("finish_reason") or record.finish
    record.text = "".join(parts)


def _read_json(content: bytes, record: Record) -> None:
    answer = orjson.loads(content)
    record.usage = answer.get("usage")
    choice = (answer.get("choices") or [{}])[0]
    record.text = (choice.get("message") or {}).get("content") or ""
    record.finish = choice.get("finish_reason")


def _error_code(content: bytes) -> str:
    try:
        error = orjson.loads(content).get("error") or {}
    except (orjson.JSONDecodeError, AttributeError):
        return "unparsable"
    return str(error.get("code") or error.get("type") or "")
