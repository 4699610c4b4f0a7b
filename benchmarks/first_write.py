"""Instructions on a paced stream's way to its first token, by stretch: a CPU measure of what `make
bench` judges as "added time to first token" (issue 32 item 11), which noise does not move.

`.venv/bin/python benchmarks/first_write.py [--requests 20] [CHECKOUT ...]` (a CHECKOUT is a
directory holding `gateway/`; default: this one)

The reference and each checkout's gateway run under `valgrind --tool=callgrind` (first_write_server.py)
against the stub upstream pacing its chunks 0.1 s apart (a paced stream, slowed so that a server under
valgrind still gets the first chunk alone). Collection is on only while a chat request is on its way
to its first token, in two stretches: A, from its ASGI entry to the write of its upstream request;
B, from the upstream's first bytes to the first body write to the client. The upstream's own time
between is not counted, nor anything between requests (each request waits for the last one's
aftermath). Each stretch is split at the gateway's stages (plan_request, prepare, dispatch,
open_attempt, Upstreams.open, the response's start); the table prints each piece's median over
the requests, and A and B. Instructions are not time (system calls and cache misses are left out,
`PYTHONMALLOC=malloc` makes allocation dearer), and the clock-expired caches are kept (see
first_write_server.py): compare versions of the code with this, and judge the target with `make bench`.
Needs valgrind and a C compiler (Debian's valgrind and gcc); each server takes a few minutes.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
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
from overhead import BODY, PACED_MODEL, Proc, write_catalogue  # noqa: E402

from tests.harness import ensure_binary, free_port, terminate, wait_ready  # noqa: E402

GAP_S = 0.1  # the stub's pace under valgrind (make bench's is 5 ms)
PAUSE_S = 0.5  # between requests: the last one's aftermath (recording, closing) is done before the next
_LIB = """#include <valgrind/callgrind.h>
void toggle(void) { CALLGRIND_TOGGLE_COLLECT; }
void dump(const char *label) { CALLGRIND_DUMP_STATS_AT(label); }
"""
_STUB = """import sys
sys.path.insert(0, sys.argv[3])
import stub_upstream, uvloop
stub_upstream.PACED_GAP_S = float(sys.argv[2])
uvloop.run(stub_upstream.serve(int(sys.argv[1])))
"""


def build_lib(where: Path) -> Path:
    (where / "toggle.c").write_text(_LIB)
    lib = where / "libtoggle.so"
    subprocess.run([ensure_binary("gcc", "gcc"), "-O2", "-shared", "-fPIC", "-o", str(lib), str(where / "toggle.c")],
                   check=True)
    return lib


def stretches(out: Path) -> dict[str, list[int]]:
    """{label: instructions of each dump so labelled} of a server's callgrind dumps."""
    found: dict[str, list[int]] = {}
    for dump in out.parent.glob(f"{out.name}.*.*"):
        label, total = None, None
        for line in dump.read_text(errors="replace").splitlines():
            if line.startswith("desc: Trigger: Client Request: "):
                label = line.removeprefix("desc: Trigger: Client Request: ").strip()
            elif line.startswith("totals:"):
                total = int(line.split()[1])
        if label is not None and total is not None:
            found.setdefault(label, []).append(total)
    return found


def count(name: str, command: list[str], cwd: Path, port: int, requests: int, data: bytes) -> dict[str, list[int]]:
    out = Path(tempfile.mkdtemp(prefix="first-write-")) / "callgrind.out"
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "ULTRAROUTE_OPEN")}
    env["PYTHONMALLOC"] = "malloc"  # valgrind cannot follow pymalloc's arenas
    with (out.parent / "server.log").open("wb") as log:
        proc = subprocess.Popen(["valgrind", "--tool=callgrind", "--instr-atstart=no", "--collect-atstart=no",
                                 f"--callgrind-out-file={out}.%p", *command], cwd=cwd, env=env, stdout=log, stderr=log)
    try:
        wait_ready(proc, f"http://127.0.0.1:{port}/healthz", 900, name,
                   lambda: (out.parent / "server.log").read_text()[-2000:])
        subprocess.run(["callgrind_control", "-i", "on", str(proc.pid)], check=True, capture_output=True)
        uvloop.run(loadgen.run(port, data, 1, 10, warmup=0))  # warm-up: its dumps are removed
        time.sleep(2)
        for dump in out.parent.glob(f"{out.name}.*.*"):
            dump.unlink()
        errors = 0
        for _ in range(requests):
            errors += uvloop.run(loadgen.run(port, data, 1, 1, warmup=0)).errors
            time.sleep(PAUSE_S)
        time.sleep(2)  # the last dumps are written
        if errors:
            raise RuntimeError(f"{name}: {errors} errors")
        return stretches(out)
    finally:
        terminate(proc)
        shutil.rmtree(out.parent, ignore_errors=True)


def table(results: dict[str, dict[str, list[int]]]) -> None:
    print(f"\n{'server':<32}{'stretch':<40}{'k instr':>9}{'min':>8}{'n':>5}")
    for name, found in results.items():
        for phase in ("A", "B"):
            labels = sorted(label for label in found if label.startswith(phase))
            for label in labels:
                values = found[label]
                print(f"{name:<32}{label:<40}{statistics.median(values) / 1e3:>9.1f}{min(values) / 1e3:>8.1f}"
                      f"{len(values):>5}")
            total = sum(statistics.median(found[label]) for label in labels)
            print(f"{name:<32}{phase + ' (sum of medians)':<40}{total / 1e3:>9.1f}")
        both = sum(statistics.median(v) for v in found.values())
        print(f"{name:<32}{'A + B':<40}{both / 1e3:>9.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkouts", nargs="*", type=Path, default=[HERE.parent])
    parser.add_argument("--requests", type=int, default=20)
    args = parser.parse_args()
    ensure_binary("valgrind", "valgrind")
    work = Path(tempfile.mkdtemp(prefix="first-write-lib-"))
    lib = build_lib(work)
    (work / "stub.py").write_text(_STUB)
    stub_port = free_port()
    stub = Proc("stub", [sys.executable, str(work / "stub.py"), str(stub_port), str(GAP_S), str(HERE)], stub_port,
                set(os.sched_getaffinity(0)), "/")
    server = [sys.executable, str(HERE / "first_write_server.py"), str(lib)]
    results: dict[str, dict[str, list[int]]] = {}
    try:
        catalogue = write_catalogue(stub_port, f"first-write-{uuid.uuid4().hex[:8]}")
        body = orjson.dumps({**BODY, "stream": True, "model": PACED_MODEL})
        data = loadgen.request_bytes("/v1/chat/completions", body)
        port = free_port()
        results["reference"] = count("reference", [*server, str(HERE / "reference.py"), str(port),
                                                   f"http://127.0.0.1:{stub_port}"], HERE, port, args.requests, data)
        for checkout in args.checkouts:
            port = free_port()
            gateway = [*server, "gateway", "serve", "--config", str(catalogue), "--policies", "", "--port", str(port),
                       "--open"]
            results[str(checkout)] = count(str(checkout), gateway, checkout.resolve(), port, args.requests, data)
    finally:
        stub.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(f"paced chat stream, c=1, {args.requests} requests a server")
    table(results)


if __name__ == "__main__":
    main()
