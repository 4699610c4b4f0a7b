"""`ultraroute serve` refuses a malformed `REDIS_URL` when the process starts (README, "Redis"): it exits
with an error naming `REDIS_URL` before it listens, with one process or with workers, rather than run
without the Redis it was told to share."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.harness import ROOT, free_port

CATALOGUE = {"providers": {"p": {"base_url": "http://127.0.0.1:9/v1"}},
             "models": {"m": {"endpoints": [{"provider": "p", "model": "x", "price": {"input": 1, "output": 1}}]}}}


@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.parametrize("url", ["http://redis:6379", "redis+sentinel://s1:26379", "redis://host:notaport"])
def test_a_malformed_redis_url_stops_the_process_at_start(tmp_path: Path, url: str, workers: str) -> None:
    config = tmp_path / "providers.yaml"
    config.write_text(yaml.safe_dump(CATALOGUE))
    port = free_port()
    done = subprocess.run([sys.executable, "-m", "gateway", "serve", "--config", str(config), "--port", str(port),
                           "--open", "--workers", workers, "--policies", str(ROOT / "policies")],
                          env={"PATH": "/usr/bin:/bin", "REDIS_URL": url}, cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode != 0, done.stderr[-2000:]
    assert "REDIS_URL" in done.stderr and "Traceback" not in done.stderr, done.stderr[-2000:]
    with socket.socket() as s:  # nothing was left listening
        assert s.connect_ex(("127.0.0.1", port)) != 0
