"""An outage is logged once when it starts and once when it ends; every failure is counted."""

from __future__ import annotations

import logging

import pytest

from gateway.background import Outage


def test_logged_once_per_outage_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    counted: list[int] = []
    outage = Outage(logging.getLogger("t"), "usage sharing", "limits are per replica")
    outage.on_error = lambda: counted.append(1)
    with caplog.at_level(logging.WARNING, "t"):
        outage.ok()
        for _ in range(3):
            outage.failed(ConnectionError("refused"))
        outage.ok()
        outage.ok()
        outage.failed("keys.json: gone")
    assert [r.getMessage() for r in caplog.records] == [
        "usage sharing: Redis unreachable (ConnectionError); limits are per replica",
        "usage sharing: Redis reachable again",
        "usage sharing: Redis unreachable (keys.json: gone); limits are per replica",
    ]
    assert outage.errors == 4 and len(counted) == 4 and outage.down
