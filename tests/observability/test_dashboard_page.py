"""The built-in live page (`GET /dashboard`) in a real headless Chromium, after real traffic.

The page is self-contained (no CDN: the machine has no network), polls `/v1/endpoints` and must show
a row for every endpoint, with the request counts the gateway reports. The screenshot is kept in
`artifacts/dashboard.png` for a human to look at.
"""

from __future__ import annotations

import asyncio
import re
import threading
from html.parser import HTMLParser
from pathlib import Path

import httpx

from tests.harness import ROOT, GatewayProcess
from tests.observability.servers import chromium
from tests.test_e2e_routing import burst, served

USER = [{"role": "user", "content": "Summarise the incident report."}]
ARTIFACT = ROOT / "artifacts" / "dashboard.png"


class _Rows(HTMLParser):
    """Collects `<tr data-key=... data-requests=...>` of the endpoint table, and script/link sources."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, int] = {}
        self.external: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "tr" and a.get("data-key"):
            self.rows[str(a["data-key"])] = int(a.get("data-requests") or 0)
        if tag in ("script", "link", "img") and (a.get("src") or a.get("href")):
            self.external.append(str(a.get("src") or a.get("href")))


def _traffic(gateway: GatewayProcess) -> None:
    fast = {"model": "m", "messages": USER, "speed": "fast", "provider": {"only": ["fast"]}}
    std = {"model": "m", "messages": USER, "provider": {"only": ["std"]}}
    served(asyncio.run(burst(gateway.base_url, [fast] * 6 + [std] * 4, 4)))


def test_page_is_self_contained(gateway: GatewayProcess) -> None:
    r = httpx.get(f"{gateway.url}/dashboard")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    page = _Rows()
    page.feed(r.text)
    assert page.external == []  # no CDN, no second file
    assert "http://" not in r.text.replace("http://www.w3.org/2000/svg", "")
    assert "https://" not in r.text


def test_dashboard_shows_every_endpoint_with_traffic(gateway: GatewayProcess) -> None:
    _traffic(gateway)
    view = httpx.get(f"{gateway.url}/v1/endpoints").json()["data"]
    expected = {e["key"]: e["stats"]["requests"] for e in view}
    assert expected["m/fast"] > 0 and expected["m/std"] > 0 and expected["m2/idle"] == 0

    result = chromium(f"{gateway.url}/dashboard?interval=500", ["--dump-dom"])
    assert result.returncode == 0, result.stderr[-2000:]
    page = _Rows()
    page.feed(result.stdout)
    assert set(page.rows) == set(expected), (page.rows, result.stdout[-2000:])
    busy = {key for key, n in page.rows.items() if n > 0}
    assert busy == {key for key, n in expected.items() if n > 0}
    for key in busy:  # the counts the page shows are the gateway's (no traffic in between)
        assert page.rows[key] == expected[key], (key, page.rows, expected)
    status = re.search(r'id="status"[^>]*>([^<]*)<', result.stdout)
    assert status and status.group(1).startswith("updated"), status  # a failed poll says "cannot read"
    assert 'data-tier="fast"' in result.stdout and 'data-tier="standard"' in result.stdout


def test_screenshot_artifact(gateway: GatewayProcess) -> None:
    """Traffic keeps flowing while the page is open, so the charts have lines to draw."""
    ARTIFACT.parent.mkdir(exist_ok=True)
    ARTIFACT.unlink(missing_ok=True)
    stop = threading.Event()
    failures: list[BaseException] = []
    rounds = [0]

    def keep_busy() -> None:
        """An assertion failing in a thread would only warn: failures go to the test's own thread."""
        try:
            while not stop.is_set():
                _traffic(gateway)
                rounds[0] += 1
        except BaseException as exc:  # reported by the test's own thread
            failures.append(exc)

    worker = threading.Thread(target=keep_busy, daemon=True)
    worker.start()
    try:
        result = chromium(f"{gateway.url}/dashboard?interval=400",
                          [f"--screenshot={ARTIFACT}", "--window-size=1280,900"])
    finally:
        stop.set()
        worker.join(timeout=30)
    assert not worker.is_alive() and failures == [] and rounds[0] >= 1, (failures, rounds)
    assert result.returncode == 0, result.stderr[-2000:]
    assert ARTIFACT.exists() and ARTIFACT.stat().st_size > 10_000
    assert Path(ARTIFACT).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
