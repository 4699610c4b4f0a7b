"""Instructions per request, counted by valgrind: a measure of the hot path that noise does not move.

`.venv/bin/python benchmarks/instructions.py [--api chat,messages,responses] [--mode json,stream]
[--requests 400] [--concurrency 8] [CHECKOUT ...]` (`--stream`: `--mode stream`)

CPU time per request (`make bench`) is what the targets of issue 12 are stated in, but on a shared
machine two runs of the same code differ by 15% or more, so a change worth 3% cannot be seen in it.
This runs the gateway of each CHECKOUT (a directory holding `gateway/`; default: this one) and the
bare reference under `valgrind --tool=callgrind`, against the stub upstream, counts the instructions
executed while a fixed number of requests is served (warm-up excluded) and prints them per request,
for each client API (`--api`) and mode (`--mode`): `chat` is chat completions on a chat endpoint;
`messages` and `responses` are the pass-through paths (a Messages client on an `api: anthropic`
endpoint, a Responses client on an `api: openai-responses` one). The table gives each cell against
the reference's same cell and against the same checkout's chat cell of the same mode. Each server is
started once; a cell is counted between `callgrind_control -i on` and `-i off`, then dumped
(`--keep` keeps the dumps, for `callgrind_annotate`), less what the server does by the clock
meanwhile (its timers and flushes, counted for 10 s of idle first: a cell takes tens of seconds
under valgrind, and more on a busy machine). Two runs of the same code agree within a few %.
Instructions are not time -- system calls and cache misses are left out, and `PYTHONMALLOC=malloc`
(which valgrind needs) makes allocation dearer than pymalloc does -- so use this to compare versions
of the code and paths through it, and `make bench` for the targets. Needs valgrind (Debian's
package); each cell takes about 20 s.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import orjson
import uvloop

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import loadgen  # noqa: E402
from overhead import APIS, Proc, write_catalogue  # noqa: E402

from tests.harness import ensure_binary, free_port, terminate, wait_ready  # noqa: E402

Cell = tuple[str, str]  # (api, mode)
IDLE_S = 10.0


def _totals(dump: Path) -> int | None:
    """The instruction count of a finished callgrind dump (None while it is being written)."""
    for line in dump.read_text(errors="replace").splitlines():
        if line.startswith("totals:"):
            return int(line.split()[1])
    return None


def _dump(pid: int, out: Path, seen: set[Path]) -> tuple[int, Path]:
    """Ask callgrind for a dump (which zeroes its counters): the new file's total, and the file."""
    subprocess.run(["callgrind_control", "--dump", str(pid)], check=True, capture_output=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for dump in set(out.parent.glob(f"{out.name}.*")) - seen:
            total = _totals(dump)
            if total is not None:
                seen.add(dump)
                return total, dump
        time.sleep(0.2)
    raise RuntimeError("callgrind wrote no dump")


def count(name: str, command: list[str], cwd: Path, port: int, cells: list[Cell], requests: int,
          concurrency: int, keep: bool) -> dict[Cell, tuple[float, int]]:
    """{cell: (instructions per request, errors)} of the server `command` serves on `port`."""
    out = Path(tempfile.mkdtemp(prefix="instructions-")) / "callgrind.out"
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "ULTRAROUTE_OPEN")}
    env["PYTHONMALLOC"] = "malloc"  # valgrind cannot follow pymalloc's arenas
    with (out.parent / "server.log").open("wb") as log:
        proc = subprocess.Popen(["valgrind", "--tool=callgrind", "--instr-atstart=no",
                                 f"--callgrind-out-file={out}.%p", *command], cwd=cwd, env=env, stdout=log, stderr=log)
    counts: dict[Cell, tuple[float, int]] = {}
    seen: set[Path] = set()
    try:
        wait_ready(proc, f"http://127.0.0.1:{port}/healthz", 600, name,
                   lambda: (out.parent / "server.log").read_text()[-2000:])
        # What the server does by the clock (timers, flushes), counted while idle: under valgrind a
        # cell takes tens of seconds, more on a busy machine, and that work would be charged to
        # its requests as its wall time varies. Each cell's count is less this rate times its time.
        subprocess.run(["callgrind_control", "-i", "on", str(proc.pid)], check=True, capture_output=True)
        began = time.perf_counter()
        time.sleep(IDLE_S)
        subprocess.run(["callgrind_control", "-i", "off", str(proc.pid)], check=True, capture_output=True)
        idle_per_s = _dump(proc.pid, out, seen)[0] / (time.perf_counter() - began)
        for api, mode in cells:
            path, body = APIS[api]
            data = loadgen.request_bytes(path, orjson.dumps({**body, "stream": mode == "stream"}), None)
            uvloop.run(loadgen.run(port, data, concurrency, 100, warmup=20))
            subprocess.run(["callgrind_control", "-i", "on", str(proc.pid)], check=True, capture_output=True)
            began = time.perf_counter()
            result = uvloop.run(loadgen.run(port, data, concurrency, requests, warmup=0))
            subprocess.run(["callgrind_control", "-i", "off", str(proc.pid)], check=True, capture_output=True)
            elapsed = time.perf_counter() - began
            total, dump = _dump(proc.pid, out, seen)
            counts[(api, mode)] = (total - idle_per_s * elapsed) / requests, result.errors
            if keep:  # named for its cell, for callgrind_annotate
                dump.rename(out.parent / f"{Path(name).name}-{api}-{mode}.callgrind")
        proc.send_signal(signal.SIGTERM)
        proc.wait(120)
    finally:
        terminate(proc)
    if keep:
        print(f"callgrind dumps of {name}: {out.parent}")
    else:
        shutil.rmtree(out.parent, ignore_errors=True)
    return counts


