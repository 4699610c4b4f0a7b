"""`ultraroute bench` end to end: arguments -> targets -> measurement -> table, files, exit status.

Does: resolve targets (flags, targets file, catalogue prices), load prompts, run the bench under a
live progress bar, summarise every (target, level), compare each --compare pair, print the table
and write `results.json`, `results.csv` and `chart.png` into `--out`.
Exit status: 0 when the run completed, whatever the error rates (failures are figures in the
table); 1 when every request of every target failed (nothing was measured); 2 on bad input.
Does not: measure or compute figures itself; each step is its own module.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from gateway.bench.catalogue import price_targets
from gateway.bench.chart import write_chart
from gateway.bench.compare import compare
from gateway.bench.metrics import summarize
from gateway.bench.models import BenchReport, LevelRun
from gateway.bench.prompts import load_prompts
from gateway.bench.runner import RunSettings, run_bench
from gateway.bench.table import LiveProgress, client_notes, console, print_results, routing_notes, tier_notes
from gateway.bench.targets import (
    BenchConfigError,
    Target,
    TargetDraft,
    build_targets,
    load_targets_file,
    parse_price_specs,
    parse_target_spec,
)
from gateway.bench.writers import write_csv, write_json


def resolve_targets(args: argparse.Namespace) -> tuple[list[Target], list[str]]:
    drafts: list[TargetDraft] = []
    file_defaults: dict[str, str | None] = {"base_url": None, "model": None, "api_key_env": None}
    catalogue = Path(args.catalogue) if args.catalogue else None
    if args.targets:
        path = Path(args.targets)
        parsed, drafts = load_targets_file(path)
        file_defaults = {"base_url": parsed.base_url, "model": parsed.model,
                         "api_key_env": parsed.api_key_env}
        if parsed.catalogue and catalogue is None:
            catalogue = path.parent / parsed.catalogue
    drafts += [parse_target_spec(spec) for spec in args.target]
    if not drafts:
        drafts = [parse_target_spec("default")]
    targets = build_targets(
        drafts,
        base_url=args.base_url or file_defaults["base_url"],
        model=args.model or file_defaults["model"],
        api_key_env=args.api_key_env or file_defaults["api_key_env"],
        prices=parse_price_specs(args.price, args.hourly_cost),
    )
    notes: list[str] = []
    if catalogue is not None:
        targets, notes = price_targets(targets, catalogue)
    for target in targets:
        if target.api_key_env and not os.environ.get(target.api_key_env):
            notes.append(f"{target.name}: {target.api_key_env} is not set; requests go without a key")
    names = {t.name for t in targets}
    unknown = [name for pair in args.compare for name in pair if name not in names]
    if unknown:
        raise BenchConfigError(f"--compare names unknown targets: {', '.join(unknown)}")
    return targets, notes


def _first_errors(runs: Sequence[LevelRun]) -> list[str]:
    seen: dict[str, str] = {}
    for run in runs:
        for result in run.results:
            if result.error and run.target not in seen:
                seen[run.target] = f"{run.target}: first error (c={run.level}): {result.error}"
    return list(seen.values())


@contextmanager
def frozen_heap() -> Iterator[None]:
    """While measuring, what the process built before is left out of garbage collection. A full
    collection scans every tracked object: in a large process (the bench run inside a test session,
    or as a library) it paused the client for up to ~0.2 s, and streams whose first token was read
    that late showed a decode rate ~45% too fast. A process that froze its own heap keeps it so."""
    ours = gc.get_freeze_count() == 0
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        if ours:
            gc.unfreeze()


def run(args: argparse.Namespace) -> int:
    try:
        targets, notes = resolve_targets(args)
        prompts = load_prompts(Path(args.prompts) if args.prompts else None)
        out_dir = Path(args.out)
        out_dir.mkdir(parents=True, exist_ok=True)
    except (BenchConfigError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for note in notes:  # before the run, so that a missing key is seen before minutes are spent
        print(f"note: {note}", file=sys.stderr)
    settings = RunSettings(levels=args.levels, requests=args.requests, max_tokens=args.max_tokens,
                           timeout_s=args.timeout)
    started = datetime.now(UTC).isoformat(timespec="seconds")
    total = sum(settings.requests_at(level) for level in settings.levels) * len(targets)
    with LiveProgress(total, enabled=not args.no_progress) as progress, frozen_heap():
        runs = asyncio.run(run_bench(targets, prompts, settings, progress))
    pricing = {t.name: t.pricing for t in targets}
    stats = tuple(summarize(r, pricing[r.target]) for r in runs)
    comparisons = tuple(compare(stats, a, b) for a, b in args.compare)
    report = BenchReport(
        started_at=started,
        settings={"levels": list(settings.levels), "requests": settings.requests,
                  "max_tokens": settings.max_tokens, "timeout_s": settings.timeout_s,
                  "prompts": args.prompts or "bundled", "prompt_count": len(prompts)},
        targets=tuple(t.describe() for t in targets),
        levels=stats,
        comparisons=comparisons,
        runs=tuple(runs),
    )
    files = [write_json(out_dir / "results.json", report), write_csv(out_dir / "results.csv", report),
             write_chart(out_dir / "chart.png", stats)]
    out = console()
    notes += [*routing_notes(stats, targets), *tier_notes(stats, targets), *client_notes(stats), *_first_errors(runs)]
    print_results(out, stats, comparisons, notes)
    out.print("wrote " + ", ".join(str(f) for f in files), highlight=False)
    every_failed = all(s.errors == s.requests for s in stats)
    return 1 if every_failed else 0
