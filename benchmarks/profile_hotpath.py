"""Where the gateway's CPU goes under load: py-spy samples of the whole process, summarised.

`.venv/bin/python benchmarks/profile_hotpath.py [--stream] [--api chat] [--concurrency 8] [--seconds 20]`
starts the stub upstream and a gateway (pinned as in `overhead.py`), drives it with the raw-asyncio
load generator, records it with `py-spy record --format raw` (every thread, idle excluded) and prints
the share of samples per package (by the frame that was running: "self" time) and the top functions
by self and by inclusive time. `--api messages|responses`: a pass-through path instead of chat
completions (as in `instructions.py`). `--speedscope FILE` also writes the speedscope profile.
`--full`: the gateway as `make bench`'s "full" one (Redis telemetry, a client key on every request).
py-spy needs ptrace rights (root, or kernel.yama.ptrace_scope = 0).
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import orjson
import uvloop

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import loadgen  # noqa: E402
from overhead import APIS, Proc, _cores, start_gateway, write_catalogue  # noqa: E402

from tests.harness import free_port  # noqa: E402

# Leaf frames of threads that wait: py-spy (non-blocking) can count them as active; they are not CPU.
IDLE_LEAVES = ("Condition.wait (", "Event.wait (", "QueueListener.dequeue (", "SimpleQueue.get (")
_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>.*?)(?::\d+)?\)$")
PACKAGES = ("gateway", "httpx", "httpcore", "h11", "anyio", "aiohttp", "httpx_aiohttp", "starlette", "fastapi",
            "uvicorn", "asyncio", "tenacity", "contextlib", "logging", "prometheus_client", "orjson", "pydantic",
            "redis", "json", "threading", "queue", "uvloop", "email", "http", "urllib", "yarl", "multidict")


def package_of(path: str) -> str:
    parts = Path(path).parts
    for pkg in PACKAGES:
        if pkg in parts or path.endswith(f"/{pkg}.py"):
            return pkg
    return Path(path).stem if "site-packages" not in path else "other (site-packages)"


def summarise(raw: Path, top: int) -> None:
    self_by_pkg: collections.Counter[str] = collections.Counter()
    self_by_func: collections.Counter[str] = collections.Counter()
    incl_by_func: collections.Counter[str] = collections.Counter()
    total = idle = 0
    by_thread: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        frames = stack.split(";")
        if any(frames[-1].startswith(leaf) for leaf in IDLE_LEAVES):
            idle += n
            continue
        total += n
        by_thread["event loop (main thread)" if "MainThread" in frames[0] or "main" in frames[0].lower()
                  else "other threads"] += n
        leaf = _FRAME.match(frames[-1])
        name = f"{leaf['func']} ({leaf['file']})" if leaf else frames[-1]
        self_by_func[name] += n
        self_by_pkg[package_of(leaf["file"]) if leaf else "?"] += n
        seen = set()
        for frame in frames[1:]:  # frames[0] is the thread
            m = _FRAME.match(frame)
            key = f"{m['func']} ({m['file']})" if m else frame
            if key not in seen:
                seen.add(key)
                incl_by_func[key] += n
    print(f"\n{total} samples (all threads; {idle} more in thread waits left out)")
    for thread, n in by_thread.most_common():
        print(f"  {100 * n / total:5.1f}%  {thread}")
    print("\nself time by package:")
    for pkg, n in self_by_pkg.most_common(top):
        print(f"  {100 * n / total:5.1f}%  {pkg}")
    print("\ntop functions, self time:")
    for name, n in self_by_func.most_common(top):
        print(f"  {100 * n / total:5.1f}%  {short(name)}")
    print("\ntop functions, inclusive time:")
    for name, n in incl_by_func.most_common(top + 10):
        print(f"  {100 * n / total:5.1f}%  {short(name)}")


def short(name: str) -> str:
    return re.sub(r"/\S*/(site-packages|lib/python3\.\d+|i12)/", "", name)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--api", choices=list(APIS), default="chat")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--speedscope", help="also write a speedscope profile here")
    parser.add_argument("--raw", help="summarise this raw py-spy file instead of recording")
    parser.add_argument("--full", action="store_true",
                        help="the gateway as overhead.py's 'full' one: Redis telemetry and a client key")
    args = parser.parse_args()
    if args.raw:
        summarise(Path(args.raw), args.top)
        return
    gw_cores, load_cores = _cores()
    os.sched_setaffinity(0, load_cores)
    stub_port = free_port()
    stub = Proc("stub", [sys.executable, str(HERE / "stub_upstream.py"), str(stub_port)], stub_port, load_cores, "/")
    gw, key = start_gateway("gateway", write_catalogue(stub_port, "profile"), gw_cores, 1, full=args.full)
    raw = Path(tempfile.mkdtemp(prefix="profile-")) / "gateway.raw"
    path, body = APIS[args.api]
    headers = {"authorization": f"Bearer {key}"} if key else None
    data = loadgen.request_bytes(path, orjson.dumps({**body, "stream": args.stream}), headers)
    stop = threading.Event()

    def load() -> None:
        while not stop.is_set():
            uvloop.run(loadgen.run(gw.port, data, args.concurrency, 200, warmup=0))

    try:
        uvloop.run(loadgen.run(gw.port, data, args.concurrency, 200))
        thread = threading.Thread(target=load, daemon=True)
        thread.start()
        spy = [str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(gw.pid), "--duration",
               str(args.seconds), "--rate", "250", "--nonblocking", "--threads"]
        subprocess.run([*spy, "--format", "raw", "--output", str(raw)], check=True, capture_output=True)
        if args.speedscope:
            subprocess.run([*spy, "--format", "speedscope", "--output", args.speedscope], check=True,
                           capture_output=True)
        stop.set()
        thread.join()
    finally:
        gw.stop()
        stub.stop()
    print(f"raw profile: {raw}")
    summarise(raw, args.top)


if __name__ == "__main__":
    main()
