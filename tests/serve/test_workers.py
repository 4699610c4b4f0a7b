"""serve/workers.py without processes: `--workers` values, a port in use, the spend files."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
import yaml

from gateway.cli import build_parser
from gateway.config import Config
from gateway.serve.workers import ServeOptions, load, serve, worker_count


def test_worker_count() -> None:
    assert worker_count("3") == 3
    assert worker_count("auto") == len(os.sched_getaffinity(0)) >= 1
    for bad in ("0", "-1", "many"):
        with pytest.raises(ValueError):
            worker_count(bad)


def test_serve_flags() -> None:
    parser = build_parser()
    assert parser.parse_args(["serve"]).workers == 1
    assert parser.parse_args(["serve", "--workers", "4", "--worker-ports", "9101"]).workers == 4
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", "--workers", "none"])


def test_a_port_in_use_is_refused_before_any_worker_starts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "providers.yaml").write_text(yaml.safe_dump({
        "providers": {"p": {"base_url": "http://p.test/v1"}},
        "models": {"m": {"endpoints": [{"provider": "p", "model": "up", "price": {"input": 1, "output": 2}}]}}}))
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        options = ServeOptions(config=str(tmp_path / "providers.yaml"), policies=None, open_access=True,
                               host="127.0.0.1", port=port, log_level="warning")
        assert serve(options, 2, load(options)) == 1
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err


def test_without_redis_each_worker_keeps_its_own_spend_file(tmp_path: Path) -> None:
    config = Config(catalogue=None, policies=None, keys_file=tmp_path / "keys.json")  # type: ignore[arg-type]
    assert config.spend_file.name == "keys.spend.json"
    workers = [Config(catalogue=None, policies=None, keys_file=tmp_path / "keys.json", worker=i)  # type: ignore[arg-type]
               for i in range(3)]
    assert [c.spend_file.name for c in workers] == ["keys.spend.json", "keys.spend.worker-1.json",
                                                    "keys.spend.worker-2.json"]
