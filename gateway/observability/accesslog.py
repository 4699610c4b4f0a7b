"""Structured access log: one JSON line per request (of any client API, named in `api`), on the
logger `ultraroute.access`.

Does: build the line for a served request (`served()`, from the pipeline's `finish()`, with the
served attempt's sample), for one that failed with no served attempt (`failed()`, from the app's
error rendering), or for a background probe of an open circuit or a warm-up completion (`probe()`,
marked `"probe": true`); append it to a buffer that a background thread encodes and writes out in
batches (every `FLUSH_S`), so the write to stdout never happens on the event loop and a request costs
no thread wake-up. (A `QueueHandler` per line woke the writer thread for every request: ~20% of the gateway's CPU under
load, most of it the two threads trading the GIL.)
Does not: log prompt or completion text, headers, or anything that could hold a key. Nothing here
reads the request body; the fields are ids, figures and bounded labels.

Where the lines go: when `start()` finds the logger `ultraroute.access` without handlers, to its own
batch writer (one JSON object per line on stdout). A deployment that configures the logger itself (a
file handler, level WARNING to silence it) keeps its configuration: lines then go through `logging`.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TextIO

import orjson

from gateway.config import Endpoint
from gateway.errors import AllCandidatesFailed, ClientClosed, GatewayError
from gateway.telemetry.sample import AttemptSample

if TYPE_CHECKING:
    from gateway.dispatch import Served

LOGGER_NAME = "ultraroute.access"
FLUSH_S = 0.1  # how long a line may wait in memory before it is written


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


Entry = Callable[[], dict[str, Any]]  # builds one line's fields; called off the event loop


class _BatchWriter:
    """Entries appended on the event loop (a list append, atomic under the GIL), then encoded and
    written by a daemon thread every `FLUSH_S` in one write, and once more on `stop()`. An entry is a
    function over values fixed when the request ended: building the JSON line (a timestamp, a dict
    of twenty fields, the encoding) is the thread's work, not the request's."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._entries: list[Entry] = []
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="access-log", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def append(self, entry: Entry) -> None:
        self._entries.append(entry)

    def _flush(self) -> None:
        entries, self._entries = self._entries, []
        if entries:
            self._stream.write("\n".join(_line(entry) for entry in entries) + "\n")
            self._stream.flush()

    def _run(self) -> None:
        while not self._stopping.wait(FLUSH_S):
            self._flush()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join()
        self._flush()


