"""serve/workers.py without processes: `--workers` values, the listening sockets, the spend files."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from gateway.cli import build_parser
from gateway.config import Config
from gateway.serve.workers import _listen, worker_count


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


def test_one_port_one_socket_per_worker() -> None:
    sockets = _listen("127.0.0.1", 0, 3)
    try:
        ports = {s.getsockname()[1] for s in sockets}
        assert len(sockets) == 3 and len(set(sockets)) == 3 and len(ports) == 1  # SO_REUSEPORT on Linux
        with socket.create_connection(("127.0.0.1", ports.pop()), timeout=2):
            pass  # the kernel queued it on one of the workers' sockets
    finally:
        for s in sockets:
            s.close()


def test_without_redis_each_worker_keeps_its_own_spend_file(tmp_path: Path) -> None:
    config = Config(catalogue=None, policies=None, keys_file=tmp_path / "keys.json")  # type: ignore[arg-type]
    assert config.spend_file.name == "keys.spend.json"
    workers = [Config(catalogue=None, policies=None, keys_file=tmp_path / "keys.json", worker=i)  # type: ignore[arg-type]
               for i in range(3)]
    assert [c.spend_file.name for c in workers] == ["keys.spend.json", "keys.spend.worker-1.json",
                                                    "keys.spend.worker-2.json"]
