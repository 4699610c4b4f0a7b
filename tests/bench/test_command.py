"""The `ultraroute bench` command as a user runs it: failures are rows, not crashes; exit status."""

from __future__ import annotations

import csv
import gc
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.bench.command import frozen_heap
from gateway.cli import main
from gateway.simulator.testing import SimProcess, free_port, make_sim_config

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    config = make_sim_config({
        "good": {"ttft_ms": 50, "ttft_jitter": 0, "tokens_per_second": 400},
        "broken": {"ttft_ms": 10, "faults": {"error_rate": 1.0, "error_status": 503}},
        "hung": {"ttft_ms": 10, "faults": {"hang_rate": 1.0}},
    })
    with SimProcess(config) as process:
        yield process


def test_failing_targets_are_error_rows_and_the_run_completes(sim: SimProcess, tmp_path: Path) -> None:
    closed = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    args = [
        sys.executable, "-m", "gateway", "bench", "--model", "m", "--no-progress",
        "--target", f"good:base_url={sim.base_url('good')}",
        "--target", f"broken:base_url={sim.base_url('broken')}",
        "--target", f"gone:base_url={closed}",
        "--target", f"hung:base_url={sim.base_url('hung')}",
        "--price", "good=1/2", "--hourly-cost", "gone=10",
        "--levels", "1,2", "--requests", "2", "--max-tokens", "20", "--timeout", "0.5",
        "--out", str(tmp_path),
    ]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    levels = json.loads((tmp_path / "results.json").read_text())["levels"]
    by_key = {(s["target"], s["level"]): s for s in levels}
    assert len(by_key) == 8
    for level in (1, 2):
        assert by_key[("good", level)]["error_rate"] == 0.0
        for name, kind in (("broken", "http 503"), ("gone", "connect"), ("hung", "timeout")):
            row = by_key[(name, level)]
            assert row["error_rate"] == 1.0 and row["errors"] == 2
            assert row["error_kinds"] == {kind: 2}
            assert row["decode_tps_p50"] is None and row["cost_per_1m_output"] is None
    with (tmp_path / "results.csv").open(newline="") as handle:
        rows = {(r["target"], r["level"]): r for r in csv.DictReader(handle)}
    assert rows[("gone", "1")]["error_rate"] == "1.0" and rows[("gone", "1")]["error_kinds"] == "connect=2"
    # The table shows them too, with the first error message of each failing target.
    assert "100%" in done.stdout
    assert "broken: first error (c=1): http 503: Simulated upstream error 503" in done.stdout
    assert "gone: first error (c=1): connect" in done.stdout
    assert (tmp_path / "chart.png").stat().st_size > 10_000


def test_every_target_failing_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["bench", "--base-url", f"http://127.0.0.1:{free_port()}/v1", "--model", "m",
                 "--levels", "1", "--requests", "1", "--no-progress", "--out", str(tmp_path)])
    assert code == 1
    out = capsys.readouterr().out
    assert "default: first error (c=1): connect" in out
    assert (tmp_path / "results.json").exists()  # the files are written all the same


@pytest.mark.parametrize("extra, message", [
    (["--compare", "a", "nope"], "--compare names unknown targets: nope"),
    (["--price", "a=cheap"], "--price 'a=cheap'"),
    (["--targets", "/nonexistent/targets.yaml"], "cannot read"),
    (["--target", "b:speed=warp"], "speed must be one of"),
    (["--catalogue", "/nonexistent/providers.yaml"], "providers.yaml"),
])
def test_bad_input_exits_2_with_a_message(extra: list[str], message: str, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["bench", "--base-url", "http://127.0.0.1:1/v1", "--model", "m", "--target", "a",
                 "--out", str(tmp_path), *extra])
    assert code == 2
    assert message in capsys.readouterr().err


def test_api_key_is_read_from_the_named_variable_only(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from gateway.bench.runner import request_headers
    from gateway.bench.targets import Target

    target = Target("a", "http://x/v1", "m", api_key_env="BENCH_TEST_KEY")
    assert request_headers(target, {"BENCH_TEST_KEY": "sk-1"})["authorization"] == "Bearer sk-1"
    assert "authorization" not in request_headers(target, {})
    monkeypatch.delenv("BENCH_TEST_KEY", raising=False)
    main(["bench", "--base-url", f"http://127.0.0.1:{free_port()}/v1", "--model", "m", "--api-key-env",
          "BENCH_TEST_KEY", "--levels", "1", "--requests", "1", "--no-progress", "--out", str(tmp_path)])
    assert "BENCH_TEST_KEY is not set" in capsys.readouterr().out
    described = json.loads((tmp_path / "results.json").read_text())["targets"][0]
    assert described["api_key_env"] == "BENCH_TEST_KEY"


def test_what_the_process_built_before_the_run_is_not_collected_while_it_measures() -> None:
    """A full collection of a large process (a test session) paused the client mid-measurement."""
    built_before = [[] for _ in range(1000)]
    with frozen_heap():
        assert gc.get_freeze_count() >= len(built_before)  # out of every collection's scan
    assert gc.get_freeze_count() == 0  # and back in afterwards: the caller's process is as it was
    gc.freeze()  # a process that froze its own heap (as `ultraroute serve` does) keeps it frozen
    try:
        with frozen_heap():
            pass
        assert gc.get_freeze_count() >= len(built_before)
    finally:
        gc.unfreeze()
