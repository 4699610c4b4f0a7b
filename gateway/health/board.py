"""Endpoint health: circuit breakers, rate-limit cool-downs, SLO demotion, misconfiguration.

`HealthBoard.blocked(endpoint)` answers, per attempt, whether an endpoint may be tried now and if
not why: `circuit_open`, `cooldown` (a 429 said when to come back), `slo` (it answers, but slower
than its tier promises), `downgraded` (its answers keep reporting another tier than its
`service_tier` asked for), `misconfigured` (the provider refused our key). The dispatcher skips a
blocked endpoint without an attempt and names the reason in the fallback header.

Breaker: `failure_threshold` consecutive failures, or an error rate above `error_rate_threshold`
over the last `window` outcomes, opens the circuit for `open_s`; then one request at a time is let
through as a probe (half-open); a success closes it, a failure opens it again. While a circuit is
open for errors, `health_probe.Prober` asks the endpoint in the background (`begin_probe`,
`end_probe`): a successful probe closes the circuit at once, a failed one keeps it open -- never
longer than `max_open_s` in all, after which a client request is the half-open probe again. SLO: an endpoint whose
recent TTFT (EWMA over its last few requests) is above its catalogue `slo.ttft_ms`, or whose decode
rate is below `slo.decode_tps`, is demoted like an open circuit; the probe after `open_s` is judged
against the SLO too.

Nothing here does I/O. With Redis, `health_share.HealthSharing` copies what this board notes
(opened, demoted, cooling down, closed) to other replicas and back, in the background.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from gateway.config import Endpoint
from gateway.telemetry.sample import AttemptSample, Outcome

log = logging.getLogger("ultraroute.health")

# Outcomes that count against an endpoint. A client error or a cancelled request is not its fault.
FAILURES = frozenset({Outcome.SERVER_ERROR, Outcome.TIMEOUT, Outcome.CONNECT_ERROR})
SLO_ALPHA = 0.3
SLO_MIN_SAMPLES = 3
# Answers in a row from another tier than the endpoint's service_tier asked for (a silent downgrade)
# that demote it: it is not the premium tier it is ranked as.
DOWNGRADES_TO_DEMOTE = 3


@dataclass(frozen=True, slots=True)
class BreakerSettings:
    failure_threshold: int = 5
    error_rate_threshold: float = 0.5
    window: int = 20  # outcomes the error rate is taken over
    open_s: float = 30.0
    max_cooldown_s: float = 60.0  # a retry-after longer than this is capped
    max_open_s: float = 60.0  # failed background probes keep a circuit open at most this long


@dataclass(slots=True)
class _State:
    consecutive: int = 0
    recent: deque[bool] = field(default_factory=lambda: deque(maxlen=20))  # True = failure
    open_until: float = 0.0
    opened_at: float = 0.0  # when this open period began (a failed half-open request starts a new one)
    failed_at: float = 0.0  # when the last failed background probe was sent: the time of its evidence
    probe_sent_at: float = 0.0  # when the background probe in flight was sent
    open_reason: str = ""
    probing: bool = False
    cooldown_until: float = 0.0
    misconfigured: bool = False
    ewma_ttft_ms: float | None = None
    ewma_tps: float | None = None
    slo_samples: int = 0
    downgrades: int = 0  # answers in a row served at another tier than asked


def _unavailable(state: _State, now: float) -> str | None:
    if state.misconfigured:
        return "misconfigured"
    if now < state.cooldown_until:
        return "cooldown"
    if state.open_until and (now < state.open_until or state.probing):
        return state.open_reason
    return None


class HealthBoard:
    def __init__(self, settings: BreakerSettings | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings or BreakerSettings()
        self._clock = clock
        self._states: dict[str, _State] = {}
        self.on_change: Callable[[Endpoint, bool], None] | None = None  # (endpoint, circuit open)
        # endpoint key -> (reason, wall-clock end) or (None, wall-clock time it closed): for other
        # replicas to learn (health/share.py)
        self._changes: dict[str, tuple[str | None, float]] = {}

    def _state(self, key: str) -> _State:
        state = self._states.get(key)
        if state is None:
            state = self._states[key] = _State(recent=deque(maxlen=self.settings.window))
        return state

    # -- asked per attempt ---------------------------------------------------------------------
    def blocked(self, endpoint: Endpoint) -> str | None:
        """Why this endpoint may not be tried now, or None. Lets one probe through a tripped breaker."""
        state = self._states.get(endpoint.key)
        if state is None:
            return None
        reason = _unavailable(state, self._clock())
        if reason is None and state.open_until:
            state.probing = True  # half-open: this request is the probe
        return reason

    def unavailable(self, endpoint_key: str) -> bool:
        """Whether `blocked` would refuse the endpoint now, asked without taking a half-open probe's
        turn: the router's question, so that it does not choose an endpoint dispatch will skip."""
        state = self._states.get(endpoint_key)
        return state is not None and _unavailable(state, self._clock()) is not None

    def cooldown_left(self, endpoint: Endpoint) -> float:
        """Seconds until a 429's cool-down ends (0 when there is none)."""
        state = self._states.get(endpoint.key)
        return max(0.0, state.cooldown_until - self._clock()) if state is not None else 0.0

    def is_open(self, endpoint: Endpoint) -> bool:
        state = self._states.get(endpoint.key)
        return bool(state and (state.open_until or state.misconfigured))

    # -- told after each attempt ---------------------------------------------------------------
    def observe(self, endpoint: Endpoint, sample: AttemptSample) -> None:
        if sample.outcome in (Outcome.CANCELLED, Outcome.CLIENT_ERROR):
            self._state(endpoint.key).probing = False
            return
        state = self._state(endpoint.key)
        failed = sample.outcome in FAILURES
        state.recent.append(failed)
        state.consecutive = state.consecutive + 1 if failed else 0
        if sample.outcome is Outcome.OK:
            self._observe_speed(state, sample)
        was_probe = state.probing
        state.probing = False
        if failed:
            if was_probe or self._trips(state):
                self._open(endpoint, state, "circuit_open")
            return
        slo = self._slo_breach(endpoint, state)
        if slo:
            self._open(endpoint, state, "slo")
        elif state.open_until and was_probe:
            self._close(endpoint, state)

    def served_tier(self, endpoint: Endpoint, downgraded: bool) -> None:
        """The provider said which tier served an answer: the one asked for, or another
        (`downgraded`). After DOWNGRADES_TO_DEMOTE downgrades in a row the endpoint is demoted like
        an SLO breach (reason `downgraded`); its half-open request after `open_s` is judged again."""
        state = self._state(endpoint.key)
        if not downgraded:
            state.downgrades = 0
            return
        state.downgrades += 1
        if state.downgrades >= DOWNGRADES_TO_DEMOTE and not state.open_until:
            self._open(endpoint, state, "downgraded")

    def reason(self, endpoint_key: str) -> str | None:
        """Why health keeps this endpoint from being tried now (None: it does not), asked without
        taking a half-open probe's turn: what `/v1/route` shows."""
        state = self._states.get(endpoint_key)
        return None if state is None else _unavailable(state, self._clock())

    def cool_down(self, endpoint: Endpoint, seconds: float) -> None:
        """A 429 (or `x-ratelimit-remaining-*: 0`) said when to come back."""
        state = self._state(endpoint.key)
        seconds = min(max(seconds, 0.0), self.settings.max_cooldown_s)
        state.cooldown_until = max(state.cooldown_until, self._clock() + seconds)
        self._changes[endpoint.key] = ("cooldown", time.time() + seconds)

    def misconfigured(self, endpoint: Endpoint, status: int) -> None:
        state = self._state(endpoint.key)
        if not state.misconfigured:
            # Once, and without anything the provider said: its error text may echo the key.
            log.error("provider %s rejected the gateway's credentials (HTTP %d); endpoint %s disabled",
                      endpoint.provider.name, status, endpoint.key)
        state.misconfigured = True

    # -- background probes (health/probe.py) ---------------------------------------------------
    def wants_probe(self, endpoint: Endpoint) -> bool:
        """Open for errors (not for its SLO, not misconfigured) and no probe in flight."""
        state = self._states.get(endpoint.key)
        return bool(state is not None and state.open_until and state.open_reason == "circuit_open"
                    and not state.probing and not state.misconfigured)

    def begin_probe(self, endpoint: Endpoint) -> bool:
        """Claim the endpoint for a background probe; no client request is let through meanwhile."""
        if not self.wants_probe(endpoint):
            return False
        state = self._states[endpoint.key]
        state.probing = True
        state.probe_sent_at = self._clock()
        return True

    def end_probe(self, endpoint: Endpoint, ok: bool) -> None:
        """A successful probe closes the circuit; a failed one keeps it open, up to `max_open_s`."""
        state = self._state(endpoint.key)
        state.probing = False
        if not state.open_until:
            return
        if ok:
            self._close(endpoint, state)
            return
        state.failed_at = state.probe_sent_at
        until = min(self._clock() + self.settings.open_s, state.opened_at + self.settings.max_open_s)
        if until > state.open_until:
            self._changes[endpoint.key] = (state.open_reason, time.time() + until - self._clock())
            state.open_until = until

    # -- sharing with other replicas (see health/share.py) --------------------------------------
    def take_changes(self) -> dict[str, tuple[str | None, float]]:
        changes, self._changes = self._changes, {}
        return changes

    def restore_changes(self, changes: dict[str, tuple[str | None, float]]) -> None:
        self._changes = {**changes, **self._changes}

    def apply_remote(self, endpoint: Endpoint, reason: str, until_wall: float) -> None:
        """Another replica found this endpoint broken (or rate limited) until `until_wall`."""
        remaining = until_wall - time.time()
        if remaining <= 0:
            return
        state = self._state(endpoint.key)
        until = self._clock() + remaining
        if reason == "cooldown":
            state.cooldown_until = max(state.cooldown_until, until)
        elif until > state.open_until and not state.probing:
            first = not state.open_until
            if first:
                state.opened_at = self._clock()
            state.open_until, state.open_reason = until, reason
            if first and self.on_change is not None:
                self.on_change(endpoint, True)

    def apply_remote_close(self, endpoint: Endpoint, closed_wall: float) -> None:
        """Another replica's probe (or request) found this endpoint well again at `closed_wall`.

        Closes a circuit opened before then, so every replica comes back together rather than each
        waiting for a probe of its own (the shared probe lock lets one replica probe at a time). A
        circuit this replica opened, or a probe of its own that failed, sent after that moment is newer
        evidence: it stays open. A probe of its own still out is not: it was sent before the close
        reached this replica, and if it fails (a hang that began before the recovery) it is ignored
        (`end_probe` of a closed circuit), rather than reopening every replica's circuit."""
        state = self._states.get(endpoint.key)
        if state is None or not state.open_until:
            return
        evidence_wall = time.time() - (self._clock() - max(state.opened_at, state.failed_at))
        if evidence_wall <= closed_wall:
            self._close(endpoint, state, share=False)

    # -- internals -----------------------------------------------------------------------------
    def _trips(self, state: _State) -> bool:
        s = self.settings
        if state.consecutive >= s.failure_threshold:
            return True
        window = state.recent
        return len(window) >= s.window // 2 and sum(window) / len(window) > s.error_rate_threshold

    def _observe_speed(self, state: _State, sample: AttemptSample) -> None:
        if sample.ttft_s is not None:
            ms = sample.ttft_s * 1000
            state.ewma_ttft_ms = ms if state.ewma_ttft_ms is None else \
                state.ewma_ttft_ms + SLO_ALPHA * (ms - state.ewma_ttft_ms)
        if sample.decode_tps is not None:
            tps = sample.decode_tps
            state.ewma_tps = tps if state.ewma_tps is None else state.ewma_tps + SLO_ALPHA * (tps - state.ewma_tps)
        state.slo_samples += 1

    def _slo_breach(self, endpoint: Endpoint, state: _State) -> bool:
        slo = endpoint.slo
        if slo is None:
            return False
        # A probe is judged on its own figures; otherwise on the last few requests.
        if state.slo_samples < SLO_MIN_SAMPLES and not state.open_until:
            return False
        if slo.ttft_ms is not None and state.ewma_ttft_ms is not None and state.ewma_ttft_ms > slo.ttft_ms:
            return True
        return slo.decode_tps is not None and state.ewma_tps is not None and state.ewma_tps < slo.decode_tps

    def _open(self, endpoint: Endpoint, state: _State, reason: str) -> None:
        first = not state.open_until
        open_s = min(self.settings.open_s, self.settings.max_open_s)
        state.opened_at = self._clock()
        state.open_until = state.opened_at + open_s
        state.open_reason = reason
        state.ewma_ttft_ms = state.ewma_tps = None  # the probe is judged on its own figures
        state.slo_samples = 0
        self._changes[endpoint.key] = (reason, time.time() + open_s)
        if first:
            log.warning("endpoint %s demoted (%s) for %.0f s", endpoint.key, reason, open_s)
            if self.on_change is not None:
                self.on_change(endpoint, True)

    def _close(self, endpoint: Endpoint, state: _State, share: bool = True) -> None:
        state.open_until = 0.0
        state.open_reason = ""
        state.consecutive = 0
        state.recent.clear()
        state.ewma_ttft_ms = state.ewma_tps = None
        state.slo_samples = 0
        if share:
            self._changes[endpoint.key] = (None, time.time())
        log.warning("endpoint %s restored", endpoint.key)
        if self.on_change is not None:
            self.on_change(endpoint, False)
