"""The PNG chart: speed against cost per 1M output tokens, one point per concurrency level.

Two panels sharing the x axis (USD per 1M output tokens): per-user decode p50 (tok/s) and
aggregate output (tok/s). One series per target, each point labelled with its level (c=N).
Per-token pricing puts a target's points on one vertical line (its price does not move with load);
hourly pricing spreads them (busier = cheaper per token). Targets without a price cannot be placed
on a cost axis: they are listed under the chart; when no target has one, the x axis becomes the
concurrency level instead.
Does: draw with matplotlib's object API on the Agg canvas (no pyplot, no display, no global state).
Does not: compute any figure.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from gateway.bench.models import LevelStats

_WIDE = 10.0  # a range wider than this ratio gets a log axis, so the small values stay readable


def _targets(stats: Sequence[LevelStats]) -> list[str]:
    return list(dict.fromkeys(s.target for s in stats))


def _number(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _scale(ax: Axes, which: str, values: Sequence[float], money: bool) -> None:
    """Log scale for wide ranges, with 1-2-5 ticks; plain numbers (or dollars), never 10^x."""
    axis = ax.xaxis if which == "x" else ax.yaxis
    positive = [v for v in values if v > 0]
    if positive and max(positive) / min(positive) > _WIDE:
        (ax.set_xscale if which == "x" else ax.set_yscale)("log")
        axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        axis.set_minor_formatter(NullFormatter())
    axis.set_major_formatter(FuncFormatter(lambda v, _: ("$" if money else "") + _number(v)))


def write_chart(path: Path, stats: Sequence[LevelStats], title: str = "ultraroute bench") -> Path:
    targets = _targets(stats)
    priced = {s.target for s in stats if s.cost_per_1m_output is not None}
    by_cost = bool(priced)
    fig = Figure(figsize=(12, 5.2), dpi=110)
    FigureCanvasAgg(fig)
    panels = fig.subplots(1, 2)
    metrics = (("decode_tps_p50", "per-user decode p50 (tok/s)"),
               ("aggregate_tps", "aggregate output (tok/s)"))
    xs_all: list[float] = []
    for ax, (field, label) in zip(panels, metrics, strict=True):
        ys_all: list[float] = []
        for target in targets:
            points = []
            for s in sorted((s for s in stats if s.target == target), key=lambda s: s.level):
                x = s.cost_per_1m_output if by_cost else float(s.level)
                y = getattr(s, field)
                if x is not None and y is not None:
                    points.append((x, y, s.level))
            if not points:
                continue
            xs, ys = [p[0] for p in points], [p[1] for p in points]
            xs_all += xs
            ys_all += ys
            (line,) = ax.plot(xs, ys, marker="o", linewidth=1.8, label=target)
            for i, (x, y, level) in enumerate(points):
                # Alternate sides: a per-token target's points share one x, and neighbours' labels
                # would otherwise print over each other.
                right = i % 2 == 0
                ax.annotate(f"c={level}", (x, y), textcoords="offset points", xytext=(6 if right else -6, 3),
                            ha="left" if right else "right", fontsize=8, color=line.get_color())
        ax.set_ylabel(label)
        ax.set_xlabel("cost per 1M output tokens (USD)" if by_cost else "concurrency (no prices given)")
        ax.set_title(label.split(" (")[0] + (" vs cost" if by_cost else " vs concurrency"))
        ax.grid(True, alpha=0.3)
        ax.margins(x=0.12, y=0.08)  # room for the c=N labels of the outermost points
        _scale(ax, "y", ys_all, money=False)
        _scale(ax, "x", xs_all, money=by_cost)
        if ys_all:
            ax.legend(title="target")
    missing = [t for t in targets if t not in priced]
    if by_cost and missing:
        fig.text(0.01, 0.01, f"not plotted (no price): {', '.join(missing)}", fontsize=8)
    fig.suptitle(f"{title}: speed vs cost per concurrency level")
    fig.tight_layout(rect=(0, 0.03, 1, 0.97))
    fig.savefig(path, format="png")
    return path
