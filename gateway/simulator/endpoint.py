"""One simulated OpenAI-compatible endpoint: timing, capacity, faults, admin changes.

Does: serve `POST /v1/chat/completions` and the legacy `/v1/completions` (streaming and not),
`POST /v1/embeddings` (structured.py) and `GET /v1/models` on the
endpoint's own port; enforce context-length and capacity limits with OpenAI-shaped errors; wait a
lognormal base TTFT plus the prefill of the prompt's uncached (and, faster, cached) tokens, the
cached part looked up in the endpoint's prompt cache (prompt_cache.py), then emit tokens on a
per-user rate that slows down with the endpoint's current concurrency and the prompt's length,
batched to at most one socket write per tick; inject the profile's faults; apply admin patches
(including refusing connections).
Does not: parse HTTP (`http11.py`), validate request bodies (`chat_request.py`), build payload
bytes (`payloads.py`), keep the counters' bookkeeping (`stats.py`) or serve the admin API
(`admin.py`).

Rate model: the per-user rate is re-evaluated at every tick from the endpoint's concurrency at
that moment (not fixed at stream start), so streams slow down while others join and speed up as
they leave. With constant concurrency token i is due at t_first + i / rate exactly; the last token
is never sent late because the final sleep is clamped to its due time. The response head goes out
together with the first token (at t_first), not on arrival.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.simulator.chat_request import ApiError, ChatJob, parse_chat_request, rate_limited
from gateway.simulator.config import EndpointProfile, SimConfigError, merge_profile
from gateway.simulator.embeddings import serve_embeddings
from gateway.simulator.http11 import HttpConnection, HttpListener, Request
from gateway.simulator.native_payloads import anthropic_error_body, error_event, native_writer
from gateway.simulator.native_request import parse_native_request
from gateway.simulator.payloads import MALFORMED, ChunkWriter, completion_body, error_body, sse
from gateway.simulator.prompt_cache import PromptCache
from gateway.simulator.rate_card import RateCard
from gateway.simulator.stats import Attempt, EndpointStats, RecentRequests

API_PATHS = ("/chat/completions", "/completions", "/embeddings", "/messages", "/responses")
KINDS = {"/chat/completions": "chat", "/completions": "completions", "/messages": "messages", "/responses": "responses"}
EARLY_S = 0.002  # tokens due within this much are sent now: loop timers may fire ~1 ms early
NON_STREAM_MIN_SLEEP_S = 0.05  # nobody sees intermediate tokens of a non-streamed answer
TERMINAL_FAULTS = ("error", "hang", "error_event", "drop", "stall")


@dataclass(slots=True)
class Plan:
    fault: str | None
    malformed: bool
    no_done: bool
    ttft_s: float
    echo_key: str | None = None  # quoted in error messages (faults.echo_key_in_errors)


class Endpoint:
    """A named endpoint with its listener, live profile, counters and prefix cache."""

    def __init__(self, name: str, profile: EndpointProfile, host: str, seed: int) -> None:
        self.name = name
        self.profile = profile
        self._startup_profile = profile
        self._seed = seed
        self.listener = HttpListener(self.handle, host, profile.port)
        self.prefix_cache = PromptCache(profile.prompt_cache)
        self.active = 0
        self._lock = asyncio.Lock()
        self._fault_rng = random.Random()
        self._timing_rng = random.Random()
        self._stats = EndpointStats()
        self._forced_errors = profile.faults.error_next  # left of `faults.error_next`
        self.requests = RecentRequests()  # what clients sent, for tests (admin: .../requests)
        self._card = RateCard(0, 0)  # the profile's, full, from reset_stats()
        self.reset_stats()

    # ---- lifecycle and admin ------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self.listener.port

    async def start(self) -> None:
        if self.profile.faults.refuse:
            port = await self.listener.bind_only()
        else:
            port = await self.listener.open()
        self.profile = self.profile.model_copy(update={"port": port})
        self._startup_profile = self._startup_profile.model_copy(update={"port": port})

    async def stop(self) -> None:
        await self.listener.close()

    async def apply_patch(self, patch: Any) -> EndpointProfile:
        """Deep-merge and validate `patch`; raises SimConfigError. Affects new requests only."""
        async with self._lock:
            new = merge_profile(self.profile, patch, f"endpoints.{self.name}")
            await self._set_refuse(new.faults.refuse)
            self.profile = new
            self.prefix_cache.config = new.prompt_cache
            if "error_next" in (patch.get("faults") or {}):  # re-armed only when the patch names it
                self._forced_errors = new.faults.error_next
            return new

    async def reset(self, profiles: bool) -> None:
        self.reset_stats()
        if profiles:
            async with self._lock:
                await self._set_refuse(self._startup_profile.faults.refuse)
                self.profile = self._startup_profile
                self.prefix_cache.config = self.profile.prompt_cache
                self._forced_errors = self.profile.faults.error_next

    def reset_stats(self) -> None:
        self._stats.clear()
        self._card = RateCard(self.profile.requests_per_minute, self.profile.tokens_per_minute)
        self.requests.clear()
        self.prefix_cache.clear()
        # Per-endpoint streams derived from the simulator seed: reproducible, and one endpoint's
        # traffic does not shift another's fault draws. Re-seeded on reset.
        base = hashlib.sha256(f"{self._seed}/{self.name}".encode()).digest()
        self._fault_rng.seed(int.from_bytes(base[:8], "big"))
        self._timing_rng.seed(int.from_bytes(base[8:16], "big"))

    async def _set_refuse(self, refuse: bool) -> None:
        if refuse and self.listener.listening:
            self.listener.stop_listening()
            # Pooled keep-alive connections would otherwise bypass the outage.
            self.listener.close_idle()
        elif not refuse and not self.listener.listening:
            try:
                await self.listener.open()
            except OSError as err:
                raise SimConfigError(f"endpoints.{self.name}: cannot listen again: {err}") from None

    def stats(self, attempts: bool = True) -> dict[str, Any]:
        return self._stats.as_dict(self.active, attempts)

    # ---- HTTP entry ---------------------------------------------------------------------------

    async def handle(self, req: Request, conn: HttpConnection) -> None:
        path = req.path.rstrip("/").removeprefix("/v1")
        if path in API_PATHS:
            if req.method != "POST":
                conn.send(405, error_body("Use POST", "invalid_request_error", "method_not_allowed"))
                return
            self.requests.record(path, req.body, _api_headers(req))
            if path == "/embeddings":
                await serve_embeddings(self, req, conn)
            else:
                await self._chat(req, conn, KINDS[path])
        elif path == "/models" and req.method == "GET":
            model = {"id": self.profile.model or "sim-model", "object": "model", "created": 0}
            conn.send(200, orjson.dumps({"object": "list", "data": [{**model, "owned_by": "simulator"}]}))
        else:
            conn.send(404, error_body(f"Unknown path {req.path}", "invalid_request_error", "not_found"))

    async def _chat(self, req: Request, conn: HttpConnection, kind: str = "chat") -> None:
        profile = self.profile  # snapshot: an admin patch affects the next request, not this one
        attempt = self._stats.begin(time.time())
        loop = asyncio.get_running_loop()
        echo_key = _bearer_token(req) if profile.faults.echo_key_in_errors else None
        try:
            if kind in ("messages", "responses"):
                job = parse_native_request(req.body, profile, kind)
            else:
                job = parse_chat_request(req.body, profile, kind)
            attempt.stream, attempt.model, attempt.prefix_tokens = job.stream, job.model, job.prefix_tokens
            if job.prompt_tokens > profile.context_length:
                raise ApiError(
                    400,
                    f"This model's maximum context length is {profile.context_length} tokens. "
                    f"However, your messages resulted in {job.prompt_tokens} tokens.",
                    "invalid_request_error",
                    "context_length_exceeded",
                    "messages",
                    outcome="context_length_exceeded",
                )
            if self.active >= profile.capacity:
                raise rate_limited(profile, f"Rate limit reached: {profile.capacity} concurrent requests")
            if not self._card.matches(profile.requests_per_minute, profile.tokens_per_minute):
                self._card = RateCard(profile.requests_per_minute, profile.tokens_per_minute)  # patched
            broken = self._card.take(job.prompt_tokens + job.n_tokens)
            if broken is not None:
                per_minute = profile.requests_per_minute if broken == "requests" else profile.tokens_per_minute
                raise rate_limited(profile, f"Rate limit reached: {per_minute} {broken} per minute")
        except ApiError as err:
            self._send_error(conn, attempt, err, echo_key, kind)
            self._stats.finish(attempt, loop.time() - req.arrived)
            return
        self.active += 1
        self._stats.saw_active(self.active)
        job.cached_tokens = self.prefix_cache.lookup(job.prefixes)
        self.prefix_cache.insert(job.prefixes)
        plan = self._draw(profile)
        # Prefill: the uncached part of the prompt at the prefill rate, the cached part faster,
        # both at the load it joins (config.py); scaled by the same jitter as the base latency.
        prefill = profile.prefill_s(job.prompt_tokens, job.cached_tokens, self.active)
        if prefill:
            jitter = plan.ttft_s / (profile.ttft_ms / 1000.0) if profile.ttft_ms > 0 else 1.0
            plan.ttft_s += prefill * jitter
        plan.echo_key = echo_key
        if self._forced_errors > 0:
            self._forced_errors -= 1
            plan.fault = "error"
        if not job.stream:  # malformed chunks and a missing [DONE] only exist in streams
            plan.malformed = plan.no_done = False
        elif profile.faults.ignore_include_usage:
            job.include_usage = False
        attempt.ttft_ms = plan.ttft_s * 1000.0
        attempt.faults = [
            name for name in (plan.fault, plan.malformed and "malformed", plan.no_done and "no_done") if name
        ]
        try:
            await self._serve(profile, job, plan, req.arrived, conn, attempt)
        except asyncio.CancelledError:
            # The client disconnected (the connection cancels us) or the simulator is stopping.
            # Not re-raised: this task belongs to the connection and ends here.
            attempt.cancelled = True
            if attempt.outcome == "in_progress":
                attempt.outcome = "cancelled"
        finally:
            self.active -= 1
            self._stats.finish(attempt, loop.time() - req.arrived)

    def _limit_headers(self, job: ChatJob) -> list[tuple[str, str]]:
        """The rate card's headers on an answer (rate_card.py), in the API's own names."""
        return self._card.headers(job.kind)

    # ---- per-request draws --------------------------------------------------------------------

    def _draw(self, profile: EndpointProfile) -> Plan:
        """Faults and TTFT for one request. Always three fault draws, so sequences are stable."""
        faults = profile.faults
        u, m, d = self._fault_rng.random(), self._fault_rng.random(), self._fault_rng.random()
        fault = None
        edge = 0.0
        rates = (
            faults.error_rate,
            faults.hang_rate,
            faults.error_event_rate,
            faults.drop_rate,
            faults.stall_rate,
        )
        for name, rate in zip(TERMINAL_FAULTS, rates, strict=True):
            edge += rate
            if u < edge:  # random() < 1.0 always and < 0.0 never: rates 0 and 1 are exact
                fault = name
                break
        median = profile.ttft_ms / 1000.0
        ttft = median
        if profile.ttft_jitter > 0 and median > 0:
            ttft = median * math.exp(profile.ttft_jitter * self._timing_rng.gauss(0.0, 1.0))
        return Plan(fault, m < faults.malformed_rate, d < faults.no_done_rate, ttft)

    # ---- serving ------------------------------------------------------------------------------

    def _send_error(
        self, conn: HttpConnection, attempt: Attempt, err: ApiError, echo_key: str | None, kind: str = "chat"
    ) -> None:
        body = err.body if echo_key is None else _quoting_key(err.body, echo_key)
        if kind == "messages":  # Anthropic's own error shape (529: overloaded_error)
            body = anthropic_error_body(err.status, orjson.loads(body)["error"]["message"])
        conn.send(err.status, body, err.headers)
        attempt.status, attempt.outcome = err.status, err.outcome

    async def _serve(
        self,
        profile: EndpointProfile,
        job: ChatJob,
        plan: Plan,
        arrived: float,
        conn: HttpConnection,
        attempt: Attempt,
    ) -> None:
        faults = profile.faults
        t_first = arrived + plan.ttft_s  # loop clock; `arrived` is when the request's last byte came
        if plan.fault == "error":
            status = faults.error_status
            if status == 429:
                err = rate_limited(profile, "Rate limit reached (simulated)")
            else:
                kind = "server_error" if status >= 500 else "invalid_request_error"
                code = faults.error_code if faults.error_code is not None and status < 500 else kind
                err = ApiError(status, f"Simulated upstream error {status}", kind, code, outcome="error")
            self._send_error(conn, attempt, err, plan.echo_key, job.kind)
            return
        if plan.fault == "hang":
            attempt.outcome = "hung"
            await asyncio.get_running_loop().create_future()  # until the client disconnects
        await _sleep_until(t_first)
        if plan.fault == "error_event":
            event = {
                "error": {
                    "message": _with_key("Simulated error event", plan.echo_key),
                    "type": "server_error",
                    "code": faults.error_status,
                }
            }
            attempt.status, attempt.outcome = 200, "error_event"
            if job.kind in ("messages", "responses"):
                message = _with_key("Simulated error event", plan.echo_key)
                data = error_event(job.kind, faults.error_status, message)
                if job.stream:
                    conn.start_stream(200, first_chunk=data, last=True, close=True)
                else:
                    conn.send(200, data.split(b"data: ", 1)[1].strip(), close=True)
            elif job.stream:
                conn.start_stream(200, first_chunk=sse(event), last=True, close=True)
            else:
                conn.send(200, orjson.dumps(event), close=True)
            return
        n = job.n_tokens
        cut = plan.fault in ("drop", "stall")
        stop = min(faults.drop_after_tokens, n) if cut else n
        if job.stream:
            await self._stream(profile, job, plan, arrived, stop, conn, attempt)
        elif stop > 1:
            await self._decode(profile, t_first, stop, None, NON_STREAM_MIN_SLEEP_S, conn, job.prompt_tokens)
        if cut:
            if plan.fault == "drop":
                attempt.outcome = "dropped"
                conn.abort()
                return
            attempt.outcome = "stalled"
            await asyncio.get_running_loop().create_future()  # until the client disconnects
        if not job.stream:
            attempt.first_byte_ms = (asyncio.get_running_loop().time() - arrived) * 1000.0
            body = completion_body(job) if job.kind in ("chat", "completions") else native_writer(job).body()
            conn.send(200, body, [("x-simulator-endpoint", self.name), *self._limit_headers(job)])
            attempt.tokens = n
        attempt.status = 200
        attempt.outcome = "malformed" if plan.malformed else "no_done" if plan.no_done else "ok"

    async def _stream(
        self,
        profile: EndpointProfile,
        job: ChatJob,
        plan: Plan,
        arrived: float,
        stop: int,
        conn: HttpConnection,
        attempt: Attempt,
    ) -> None:
        """Stream tokens [0, stop): the first alone at t_first, then batches as they fall due."""
        t_first = arrived + plan.ttft_s
        n = job.n_tokens
        writer = ChunkWriter(job) if job.kind in ("chat", "completions") else native_writer(job)
        complete = stop == n and plan.fault is None
        malformed_at = (n // 2 if n >= 2 else n) if plan.malformed else -1

        def payload(a: int, b: int) -> tuple[bytes, bool]:
            parts = []
            for i in range(a, b):
                if i == malformed_at:
                    parts.append(MALFORMED)
                parts.append(writer.token(i))
            last = complete and b == n
            if last:
                if malformed_at == n:
                    parts.append(MALFORMED)
                if n == 0:
                    parts.append(writer.empty_first())
                parts.append(writer.finish(with_done=not plan.no_done))
            attempt.tokens += b - a
            return b"".join(parts), last

        # The head goes out with the first token (or alone, if the cut comes before any token).
        first, last = payload(0, min(1, stop))
        attempt.status = 200
        attempt.first_byte_ms = (asyncio.get_running_loop().time() - arrived) * 1000.0
        conn.start_stream(200, [("x-simulator-endpoint", self.name), *self._limit_headers(job)],
                          first_chunk=first, last=last)
        if stop > 1:

            def emit(a: int, b: int) -> None:
                data, is_last = payload(a, b)
                conn.write_chunk(data, last=is_last)

            await self._decode(profile, t_first, stop, emit, profile.tick_ms / 1000.0, conn, job.prompt_tokens)

    async def _decode(
        self,
        profile: EndpointProfile,
        t_first: float,
        stop: int,
        emit: Callable[[int, int], None] | None,
        min_sleep: float,
        conn: HttpConnection,
        context_tokens: int = 0,
    ) -> None:
        """Let tokens 1..stop-1 become due (token 0 was due at t_first), emitting each batch; the
        rate is the profile's at the live concurrency for a prompt of `context_tokens`."""
        loop = asyncio.get_running_loop()
        sent = 1
        progress = 0.0  # token index due at `last`, integrated over the (changing) rate
        last = t_first
        target = t_first  # when the previous sleep should have ended
        while True:
            now = loop.time()
            # Timers overshoot by ~1 ms; without crediting that back, a stream whose rate is close
            # to 1/tick drifts up to a token behind. Credit at most half a tick.
            late = min(max(now - target, 0.0), min_sleep / 2)
            rate = profile.rate_at(self.active, context_tokens)
            progress += (now - last) * rate
            last = now
            due = min(stop, int(progress + EARLY_S * rate) + 1)
            if due > sent:
                if emit is not None:
                    emit(sent, due)
                    if conn.paused:  # checked first: a coroutine call per tick is measurable CPU
                        await conn.drain()
                sent = due
            if sent >= stop:
                return
            wait_next = (sent - progress) / rate
            wait_last = (stop - 1 - progress) / rate
            delay = min(max(min_sleep - late, wait_next), wait_last)
            target = now + delay
            await asyncio.sleep(delay)


# Request headers kept with each recorded request, for tests: API versions and betas, and which
# kind of key came (never the key itself).
_RECORDED_HEADERS = ("anthropic-version", "anthropic-beta")


def _api_headers(req: Request) -> dict[str, str]:
    out = {name: req.headers[name] for name in _RECORDED_HEADERS if name in req.headers}
    if "x-api-key" in req.headers:
        out["x-api-key"] = "present"
    return out


def _bearer_token(req: Request) -> str:
    """What the client sent as its key: the token of `Authorization: Bearer ...` (else the raw value)."""
    value = req.headers.get("authorization", "")
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else value


def _with_key(message: str, key: str | None) -> str:
    return message if key is None else f"{message} (Incorrect API key provided: {key or '<none>'})"


def _quoting_key(body: bytes, key: str) -> bytes:
    """An `error_body()` with `key` quoted in its message, as a careless real provider would."""
    data = orjson.loads(body)
    data["error"]["message"] = _with_key(data["error"]["message"], key)
    return orjson.dumps(data)


async def _sleep_until(deadline: float) -> None:
    loop = asyncio.get_running_loop()
    delay = deadline - loop.time()
    if delay > 0:
        await asyncio.sleep(delay)
