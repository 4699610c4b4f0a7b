"""Instructions per request, counted by valgrind: a measure of the hot path that noise does not move.

`.venv/bin/python benchmarks/instructions.py [--stream] [--requests 400] [--concurrency 8] [CHECKOUT ...]`

CPU time per request (`make bench`) is what the targets of issue 12 are stated in, but on a shared
machine two runs of the same code differ by 15% or more, so a change worth 3% cannot be seen in it.
This runs the gateway of each CHECKOUT (a directory holding `gateway/`; default: this one) and the
bare reference under `valgrind --tool=callgrind`, against the stub upstream, counts the instructions
executed while a fixed number of requests is served (warm-up excluded) and prints them per request.
Two runs of the same code agree within ~1%. Instructions are not time -- system calls and cache misses
are left out, and `PYTHONMALLOC=malloc` (which valgrind needs) makes allocation dearer than
pymalloc does -- so use this to compare versions of the code, and `make bench` for the targets.
Needs valgrind (Debian's package); each target takes about 30 s.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import orjson
import uvloop

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import loadgen  # noqa: E402
from overhead import BODY, Proc, write_catalogue  # noqa: E402

from tests.harness import ensure_binary, free_port, terminate, wait_ready  # noqa: E402


def count(name: str, command: list[str], cwd: Path, port: int, stream: bool, requests: int,
          concurrency: int) -> tuple[float, int]:
    """(instructions per request, errors) of the server `command` serves on `port`."""
    out = Path(tempfile.mkdtemp(prefix="instructions-")) / "callgrind.out"
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "ULTRAROUTE_OPEN")}
    env["PYTHONMALLOC"] = "malloc"  # valgrind cannot follow pymalloc's arenas
    with (out.parent / "server.log").open("wb") as log:
        proc = subprocess.Popen(["valgrind", "--tool=callgrind", "--instr-atstart=no",
                                 f"--callgrind-out-file={out}.%p", *command], cwd=cwd, env=env, stdout=log, stderr=log)
    try:
        wait_ready(proc, f"http://127.0.0.1:{port}/healthz", 600, name,
                   lambda: (out.parent / "server.log").read_text()[-2000:])
        data = loadgen.request_bytes("/v1/chat/completions", orjson.dumps({**BODY, "stream": stream}), None)
        uvloop.run(loadgen.run(port, data, concurrency, 100, warmup=20))
        subprocess.run(["callgrind_control", "-i", "on", str(proc.pid)], check=True, capture_output=True)
        result = uvloop.run(loadgen.run(port, data, concurrency, requests, warmup=0))
        subprocess.run(["callgrind_control", "-i", "off", str(proc.pid)], check=True, capture_output=True)
        proc.send_signal(signal.SIGTERM)  # callgrind writes its counts as the process exits
        proc.wait(120)
    finally:
        terminate(proc)
    total = 0
    for dump in out.parent.glob("callgrind.out.*"):
        for line in dump.read_text(errors="replace").splitlines():
            if line.startswith("totals:"):
                total += int(line.split()[1])
    return total / requests, result.errors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkouts", nargs="*", type=Path, default=[HERE.parent])
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    ensure_binary("valgrind", "valgrind")
    stub_port = free_port()
    stub = Proc("stub", [sys.executable, str(HERE / "stub_upstream.py"), str(stub_port)], stub_port,
                set(os.sched_getaffinity(0)), "/")
    try:
        catalogue = write_catalogue(stub_port, f"instructions-{uuid.uuid4().hex[:8]}")
        port = free_port()
        reference = [sys.executable, str(HERE / "reference.py"), str(port),
                     f"http://127.0.0.1:{stub_port}/v1/chat/completions"]
        base, errors = count("reference", reference, HERE, port, args.stream, args.requests, args.concurrency)
        mode = "stream" if args.stream else "json"
        print(f"{'reference':<40} {mode} c={args.concurrency}: {base / 1e3:8.0f} k instructions/request"
              f"  errors {errors}")
        for checkout in args.checkouts:
            port = free_port()
            gateway = [sys.executable, "-m", "gateway", "serve", "--config", str(catalogue), "--policies", "",
                       "--port", str(port), "--open"]
            per_request, errors = count(str(checkout), gateway, checkout.resolve(), port, args.stream,
                                        args.requests, args.concurrency)
            print(f"{checkout!s:<40} {mode} c={args.concurrency}: {per_request / 1e3:8.0f} k instructions/request"
                  f"  ({per_request / base:.2f}x the reference)  errors {errors}")
    finally:
        with contextlib.suppress(Exception):
            stub.stop()


if __name__ == "__main__":
    main()
