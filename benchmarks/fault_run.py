"""Fault run (issue 32): `serve --workers 2` on a real Redis, 16 clients, and everything going wrong.

    python benchmarks/fault_run.py [--clients 16] [--phase-s 6] [--seed 1] [--ephemeral-redis] [--dump F]

A private, durable redis-server (append-only file: a restart keeps keys and spend, as the Redis of
deploy/k8s/redis.yaml does; `--ephemeral-redis`: one without persistence, whose restart forgets
every client key, so every request is refused 401 from then on and the spend starts again at 0) and
the simulator with two endpoints: `fast` (the fast tier) and `std` (standard, accepts an assistant
prefix, so a broken stream can be continued there). A client key with a budget, so every
answer is charged. The clients (`fault_load.py`) ask without pause while, one phase after another:

    steady     nothing happens
    sigkill    worker 0 is killed with SIGKILL; the supervisor restarts it (we wait until it serves)
    sighup     the catalogue is rewritten (new endpoint ids `fast2`/`std2`, new prices) and SIGHUP sent;
               we wait until both workers logged the reload
    redis      Redis is stopped, left down for a phase, started again on the same port
    drop       the fast tier drops 40% of its streams after 10 tokens (the gateway continues them on
               `std`; dropping all of them would open its circuit at once and leave little to continue);
               this phase and `503` last until some request met their fault (the router may have
               just passed the fast tier over, and re-checks it seconds later)
    heal       the fault is cleared; we wait until the fast tier serves again (its circuit closed)
    503        the fast tier answers 503 to everything
    clear      the fault is cleared
    sigterm    SIGTERM to the supervisor; the clients stop once
               it has exited

Afterwards it prints a table per phase and checks, over every request:

    lost        a request that got neither an answer nor a clear error (an HTTP error status, an
                error event in the stream, a refused connection), other than the ones in flight on
                the killed worker: a connection that failed after the kill, for a request sent
                before it
    truncated   a 200 stream that ended without a finish reason and without an error event
    short       an answer with fewer (or more) tokens than the whole answer (the simulator answers
                exactly `max_tokens`): a broken stream continued elsewhere must still deliver all of it
    no_done     a stream without `data: [DONE]`
    usage       every answer carries usage whose `completion_tokens` equals the tokens received
    max_tokens  no answer received more tokens than its `max_tokens`
    spend       the key's spend (read from Redis after the stop) within 2% of the answers' usage at
                the catalogue price of the endpoint that served them (`x-ultraroute-endpoint`; the
                ids differ between the two catalogues, so the price is never ambiguous)

and exits 1 when one of them fails. Loopback only; about 2-3 minutes on a busy 2-core machine.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fault_load import Load, Record

from gateway.simulator.testing import SimProcess, make_sim_config
from tests.harness import GatewayProcess, free_ports
from tests.redis_servers import PrivateRedis

ADMIN_KEY = "admin-" + "f" * 30
PROFILE = {"ttft_ms": 30, "ttft_jitter": 0.1, "tick_ms": 10}
SIM = {"fast": {**PROFILE, "tokens_per_second": 600},
       "std": {**PROFILE, "tokens_per_second": 300, "accepts_prefix": True}}
# USD per million tokens. Fast and standard cost the same within a catalogue, so an answer that
# started on one and was continued on the other has one price; the second catalogue's differ.
PRICES = {"fast": {"input": 200.0, "output": 1000.0}, "std": {"input": 200.0, "output": 1000.0},
          "fast2": {"input": 300.0, "output": 1500.0}, "std2": {"input": 300.0, "output": 1500.0}}
DROP_AFTER = 10
DROP_RATE = 0.4
KILL_WINDOW_S = 5.0  # a connection failing this long after the kill is no longer the kill's
SPEND_TOLERANCE = 0.02
FAULT_WAIT_S = 30.0  # a fault phase lasts until a request meets its fault, up to this much longer


def catalogue(sim: SimProcess, suffix: str, prefix: str) -> dict[str, Any]:
    """`m` served by a fast tier and a standard one that can continue a broken stream."""
    endpoints = [{"provider": "simfast", "id": f"fast{suffix}", "tier": "fast", "model": "upstream-m",
                  "price": PRICES[f"fast{suffix}"]},
                 {"provider": "simstd", "id": f"std{suffix}", "tier": "standard", "model": "upstream-m",
                  "price": PRICES[f"std{suffix}"], "capabilities": ["assistant_prefix"]}]
    return {"providers": {"simfast": {"base_url": sim.base_url("fast")}, "simstd": {"base_url": sim.base_url("std")}},
            "models": {"m": {"endpoints": endpoints}},
            "gateway": {"redis_key_prefix": prefix, "limits_sync_s": 0.25},
            "health": {"probe_interval_s": 1.0}}  # an open circuit is probed every second, not every 5


@dataclass
class Marks:
    """When each phase began (time.monotonic()), and the kill's moment."""

    phases: list[tuple[str, float]]
    kill_at: float = 0.0
    events: list[str] = field(default_factory=list)  # what happened, with how long it took
    faults_met: dict[str, int] = field(default_factory=dict)  # the fast tier's attempts that met each fault
    broken: str = ""  # the step of the run that did not take, if any

    def phase_of(self, t: float) -> str:
        name = self.phases[0][0]
        for phase, start in self.phases:
            if t >= start:
                name = phase
        return name


