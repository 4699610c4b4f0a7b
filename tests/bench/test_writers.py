from __future__ import annotations

import csv
import json
from pathlib import Path

from gateway.bench.compare import compare
from gateway.bench.models import BenchReport
from gateway.bench.writers import write_csv, write_json
from tests.bench.factories import result, run, stats

EXPECTED_COLUMNS = [
    "target", "model", "base_url", "level", "requests", "errors", "error_rate", "decode_tps_p25",
    "decode_tps_p50", "ttft_ms_p50", "ttft_ms_p95", "answer_ms_p50", "answer_ms_p95", "e2e_ms_p50",
    "e2e_ms_p95", "output_tokens", "prompt_tokens", "wall_s", "aggregate_tps", "client_cpu", "pricing",
    "cost_per_1m_output", "blended_cost_per_1m_output", "endpoints", "error_kinds", "served_tiers",
]
EXPECTED_LEVEL_KEYS = {c for c in EXPECTED_COLUMNS if c not in ("model", "base_url")}


def _report() -> BenchReport:
    levels = (
        stats(target="ultra", decode_tps_p50=400.0),
        stats(target="std", decode_tps_p50=100.0, cost_per_1m_output=None, pricing="", endpoints=(),
              errors=1, error_rate=0.25, error_kinds=(("http 503", 1),)),
    )
    return BenchReport(
        started_at="2026-01-01T00:00:00+00:00",
        settings={"levels": [1], "requests": 4, "max_tokens": 100, "timeout_s": 60.0},
        targets=(
            {"name": "ultra", "base_url": "http://a/v1", "model": "m", "body": {"speed": "ultrafast"}},
            {"name": "std", "base_url": "http://b/v1", "model": "m2", "body": {}},
        ),
        levels=levels,
        comparisons=(compare(levels, "ultra", "std"),),
        runs=(run([result(target="ultra", endpoint="sim/fast")], target="ultra"),),
    )


def test_csv_columns_and_rows(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "results.csv", _report())
    with path.open(newline="") as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == EXPECTED_COLUMNS
    assert len(rows) == 3
    ultra = dict(zip(rows[0], rows[1], strict=True))
    assert ultra["target"] == "ultra" and ultra["model"] == "m" and ultra["base_url"] == "http://a/v1"
    assert ultra["level"] == "1" and ultra["decode_tps_p50"] == "400.0"
    assert ultra["cost_per_1m_output"] == "9.6"
    assert ultra["endpoints"] == "sim/fast=4" and ultra["error_kinds"] == ""
    std = dict(zip(rows[0], rows[2], strict=True))
    assert std["cost_per_1m_output"] == "" and std["pricing"] == ""  # empty = not measurable
    assert std["error_rate"] == "0.25" and std["error_kinds"] == "http 503=1"


def test_json_keys_and_contents(tmp_path: Path) -> None:
    data = json.loads(write_json(tmp_path / "results.json", _report()).read_text())
    assert set(data) == {"version", "started_at", "settings", "targets", "levels", "comparisons", "requests"}
    assert data["version"] == 1
    assert data["settings"]["max_tokens"] == 100
    assert [t["name"] for t in data["targets"]] == ["ultra", "std"]
    assert data["targets"][0]["body"] == {"speed": "ultrafast"}
    assert all(set(level) == EXPECTED_LEVEL_KEYS for level in data["levels"])
    assert data["levels"][0]["endpoints"] == {"sim/fast": 4}
    assert data["levels"][1]["error_kinds"] == {"http 503": 1}
    assert data["levels"][1]["cost_per_1m_output"] is None
    (comparison,) = data["comparisons"]
    assert set(comparison) == {"a", "b", "levels", "verdict"}
    assert comparison["levels"][0]["speed_x"] == 4.0
    assert comparison["verdict"].startswith("ultra is 4.0x as fast per user as std")
    (request,) = data["requests"]
    assert request["endpoint"] == "sim/fast" and request["ok"] is True
    assert request["decode_tps"] == 400.0  # (101 - 1) / 0.25
    timing = {"ttft_s", "answer_s", "e2e_s", "output_tokens", "usage_reported", "error", "status"}
    assert timing <= set(request)
