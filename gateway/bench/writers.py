"""The bench's files: `results.json` (everything) and `results.csv` (one row per target and level).

JSON keys: `version`, `started_at`, `settings`, `targets` (base_url, model, body, pricing; API
key env var NAMES only), `levels` (every `LevelStats` field; `endpoints` and `error_kinds` as
objects), `comparisons` (one per `--compare` pair: a, b, levels, verdict) and `requests` (every
request, for re-analysis).
CSV columns: `CSV_COLUMNS`, in that order; empty cell = not measurable; `endpoints` and
`error_kinds` as `name=count;name=count`.
Does: serialise. Does not: compute any figure or decide file names beyond the two defaults.
"""

from __future__ import annotations

import csv
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import orjson

from gateway.bench.models import BenchReport, LevelStats

JSON_VERSION = 1
CSV_COLUMNS: tuple[str, ...] = (
    "target", "model", "base_url", *(f.name for f in fields(LevelStats) if f.name != "target"),
)


def _pairs(items: tuple[tuple[str, int], ...]) -> str:
    return ";".join(f"{name}={count}" for name, count in items)


def _level_json(stats: LevelStats) -> dict[str, Any]:
    data = asdict(stats)
    data["endpoints"] = dict(stats.endpoints)
    data["error_kinds"] = dict(stats.error_kinds)
    data["served_tiers"] = dict(stats.served_tiers)
    return data


def report_json(report: BenchReport) -> dict[str, Any]:
    requests = [
        {**asdict(r), "decode_tps": r.decode_tps} for run in report.runs for r in run.results
    ]
    return {
        "version": JSON_VERSION,
        "started_at": report.started_at,
        "settings": report.settings,
        "targets": list(report.targets),
        "levels": [_level_json(s) for s in report.levels],
        "comparisons": [asdict(c) for c in report.comparisons],
        "requests": requests,
    }


def write_json(path: Path, report: BenchReport) -> Path:
    path.write_bytes(orjson.dumps(report_json(report), option=orjson.OPT_INDENT_2) + b"\n")
    return path


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, float):
        return round(value, 4)
    return value


def write_csv(path: Path, report: BenchReport) -> Path:
    by_name = {t["name"]: t for t in report.targets}
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(CSV_COLUMNS)
        for stats in report.levels:
            target = by_name.get(stats.target, {})
            row = {**asdict(stats), "model": target.get("model", ""), "base_url": target.get("base_url", ""),
                   "endpoints": _pairs(stats.endpoints), "error_kinds": _pairs(stats.error_kinds),
                   "served_tiers": _pairs(stats.served_tiers)}
            writer.writerow([_cell(row[column]) for column in CSV_COLUMNS])
    return path