def table(results: dict[str, dict[Cell, tuple[float, int]]], cells: list[Cell]) -> None:
    reference = results["reference"]
    print(f"\n{'server':<32}{'api':<11}{'mode':<8}{'k instr/req':>12}{'x reference':>13}{'x chat':>8}{'errors':>8}")
    for name, counts in results.items():
        for api, mode in cells:
            per_request, errors = counts[(api, mode)]
            ref = f"{per_request / reference[(api, mode)][0]:>12.2f}x" if name != "reference" else f"{'':>13}"
            chat = counts.get(("chat", mode))
            vs_chat = f"{per_request / chat[0]:>7.2f}x" if chat and api != "chat" else f"{'':>8}"
            print(f"{name:<32}{api:<11}{mode:<8}{per_request / 1e3:>12.0f}{ref}{vs_chat}{errors:>8}")
    print("(x chat: against the same server's chat completions, same mode; the reference's own ratio shows how\n"
          " much more its bytes cost a bare proxy)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkouts", nargs="*", type=Path, default=[HERE.parent])
    parser.add_argument("--api", default="chat", help=f"client APIs, comma-separated: {', '.join(APIS)}")
    parser.add_argument("--mode", default="json", help="json, stream or both (comma-separated)")
    parser.add_argument("--stream", action="store_true", help="the same as --mode stream")
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--keep", action="store_true", help="keep each cell's callgrind dump, and say where")
    args = parser.parse_args()
    apis = args.api.split(",")
    modes = ["stream"] if args.stream else args.mode.split(",")
    if unknown := [a for a in apis if a not in APIS] + [m for m in modes if m not in ("json", "stream")]:
        parser.error(f"unknown: {', '.join(unknown)}")
    cells = [(api, mode) for api in apis for mode in modes]
    ensure_binary("valgrind", "valgrind")
    stub_port = free_port()
    stub = Proc("stub", [sys.executable, str(HERE / "stub_upstream.py"), str(stub_port)], stub_port,
                set(os.sched_getaffinity(0)), "/")
    results: dict[str, dict[Cell, tuple[float, int]]] = {}
    try:
        catalogue = write_catalogue(stub_port, f"instructions-{uuid.uuid4().hex[:8]}")
        port = free_port()
        reference = [sys.executable, str(HERE / "reference.py"), str(port), f"http://127.0.0.1:{stub_port}"]
        results["reference"] = count("reference", reference, HERE, port, cells, args.requests, args.concurrency,
                                     args.keep)
        for checkout in args.checkouts:
            port = free_port()
            gateway = [sys.executable, "-m", "gateway", "serve", "--config", str(catalogue), "--policies", "",
                       "--port", str(port), "--open"]
            results[str(checkout)] = count(str(checkout), gateway, checkout.resolve(), port, cells, args.requests,
                                           args.concurrency, args.keep)
    finally:
        with contextlib.suppress(Exception):
            stub.stop()
    print(f"c={args.concurrency}, {args.requests} requests a cell")
    table(results, cells)


if __name__ == "__main__":
    main()
