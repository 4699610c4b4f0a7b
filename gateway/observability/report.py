"""Terminal tables (rich) for `ultraroute check`, `policies` and `stats`. Printing only."""

from __future__ import annotations

import time
from typing import Any

import httpx
from rich.console import Console
from rich.live import Live
from rich.table import Table

from gateway.config import Catalogue
from gateway.policy import PolicySet


def _console() -> Console:
    # Piped output gets a wide table rather than rich's 80-column default, which truncates every cell.
    console = Console()
    return console if console.is_terminal else Console(width=180)


def _price(endpoint_price: object, hourly: float | None) -> str:
    if hourly is not None:
        return f"${hourly:g}/h"
    price = endpoint_price
    cached = getattr(price, "cached_input", None)
    cached_text = "-" if cached is None else f"{cached:g}"
    return f"{price.input:g} / {cached_text} / {price.output:g}"  # type: ignore[attr-defined]


def print_catalogue(catalogue: Catalogue, source: str) -> None:
    table = Table(title=f"{source}: {len(catalogue.models)} models, "
                        f"{len(catalogue.endpoints())} endpoints")
    for column in ("model", "endpoint", "tier", "upstream model", "USD/1M in / cached / out",
                   "region", "quant", "advertised", "available"):
        table.add_column(column)
    for endpoint in catalogue.endpoints():
        adv = endpoint.advertised
        advertised = " ".join(filter(None, [
            f"{adv.tokens_per_second:g} tok/s" if adv.tokens_per_second else "",
            f"{adv.ttft_ms:g} ms" if adv.ttft_ms else "",
        ]))
        table.add_row(endpoint.model, endpoint.id, endpoint.tier.value, endpoint.upstream_model,
                      _price(endpoint.price, endpoint.hourly_cost), endpoint.region,
                      endpoint.quantization or "-", advertised or "-",
                      "yes" if endpoint.available else "no key")
    _console().print(table)


def print_policies(policies: PolicySet) -> None:
    table = Table(title="named policies")
    for column in ("name", "speed", "sort", "description"):
        table.add_column(column)
    for name, policy in sorted(policies.policies.items()):
        table.add_row(name, policy.speed.value if policy.speed else "-",
                      policy.sort_key.value if policy.sort_key else "-", policy.description)
    _console().print(table)


def _p(stats: dict[str, Any], metric: str, q: str) -> str:
    values = stats.get(metric) or {}
    return f"{values[q]:,.0f}" if q in values else "-"


def stats_table(rows: list[dict[str, Any]], source: str) -> Table:
    table = Table(title=f"live endpoint stats from {source}")
    for column in ("model", "endpoint", "tier", "req", "err %", "in flight", "TTFT p50 ms", "TTFT p95 ms",
                   "decode p25 tok/s", "decode p50 tok/s", "e2e p50 ms", "age s"):
        table.add_column(column, justify="left" if column in ("model", "endpoint", "tier") else "right")
    for row in rows:
        s = row.get("stats") or {}
        age = s.get("age_s")
        table.add_row(
            row["model"], row["id"], row["tier"], str(s.get("requests", 0)),
            f"{100 * s.get('error_rate', 0):.1f}", str(s.get("in_flight", 0)),
            _p(s, "ttft_ms", "p50"), _p(s, "ttft_ms", "p95"),
            _p(s, "decode_tps", "p25"), _p(s, "decode_tps", "p50"), _p(s, "e2e_ms", "p50"),
            "-" if age is None else f"{age:.1f}",
            style=None if row.get("available", True) else "dim",
        )
    return table


def watch_stats(url: str, interval_s: float = 1.0, once: bool = False) -> None:
    """Poll `GET /v1/endpoints` and redraw the table until Ctrl-C (`once`: print one table)."""
    endpoint = url.rstrip("/") + "/v1/endpoints"

    def fetch() -> Table:
        try:
            rows = httpx.get(endpoint, timeout=5).raise_for_status().json()["data"]
        except (httpx.HTTPError, ValueError, KeyError) as exc:
            return Table(title=f"{endpoint}: {type(exc).__name__}: {exc}")
        return stats_table(rows, url)

    console = _console()
    if once:
        console.print(fetch())
        return
    with Live(fetch(), console=console, refresh_per_second=4) as live:
        while True:
            time.sleep(interval_s)
            live.update(fetch())
