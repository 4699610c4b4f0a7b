"""Instructions per request, counted by valgrind: a measure of the hot path that noise does not move.

`.venv/bin/python benchmarks/instructions.py [--api chat,messages,responses] [--mode json,stream]
[--requests 400] [--concurrency 8] [--full] [CHECKOUT ...]` (`--stream`: `--mode stream`)

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
meanwhile (its timers and flushes, counted for 10 s of idle after the first cell, while its state
is still as traffic left it: a cell takes tens of seconds under valgrind, and more on a busy
machine). Two runs of the same code agree within a few %.
Instructions are not time -- system calls and cache misses are left out, and `PYTHONMALLOC=malloc`
(which valgrind needs) makes allocation dearer than pymalloc does -- so use this to compare versions
of the code and paths through it, and `make bench` for the targets. Needs valgrind (Debian's
package); each cell takes about 20 s. `--full`: each checkout is also counted as `make bench`'s
"full" gateway (`overhead.py`: Redis telemetry at BENCH_REDIS_URL, a client key on every request, under
a key prefix of its own), on a row "CHECKOUT full" with its ratio to the same checkout's plain cell.
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
from overhead import APIS, Proc, create_key, gateway_env, write_catalogue  # noqa: E402

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


def _idle_rate(pid: int, out: Path, seen: set[Path]) -> float:
    """What the server does by the clock (timers, flushes), in instructions a second, counted while
    idle: under valgrind a cell takes tens of seconds, more on a busy machine, and that work would be
    charged to its requests as its wall time varies. Counted after a cell, while the server's state is
    as traffic left it: a full gateway's background syncs read back and merge what the requests wrote
    (its ledger, every second of the last minute), which an idle server that never served costs nothing."""
    subprocess.run(["callgrind_control", "-i", "on", str(pid)], check=True, capture_output=True)
    began = time.perf_counter()
    time.sleep(IDLE_S)
    subprocess.run(["callgrind_control", "-i", "off", str(pid)], check=True, capture_output=True)
    return _dump(pid, out, seen)[0] / (time.perf_counter() - began)


def count(name: str, command: list[str], cwd: Path, port: int, cells: list[Cell], requests: int,
          concurrency: int, keep: bool, env: dict[str, str], headers: dict[str, str] | None = None,
          ) -> dict[Cell, tuple[float, int]]:
    """{cell: (instructions per request, errors)} of the server `command` serves on `port` (started in
    `env`), its requests carrying `headers`."""
    out = Path(tempfile.mkdtemp(prefix="instructions-")) / "callgrind.out"
    env = {**env, "PYTHONMALLOC": "malloc"}  # valgrind cannot follow pymalloc's arenas
    with (out.parent / "server.log").open("wb") as log:
        proc = subprocess.Popen(["valgrind", "--tool=callgrind", "--instr-atstart=no",
                                 f"--callgrind-out-file={out}.%p", *command], cwd=cwd, env=env, stdout=log, stderr=log)
    seen: set[Path] = set()
    try:
        wait_ready(proc, f"http://127.0.0.1:{port}/healthz", 600, name,
                   lambda: (out.parent / "server.log").read_text()[-2000:])
        totals: dict[Cell, tuple[int, float, int]] = {}  # cell -> (instructions, seconds, errors)
        idle_per_s = 0.0
        for api, mode in cells:
            path, body = APIS[api]
            data = loadgen.request_bytes(path, orjson.dumps({**body, "stream": mode == "stream"}), headers)
            uvloop.run(loadgen.run(port, data, concurrency, 100, warmup=20))
            subprocess.run(["callgrind_control", "-i", "on", str(proc.pid)], check=True, capture_output=True)
            began = time.perf_counter()
            result = uvloop.run(loadgen.run(port, data, concurrency, requests, warmup=0))
            subprocess.run(["callgrind_control", "-i", "off", str(proc.pid)], check=True, capture_output=True)
            elapsed = time.perf_counter() - began
            total, dump = _dump(proc.pid, out, seen)
            totals[(api, mode)] = total, elapsed, result.errors
            if keep:  # named for its cell, for callgrind_annotate
                dump.rename(out.parent / f"{Path(name).name.replace(' ', '-')}-{api}-{mode}.callgrind")
            if len(totals) == 1:
                idle_per_s = _idle_rate(proc.pid, out, seen)
        counts: dict[Cell, tuple[float, int]] = {cell: ((total - idle_per_s * elapsed) / requests, errors)
                                                 for cell, (total, elapsed, errors) in totals.items()}
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
    print(f"\n{'server':<32}{'api':<11}{'mode':<8}{'k instr/req':>12}{'x reference':>13}{'x chat':>8}{'x plain':>9}"
          f"{'errors':>8}")
    for name, counts in results.items():
        plain = results.get(name.removesuffix(" full")) if name.endswith(" full") else None
        for api, mode in cells:
            per_request, errors = counts[(api, mode)]
            ref = f"{per_request / reference[(api, mode)][0]:>12.2f}x" if name != "reference" else f"{'':>13}"
            chat = counts.get(("chat", mode))
            vs_chat = f"{per_request / chat[0]:>7.2f}x" if chat and api != "chat" else f"{'':>8}"
            vs_plain = f"{per_request / plain[(api, mode)][0]:>8.2f}x" if plain else f"{'':>9}"
            print(f"{name:<32}{api:<11}{mode:<8}{per_request / 1e3:>12.0f}{ref}{vs_chat}{vs_plain}{errors:>8}")
    print("(x chat: against the same server's chat completions, same mode; the reference's own ratio shows how\n"
          " much more its bytes cost a bare proxy. x plain: a full gateway against the same checkout's plain one)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkouts", nargs="*", type=Path, default=[HERE.parent])
    parser.add_argument("--api", default="chat", help=f"client APIs, comma-separated: {', '.join(APIS)}")
    parser.add_argument("--mode", default="json", help="json, stream or both (comma-separated)")
    parser.add_argument("--stream", action="store_true", help="the same as --mode stream")
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--keep", action="store_true", help="keep each cell's callgrind dump, and say where")
    parser.add_argument("--full", action="store_true",
                        help="also count each checkout as overhead.py's 'full' gateway: Redis, a client key")
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
                                     args.keep, gateway_env(False))
        for checkout in args.checkouts:
            for full in (False, True) if args.full else (False,):
                port = free_port()
                env = gateway_env(full)
                # A full gateway has a key prefix of its own (no Redis state of another run or checkout),
                # and its key is made by the checkout's own code in the store it will use.
                config = write_catalogue(stub_port, f"instructions-{uuid.uuid4().hex[:8]}") if full else catalogue
                key = create_key(config, env, checkout.resolve()) if full else None
                headers = {"authorization": f"Bearer {key}"} if key else None
                gateway = [sys.executable, "-m", "gateway", "serve", "--config", str(config), "--policies", "",
                           "--port", str(port), *(() if full else ("--open",))]
                name = f"{checkout} full" if full else str(checkout)
                results[name] = count(name, gateway, checkout.resolve(), port, cells, args.requests, args.concurrency,
                                      args.keep, env, headers)
    finally:
        with contextlib.suppress(Exception):
            stub.stop()
    print(f"c={args.concurrency}, {args.requests} requests a cell")
    table(results, cells)


if __name__ == "__main__":
    main()
