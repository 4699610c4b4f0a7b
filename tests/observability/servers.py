"""Real Prometheus and headless Chromium for the observability tests (Debian's packages).

`PrometheusServer` runs a private `prometheus` (never the system service the
package may have started) scraping given targets every second, and queries its HTTP API.
`chromium()` runs one headless Chromium command against a URL.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.harness import ensure_binary, free_port, terminate, wait_ready


class PrometheusServer:
    def __init__(self, targets: list[str], scrape_interval: str = "1s") -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="ultraroute-prom-"))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = {
            "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
            "scrape_configs": [{"job_name": "ultraroute", "scrape_timeout": "900ms",
                                "static_configs": [{"targets": targets}]}],
        }
        (self.dir / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> PrometheusServer:
        binary = ensure_binary("prometheus", "prometheus")
        log = (self.dir / "prometheus.log").open("wb")
        self.proc = subprocess.Popen(
            [binary, f"--config.file={self.dir / 'prometheus.yml'}", f"--storage.tsdb.path={self.dir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        wait_ready(self.proc, f"{self.url}/-/ready", 30, "prometheus", self.log, poll_s=0.1)
        return self

    def stop(self) -> None:
        terminate(self.proc)
        self.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def log(self) -> str:
        path = self.dir / "prometheus.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def query_raw(self, promql: str) -> dict[str, Any]:
        return dict(httpx.get(f"{self.url}/api/v1/query", params={"query": promql}, timeout=10).json())

    def query(self, promql: str) -> list[dict[str, Any]]:
        """The result vector of an instant query (raises on a PromQL error)."""
        body = self.query_raw(promql)
        if body.get("status") != "success":
            raise AssertionError(f"{promql}: {body.get('error')}")
        return list(body["data"]["result"])

    def scalar(self, promql: str) -> float:
        """The value of a query that yields one series (0 when it yields none)."""
        result = self.query(promql)
        return float(result[0]["value"][1]) if result else 0.0

    def wait_for(self, promql: str, predicate: Callable[[list[dict[str, Any]]], bool],
                 timeout: float = 20.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while True:
            result = self.query(promql)
            if predicate(result):
                return result
            if time.monotonic() > deadline:
                raise TimeoutError(f"{promql} never matched: {result}")
            time.sleep(0.25)


def by_label(result: list[dict[str, Any]], label: str) -> dict[str, float]:
    return {row["metric"].get(label, ""): float(row["value"][1]) for row in result}


def chromium(url: str, action: list[str], timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """One headless Chromium run (`action`: e.g. ["--dump-dom"] or ["--screenshot=x.png"])."""
    binary = ensure_binary("chromium", "chromium")
    profile = tempfile.mkdtemp(prefix="ultraroute-chromium-")
    try:
        return subprocess.run(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--disable-dev-shm-usage", "--hide-scrollbars", f"--user-data-dir={profile}",
             "--virtual-time-budget=5000", *action, url],
            capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, check=False)
    finally:
        shutil.rmtree(profile, ignore_errors=True)