def wait(predicate: Any, what: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {timeout_s:g} s")
        time.sleep(0.1)


def worker_health(port: int) -> dict[str, Any] | None:
    try:
        r = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
    except httpx.HTTPError:
        return None
    return r.json() if r.status_code == 200 else None


def _knows(port: int, key: str) -> bool:
    r = httpx.get(f"http://127.0.0.1:{port}/v1/models", headers={"authorization": f"Bearer {key}"}, timeout=5)
    return r.status_code == 200


def run(clients: int = 16, phase_s: float = 6.0, seed: int = 1,
        ephemeral_redis: bool = False) -> tuple[list[Record], Marks, float]:
    """The whole run; returns what the clients saw, the phase marks and the key's spend in USD."""
    redis = PrivateRedis(durable=not ephemeral_redis)
    redis.start()
    sim = SimProcess(make_sim_config(SIM)).start()
    prefix = f"fault-{uuid.uuid4().hex[:8]}"
    own = free_ports(2)  # worker i also answers on own + i: its pid is in its /healthz
    gw = GatewayProcess(catalogue(sim, "", prefix), open_access=False, workers=2,
                        serve_args=("--worker-ports", str(own)),
                        env={"REDIS_URL": redis.url, "ULTRAROUTE_ADMIN_KEY": ADMIN_KEY})
    try:
        gw.start()
        created = httpx.post(f"{gw.url}/admin/keys", headers={"authorization": f"Bearer {ADMIN_KEY}"},
                             json={"name": "fault-run", "budget_usd": 100_000, "budget_period": "day"}, timeout=30)
        created.raise_for_status()
        key, key_id = created.json()["key"], created.json()["id"]
        # A new key reaches the other worker within `keys_refresh_s`: start once both know it.
        wait(lambda: all(_knows(port, key) for port in (own, own + 1)), "both workers know the key", 30)
        load = Load(gw.base_url, key, clients=clients, seed=seed)
        marks = Marks([("steady", time.monotonic())])
        load.start()
        try:
            _phases(gw, sim, redis, own, marks, phase_s, prefix)
        except RuntimeError as err:  # a step that did not take: still report what the clients saw
            marks.broken = str(err)
            gw.stop()
        finally:
            load.stop()
        spend = gw.keys("spend", key_id)
        if spend.returncode != 0:
            marks.broken = (marks.broken + "; " if marks.broken else "") + f"keys spend: {spend.stderr.strip()}"
            return load.records, marks, 0.0
        spent = float(orjson.loads(spend.stdout[spend.stdout.index("{"):])["spend_usd"])
        return load.records, marks, spent
    finally:
        gw.stop()
        sim.stop()
        redis.stop()


def _phases(gw: GatewayProcess, sim: SimProcess, redis: PrivateRedis, own: int, marks: Marks,
            phase_s: float, prefix: str) -> None:
    assert gw.proc is not None
    time.sleep(phase_s)
    first = worker_health(own)
    if first is None:
        raise RuntimeError("worker 0 does not answer on its own port")
    marks.phases.append(("sigkill", time.monotonic()))
    marks.kill_at = time.monotonic()
    os.kill(int(first["replica"].rsplit("-", 1)[1]), signal.SIGKILL)
    wait(lambda: (h := worker_health(own)) is not None and h["replica"] != first["replica"],
         "the killed worker restarted", 120)
    marks.events.append(f"SIGKILL {first['replica']}: a new worker 0 serves after "
                        f"{time.monotonic() - marks.kill_at:.1f} s")
    time.sleep(phase_s)

    marks.phases.append(("sighup", time.monotonic()))
    reloads = gw.logs().count("configuration reloaded")
    gw.config.write_text(yaml.safe_dump(catalogue(sim, "2", prefix)))
    gw.proc.send_signal(signal.SIGHUP)
    wait(lambda: gw.logs().count("configuration reloaded") >= reloads + 2, "both workers reloaded", 60)
    marks.events.append(f"SIGHUP: both workers logged the reload after {time.monotonic() - marks.phases[-1][1]:.1f} s")
    time.sleep(phase_s)

    marks.phases.append(("redis", time.monotonic()))
    redis.stop()
    time.sleep(phase_s)
    redis.start()
    time.sleep(phase_s)

    # Each fault's phase begins once the simulator has it: every request from then on meets it.
    sim.patch("fast", faults={"drop_rate": DROP_RATE, "drop_after_tokens": DROP_AFTER})
    marks.phases.append(("drop", time.monotonic()))
    time.sleep(phase_s)
    # Until the fault is met: a fast tier the router has just passed over (one slow sample, re-checked
    # 3 s later: routing/recheck.py) gets no request in a short phase, and its fault is then not tested.
    _met(lambda: _fast_attempts(sim, "dropped"), "drop", marks)
    # Counted now: the simulator keeps its last 1000 attempts, and the wait below can outlast them.
    dropped = _fast_attempts(sim, "dropped")
    # The broken streams opened the fast tier's circuit: let a probe close it, so that the 503s
    # below are met by client requests, not skipped.
    sim.patch("fast", faults={"drop_rate": 0.0})
    marks.phases.append(("heal", time.monotonic()))
    # Served again = new requests sent to it and answered: completions alone were met by the streams
    # already in flight when the fault cleared (0.2 s), with the tier still passed over, and then the
    # 503 phase sent it nothing (seen: "answered 503 to 0 requests").
    healed_at = time.time()
    wait(lambda: _fast_attempts(sim, "ok", since=healed_at) >= 5, "the fast tier serves new requests again", 60)
    marks.events.append(f"the fast tier served again {time.monotonic() - marks.phases[-1][1]:.1f} s after "
                        "its streams stopped breaking")
    sim.patch("fast", faults={"error_rate": 1.0, "error_status": 503})
    marks.phases.append(("503", time.monotonic()))
    refusing_at = time.time()
    time.sleep(phase_s)
    _met(lambda: _fast_attempts(sim, "error", since=refusing_at), "503", marks)
    refused = _fast_attempts(sim, "error", since=refusing_at)
    marks.faults_met = {"dropped": dropped, "503": refused}
    marks.events.append(f"the fast tier dropped {dropped} streams and answered 503 to {refused} requests")
    marks.phases.append(("clear", time.monotonic()))
    sim.patch("fast", faults={"error_rate": 0.0})
    time.sleep(phase_s)
    marks.phases.append(("sigterm", time.monotonic()))
    gw.proc.send_signal(signal.SIGTERM)
    gw.proc.wait(timeout=120)
    marks.events.append(f"SIGTERM: the gateway exited {gw.proc.returncode} after "
                        f"{time.monotonic() - marks.phases[-1][1]:.1f} s")
    if gw.proc.returncode != 0:
        raise RuntimeError(f"the gateway exited {gw.proc.returncode} after SIGTERM: {gw.logs()[-2000:]}")


def _met(count: Callable[[], int], fault: str, marks: Marks) -> None:
    """Extends a fault's phase (past its `phase_s`) until some request met the fault, up to
    FAULT_WAIT_S; says so in the events when it had to."""
    if count():
        return
    began = time.monotonic()
    wait(lambda: count() > 0, f"a request meets the {fault} fault", FAULT_WAIT_S)
    marks.events.append(f"the {fault} phase waited {time.monotonic() - began:.1f} s more for a request "
                        "to meet its fault")


def _fast_attempts(sim: SimProcess, outcome: str, since: float = 0.0) -> int:
    """The fast tier's attempts with `outcome` that arrived at or after `since` (wall clock), of the
    last 1000 the simulator keeps."""
    return sum(1 for a in sim.stats("fast")["attempts"] if a["t"] >= since and a["outcome"] == outcome)


def kinds(record: Record, marks: Marks) -> str:
    """answered | error (a clear one) | killed (in flight on the killed worker) | lost | truncated."""
    if record.connect_failed:
        return "error"  # refused: nothing was sent, the client knows to retry
    if record.transport:  # the connection failed before or during the answer
        in_flight_at_kill = record.started <= marks.kill_at <= record.ended <= marks.kill_at + KILL_WINDOW_S
        return "killed" if in_flight_at_kill else "lost"
    if record.status != 200 or record.error_event:
        return "error"
    return "answered" if record.finish else "truncated"


def price_of(record: Record) -> dict[str, float] | None:
    return PRICES.get(record.endpoint)


def report(records: list[Record], marks: Marks, spent: float, clients: int) -> list[str]:
    """Prints the table; returns the invariants that failed."""
    phases = [name for name, _ in marks.phases]
    rows = {name: {"sent": 0, "answered": 0, "error": 0, "killed": 0, "lost": 0, "truncated": 0,
                   "short": 0, "no_done": 0, "usage_bad": 0, "over_max": 0, "fast_to_std": 0} for name in phases}
    served_usd = 0.0
    failures: list[str] = []
    for r in records:
        row = rows[marks.phase_of(r.started)]
        kind = kinds(r, marks)
        row["sent"] += 1
        row[kind] += 1
        if kind != "answered":
            continue
        usage = r.usage or {}
        if r.tokens != r.max_tokens:  # the simulator's answer to a request with max_tokens has that many
            row["short"] += 1
            failures.append(f"{r.tokens} tokens received where the answer has {r.max_tokens} "
                            f"({r.endpoint}, stream={r.stream}, finish={r.finish})")
        if r.stream and not r.done:
            row["no_done"] += 1
            failures.append(f"a stream without [DONE] ({r.endpoint}, finish={r.finish})")
        if usage.get("completion_tokens") != r.tokens:
            row["usage_bad"] += 1
            if len(failures) < 20:
                failures.append(f"usage {usage} for {r.tokens} tokens received ({r.endpoint}, stream={r.stream})")
        if r.tokens > r.max_tokens or usage.get("completion_tokens", 0) > r.max_tokens:
            row["over_max"] += 1
            failures.append(f"{r.tokens} tokens received for max_tokens {r.max_tokens} ({r.endpoint})")
        if r.fast and r.endpoint.startswith("std"):
            row["fast_to_std"] += 1  # asked for fast, served (or continued) by standard
        price = price_of(r)
        if price is None:
            failures.append(f"an answer from an unknown endpoint {r.endpoint!r}")
            continue
        served_usd += (usage.get("prompt_tokens", 0) * price["input"]
                       + usage.get("completion_tokens", 0) * price["output"]) / 1e6
    columns = ["sent", "answered", "error", "killed", "lost", "truncated", "short", "no_done", "usage_bad",
               "over_max", "fast_to_std"]
    print(f"| phase | {' | '.join(columns)} |")
    print(f"| --- |{' ---: |' * len(columns)}")
    totals = {c: sum(row[c] for row in rows.values()) for c in columns}
    for name, row in [*rows.items(), ("total", totals)]:
        print(f"| {name} | {' | '.join(str(row[c]) for c in columns)} |")
    ratio = spent / served_usd - 1 if served_usd else float("inf")
    print(f"\nspend ${spent:.4f} vs served usage at catalogue prices ${served_usd:.4f}: {ratio:+.2%}")
    for event in marks.events:
        print(event)
    errors: dict[str, int] = {}
    for r in records:
        if kinds(r, marks) in ("error", "killed", "lost"):
            what = f"{r.transport or r.status}{' ' + r.error_code if r.error_code else ''}"
            errors[what] = errors.get(what, 0) + 1
    print("errors by kind: " + (", ".join(f"{k} x{v}" for k, v in sorted(errors.items())) or "none"))
    if totals["lost"]:
        failures.append(f"{totals['lost']} request(s) lost outside the killed worker's in-flight ones")
    if totals["truncated"]:
        failures.append(f"{totals['truncated']} stream(s) silently truncated")
    if totals["usage_bad"]:
        failures.append(f"{totals['usage_bad']} answer(s) whose usage is not the tokens received")
    if marks.broken:
        failures.append(f"the run stopped early: {marks.broken}")
    if abs(ratio) > SPEND_TOLERANCE:
        failures.append(f"spend off by {ratio:+.2%} (limit {SPEND_TOLERANCE:.0%})")
    if totals["killed"] > clients:
        failures.append(f"{totals['killed']} requests blamed on the kill: more than the clients in flight")
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--phase-s", type=float, default=6.0, help="seconds of load in each phase")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--ephemeral-redis", action="store_true",
                        help="a Redis without persistence: its restart loses every key and all spend")
    parser.add_argument("--dump", type=Path, help="write every request's record here (JSON lines)")
    args = parser.parse_args()
    began = time.monotonic()
    records, marks, spent = run(args.clients, args.phase_s, args.seed, args.ephemeral_redis)
    failures = report(records, marks, spent, args.clients)
    if args.dump:
        with args.dump.open("wb") as out:
            for r in records:
                row = {**r.__dict__, "kind": kinds(r, marks), "phase": marks.phase_of(r.started)}
                out.write(orjson.dumps({**row, "started": r.started - marks.phases[0][1],
                                        "ended": r.ended - marks.phases[0][1]}) + b"\n")
            out.write(orjson.dumps({"marks": [(n, t - marks.phases[0][1]) for n, t in marks.phases],
                                    "kill_at": marks.kill_at - marks.phases[0][1]}) + b"\n")
    print(f"\n{len(records)} requests from {args.clients} clients in {time.monotonic() - began:.0f} s")
    for failure in failures:
        print(f"FAIL: {failure}")
    print("all invariants hold" if not failures else f"{len(failures)} invariant failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
