"""`record.Recorder`: the load an attempt ran under, as the router's speed fit gets it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.health.board import HealthBoard
from gateway.record import Recorder
from gateway.telemetry import MemoryStore
from gateway.telemetry.sample import AttemptSample, Outcome
from gateway.upstreams.stream import Meter
from tests.routing.helpers import catalogue, endpoint


class Router:
    def __init__(self) -> None:
        self.samples: list[AttemptSample] = []

    def observe(self, sample: AttemptSample, *args: Any) -> None:
        self.samples.append(sample)


def test_attempts_that_start_at_once_ran_beside_all_the_others(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    now = [10.0]
    monkeypatch.setattr("time.perf_counter", lambda: now[0])
    ep, router = catalogue(tmp_path, [endpoint("a")]).models["m"][0], Router()
    recorder = Recorder(MemoryStore(), router, HealthBoard())  # type: ignore[arg-type]
    # Twelve sent within a moment, all answered a second later: each ran beside the eleven others,
    # though each saw fewer at its start, and fewer at its end as the others finished.
    started = []
    for _ in range(12):
        in_flight = recorder.begin(ep)
        started.append((in_flight, Meter(t_sent=now[0], busy_at_sent=recorder.busy_s(ep))))
    now[0] = 11.0
    for in_flight, meter in started:
        meter.t_first, meter.t_last, meter.t_end, meter.token_chunks = 10.1, 11.0, 11.0, 10
        recorder.record(ep, meter, Outcome.OK, 200, 100.0, in_flight)
    assert [s.load for s in router.samples] == [11.0] * 12
    # Without the integral (an attempt not counted in flight), the counts at start and end.
    probe = recorder.record(ep, Meter(t_sent=10.5, t_end=11.0), Outcome.OK, 200, 100.0, 3)
    assert probe.load == 1.5