class AccessLog:
    def __init__(self, stream: TextIO | None = None, logger_name: str = LOGGER_NAME) -> None:
        self.logger = logging.getLogger(logger_name)
        self._stream = stream
        self._writer: _BatchWriter | None = None
        # A non-streaming request that breaks after its first token is logged by `served()` and then
        # rendered as an error: `failed()` must not log it twice. Weak, so nothing outlives the request.
        self._logged_failures: weakref.WeakSet[BaseException] = weakref.WeakSet()

    # -- lifecycle (the app's lifespan) ---------------------------------------------------------
    def start(self) -> None:
        if self.logger.handlers:
            return  # configured by the deployment
        self.logger.setLevel(logging.INFO)
        self.logger.propagate = False
        self._writer = _BatchWriter(self._stream if self._stream is not None else sys.stdout)
        self._writer.start()

    def stop(self) -> None:
        """Write what is buffered and stop the writer (idempotent)."""
        if self._writer is not None:
            self._writer.stop()
            self._writer = None

    # -- lines ----------------------------------------------------------------------------------
    def served(self, request_id: str, served: Served, sample: AttemptSample, status: int,
               failure: BaseException | None, key_id: str | None = None, usage_estimated: bool = False,
               api: str = "chat", earlier: Sequence[tuple[str, AttemptSample]] = (),
               dropped: tuple[str, ...] = (), transport: str = "http") -> None:
        """The request an endpoint served (fully, or until it broke (`failure`) or the client left);
        `key_id`: the client key's id (never its secret), None in open mode; `usage_estimated`: the
        upstream sent no usage, so the tokens are the gateway's estimate; `api`: the client API it came
        in by (chat, responses, messages, completions, embeddings); `earlier`: attempts (endpoint id,
        sample) whose streams broke before this one continued the answer. `tokens` and `cost_usd` are
        the whole request's (what the key was charged); with `earlier`, `attempt_costs` lists each
        attempt's; `dropped`: the client API fields the endpoint did not get (`x-ultraroute-dropped`);
        `transport`: "http", or "websocket" for a response on a Responses WebSocket (a line per response)."""
        if failure is not None:
            self._logged_failures.add(failure)
        if not self.logger.isEnabledFor(logging.INFO):
            return
        endpoint = served.stream.endpoint
        at = time.time()
        hops = [(hop.endpoint_id, hop.reason) for hop in (*served.skips, *served.attempts)]
        charged = (*earlier, (endpoint.id, sample))
        self._emit(lambda: {
            "ts": _timestamp(at),
            "request_id": request_id,
            "api": api,
            "transport": transport,
            "key": key_id,
            "model": endpoint.model,
            "endpoint": endpoint.id,
            "provider": endpoint.provider.name,
            "tier": endpoint.tier.value,
            "served_tier": served.stream.served_tier,  # as the provider reported it (None: it did not)
            "attempts": len(served.attempts) + 1,
            "fallback": [{"endpoint": endpoint_id, "reason": reason} for endpoint_id, reason in hops],
            "status": status,
            "outcome": sample.outcome.value,
            "ttft_ms": _ms(sample.ttft_s),
            "ttfat_ms": _ms(sample.ttfat_s),
            "duration_ms": _ms(sample.e2e_s),
            "decode_tps": None if sample.decode_tps is None else round(sample.decode_tps, 1),
            "tokens": _tokens([s for _, s in charged]),
            "cost_usd": round(sum(s.cost_usd for _, s in charged), 8),
            "usage_estimated": usage_estimated or bool(earlier),
            "dropped": list(dropped),
            **({"attempt_costs": [{"endpoint": endpoint_id, "tokens": _tokens([s]), "cost_usd": round(s.cost_usd, 8)}
                                  for endpoint_id, s in charged]} if earlier else {}),
        })

    def failed(self, request_id: str, err: GatewayError, model: str | None = None, api: str = "chat",
               transport: str = "http") -> None:
        """A request no endpoint served: rejected before routing, or every candidate failed. `model`:
        as the request named it, None when it was refused before its body was read. A client that hung
        up mid-upload (`ClientClosed`) has outcome `cancelled`, as one that hangs up later."""
        if err in self._logged_failures or not self.logger.isEnabledFor(logging.INFO):
            return
        failures = list(err.failures) if isinstance(err, AllCandidatesFailed) else []
        at = time.time()
        self._emit(lambda: {
            "ts": _timestamp(at),
            "request_id": request_id,
            "api": api,
            "transport": transport,
            "model": model,
            "endpoint": failures[-1][0] if failures else None,
            "attempts": len(failures),
            "fallback": [{"endpoint": endpoint_id, "reason": e.metric_label} for endpoint_id, e in failures],
            "status": err.status,
            "outcome": "cancelled" if isinstance(err, ClientClosed) else "error",
            "error": err.metric_label,
        })

    def probe(self, endpoint: Endpoint, sample: AttemptSample) -> None:
        """A background probe of an open circuit (health/probe.py) or a warm-up completion (health/warm_up.py):
        not a client request, so no request id or key; `"probe": true` tells it apart."""
        if not self.logger.isEnabledFor(logging.INFO):
            return
        at = time.time()
        self._emit(lambda: {
            "ts": _timestamp(at),
            "probe": True,
            "model": endpoint.model,
            "endpoint": endpoint.id,
            "provider": endpoint.provider.name,
            "tier": endpoint.tier.value,
            "status": sample.status,
            "outcome": sample.outcome.value,
            "ttft_ms": _ms(sample.ttft_s),
            "duration_ms": _ms(sample.e2e_s),
            "cost_usd": round(sample.cost_usd, 8),
        })

    def _emit(self, entry: Entry) -> None:
        if self._writer is not None:
            self._writer.append(entry)
        else:
            self.logger.info(_line(entry))


def _line(entry: Entry) -> str:
    return orjson.dumps(entry()).decode()


def _tokens(samples: Sequence[AttemptSample]) -> dict[str, int]:
    return {"input": sum(s.input_tokens for s in samples), "cached_input": sum(s.cached_input_tokens for s in samples),
            "output": sum(s.output_tokens for s in samples), "reasoning": sum(s.reasoning_tokens for s in samples)}


def _timestamp(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds")
