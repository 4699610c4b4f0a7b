"""What the terminal shows: a live progress bar while measuring, then the results table.

Does: `LiveProgress` (a rich progress bar on stderr, so stdout stays clean for the table when piped:
requests done of the whole run, the target and level being measured, errors so far); `print_results`
(one row per target and level, then each comparison and its verdict, then notes: which endpoint
served each target behind the gateway, error kinds, pricing notes).
Does not: compute figures or write files.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from gateway.bench.models import Comparison, LevelStats, RequestResult
from gateway.bench.targets import Target


def console() -> Console:
    # Piped output gets a wide table rather than rich's 80-column default, which truncates cells.
    out = Console()
    return out if out.is_terminal else Console(width=200)


class LiveProgress:
    """A `runner.ProgressSink` drawing one bar for the whole run."""

    def __init__(self, total: int, enabled: bool = True) -> None:
        self._progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("errors {task.fields[errors]}"), TimeElapsedColumn(),
            console=Console(stderr=True), disable=not enabled, transient=False,
        )
        self._task = self._progress.add_task("starting", total=total, errors=0)
        self._errors = 0

    def __enter__(self) -> LiveProgress:
        self._progress.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._progress.update(self._task, description="done")
        self._progress.stop()

    def start_level(self, target: str, level: int, requests: int) -> None:
        self._progress.update(self._task, description=f"{target} c={level} ({requests} requests)")

    def advance(self, result: RequestResult) -> None:
        if not result.ok:
            self._errors += 1
        self._progress.update(self._task, advance=1, errors=self._errors)


def _num(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _cost(value: float | None) -> str:
    return "-" if value is None else f"${value:,.2f}"


def results_table(stats: Sequence[LevelStats]) -> Table:
    table = Table(title="ultraroute bench", title_justify="left")
    for name, justify in (("target", "left"), ("c", "right"), ("n", "right"), ("errors", "right"),
                          ("decode p25/p50\ntok/s/user", "right"), ("TTFT p50/p95\nms", "right"),
                          ("answer p50\nms", "right"), ("e2e p50/p95\ns", "right"),
                          ("aggregate\ntok/s", "right"), ("$/1M out", "right"), ("served by", "left")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for s in stats:
        e2e = "-" if s.e2e_ms_p50 is None else f"{s.e2e_ms_p50 / 1000:.2f} / {(s.e2e_ms_p95 or 0) / 1000:.2f}"
        errors = f"{s.error_rate:.0%}" if s.errors else "0"
        table.add_row(
            s.target, str(s.level), str(s.requests), f"[red]{errors}[/red]" if s.errors else errors,
            f"{_num(s.decode_tps_p25)} / {_num(s.decode_tps_p50)}",
            f"{_num(s.ttft_ms_p50)} / {_num(s.ttft_ms_p95)}", _num(s.answer_ms_p50), e2e,
            _num(s.aggregate_tps), _cost(s.cost_per_1m_output),
            ", ".join(f"{name} {count}" for name, count in s.endpoints) or "-",
        )
    return table


def comparison_table(comparison: Comparison) -> Table:
    table = Table(title=f"{comparison.a} vs {comparison.b}", title_justify="left")
    for name in ("c", "speed x (per user)", "aggregate x", "e2e x", "price x", "errors A / B", "worth it"):
        table.add_column(name, justify="right")
    for row in comparison.levels:
        worth = {True: "[green]yes[/green]", False: "[red]no[/red]", None: "-"}[row.worth_it]
        table.add_row(str(row.level), _num(row.speed_x, 2), _num(row.aggregate_x, 2), _num(row.e2e_x, 2),
                      _num(row.price_x, 2), f"{row.error_rate_a:.0%} / {row.error_rate_b:.0%}", worth)
    return table


def routing_notes(stats: Sequence[LevelStats], targets: Sequence[Target]) -> list[str]:
    """Targets that asked the gateway for `provider.only` but were served by another endpoint."""
    notes = []
    for target in targets:
        if not target.only:
            continue
        served: dict[str, int] = {}
        for s in stats:
            if s.target == target.name:
                for name, count in s.endpoints:
                    served[name] = served.get(name, 0) + count
        strays = {name: n for name, n in served.items() if name not in target.only}
        if strays:
            notes.append(f"{target.name}: asked for provider.only={list(target.only)} but was served by "
                         + ", ".join(f"{name} ({n} requests)" for name, n in sorted(strays.items())))
    return notes


def tier_notes(stats: Sequence[LevelStats], targets: Sequence[Target]) -> list[str]:
    """The tier the provider reported serving each target, against the one it asked for
    ("asked fast, served standard in 20/20"): a silent downgrade shows here."""
    notes = []
    for target in targets:
        served: dict[str, int] = {}
        requests = 0
        for s in stats:
            if s.target == target.name:
                requests += s.requests
                for tier, count in s.served_tiers:
                    served[tier] = served.get(tier, 0) + count
        if not served:
            continue
        asked = target.body.get("service_tier") or target.body.get("speed")
        head = f"{target.name}: asked {asked}, served" if asked else f"{target.name}: served"
        notes.append(head + " " + ", ".join(f"{tier} in {n}/{requests}" for tier, n in sorted(served.items())))
    return notes


BUSY_CLIENT = 0.6  # of one core: above this the client's own delays start to show in the figures


def client_notes(stats: Sequence[LevelStats]) -> list[str]:
    """Levels where this process was busy enough to understate the endpoint's speed."""
    return [f"{s.target} c={s.level}: the bench itself used {s.client_cpu:.0%} of a core; TTFT and "
            "decode figures at this level include client overhead (run it on a bigger machine)"
            for s in stats if s.client_cpu > BUSY_CLIENT]


def print_results(out: Console, stats: Sequence[LevelStats], comparisons: Sequence[Comparison],
                  notes: Sequence[str]) -> None:
    out.print(results_table(stats))
    for comparison in comparisons:
        out.print(comparison_table(comparison))
        out.print(f"[bold]verdict:[/bold] {comparison.verdict}", highlight=False)
    kinds: dict[str, dict[str, int]] = {}
    for s in stats:
        for kind, count in s.error_kinds:
            kinds.setdefault(s.target, {})[kind] = kinds.get(s.target, {}).get(kind, 0) + count
    for target, counts in kinds.items():
        out.print(f"[red]errors[/red] {target}: " + ", ".join(f"{k} x{n}" for k, n in counts.items()),
                  highlight=False)
    for note in notes:
        out.print(f"[yellow]note[/yellow]: {note}", highlight=False)
