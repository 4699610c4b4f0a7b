"""Structured access log: one JSON line per chat completion, on the logger `ultraroute.access`.

Does: build the line for a served request (`served()`, from the pipeline's `finish()`, with the
served attempt's sample) or for one that failed with no served attempt (`failed()`, from the app's
error rendering); hand it to a queue so the write to stdout happens on a background thread, never
on the event loop.
Does not: log prompt or completion text, headers, or anything that could hold a key. Nothing here
reads the request body; the fields are ids, figures and bounded labels.

Where the lines go: when `start()` finds the logger without handlers it attaches its own (one JSON
object per line on stdout, not propagated to the root logger). A deployment that configures
`ultraroute.access` itself (a file handler, level WARNING to silence it) keeps its configuration.
"""

from __future__ import annotations

import logging
import queue
import sys
import weakref
from datetime import UTC, datetime
from logging.handlers import QueueHandler, QueueListener
from typing import TYPE_CHECKING, Any, TextIO

import orjson

from gateway.errors import AllCandidatesFailed, GatewayError
from gateway.telemetry.sample import AttemptSample

if TYPE_CHECKING:
    from gateway.dispatch import Served

LOGGER_NAME = "ultraroute.access"


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


class AccessLog:
    def __init__(self, stream: TextIO | None = None, logger_name: str = LOGGER_NAME) -> None:
        self.logger = logging.getLogger(logger_name)
        self._stream = stream
        self._listener: QueueListener | None = None
        self._handler: QueueHandler | None = None
        # A non-streaming request that breaks after its first token is logged by `served()` and then
        # rendered as an error: `failed()` must not log it twice. Weak, so nothing outlives the request.
        self._logged_failures: weakref.WeakSet[BaseException] = weakref.WeakSet()

    # -- lifecycle (the app's lifespan) ---------------------------------------------------------
    def start(self) -> None:
        if self.logger.handlers:
            return  # configured by the deployment
        sink = logging.StreamHandler(self._stream if self._stream is not None else sys.stdout)
        sink.setFormatter(logging.Formatter("%(message)s"))
        lines: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
        self._listener = QueueListener(lines, sink)
        self._handler = QueueHandler(lines)
        self.logger.addHandler(self._handler)
        self.logger.setLevel(logging.INFO)
        self.logger.propagate = False
        self._listener.start()

    def stop(self) -> None:
        """Flush what is queued and detach (idempotent)."""
        if self._handler is not None:
            self.logger.removeHandler(self._handler)
            self._handler = None
        if self._listener is not None:
            self._listener.stop()
            self._listener = None

    # -- lines ----------------------------------------------------------------------------------
    def served(self, request_id: str, served: Served, sample: AttemptSample, status: int,
               failure: BaseException | None, key_id: str | None = None) -> None:
        """The request an endpoint served (fully, or until it broke (`failure`) or the client left);
        `key_id`: the client key's id (never its secret), None in open mode."""
        if failure is not None:
            self._logged_failures.add(failure)
        if not self.logger.isEnabledFor(logging.INFO):
            return
        endpoint = served.stream.endpoint
        self._emit({
            "ts": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "request_id": request_id,
            "key": key_id,
            "model": endpoint.model,
            "endpoint": endpoint.id,
            "provider": endpoint.provider.name,
            "tier": endpoint.tier.value,
            "attempts": len(served.attempts) + 1,
            "fallback": [{"endpoint": hop.endpoint_id, "reason": hop.reason}
                         for hop in (*served.skips, *served.attempts)],
            "status": status,
            "outcome": sample.outcome.value,
            "ttft_ms": _ms(sample.ttft_s),
            "ttfat_ms": _ms(sample.ttfat_s),
            "duration_ms": _ms(sample.e2e_s),
            "decode_tps": None if sample.decode_tps is None else round(sample.decode_tps, 1),
            "tokens": {"input": sample.input_tokens, "cached_input": sample.cached_input_tokens,
                       "output": sample.output_tokens, "reasoning": sample.reasoning_tokens},
            "cost_usd": round(sample.cost_usd, 8),
        })

    def failed(self, request_id: str, err: GatewayError) -> None:
        """A request no endpoint served: rejected before routing, or every candidate failed."""
        if err in self._logged_failures or not self.logger.isEnabledFor(logging.INFO):
            return
        failures = err.failures if isinstance(err, AllCandidatesFailed) else []
        self._emit({
            "ts": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "request_id": request_id,
            "model": None,
            "endpoint": failures[-1][0] if failures else None,
            "attempts": len(failures),
            "fallback": [{"endpoint": endpoint_id, "reason": e.metric_label} for endpoint_id, e in failures],
            "status": err.status,
            "outcome": "error",
            "error": err.metric_label,
        })

    def _emit(self, entry: dict[str, Any]) -> None:
        self.logger.info(orjson.dumps(entry).decode())
