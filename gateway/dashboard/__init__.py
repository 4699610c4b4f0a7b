"""The built-in live page at `GET /dashboard`, for users without Grafana.

Does: read `index.html` (one file, inline CSS and JS, no build step, nothing fetched from a CDN) once,
when the app is created. The page itself polls `GET /v1/endpoints` and draws the per-endpoint table
and the speed-over-time charts (inline SVG) in the browser.
Does not: compute or store anything server side; the history in the charts lives in the open page.
"""

from __future__ import annotations

from importlib.resources import files

MEDIA_TYPE = "text/html; charset=utf-8"


def load_page() -> bytes:
    return files(__package__).joinpath("index.html").read_bytes()
