"""`ultraroute demo` (what `make demo` runs): simulated providers + the gateway + a little traffic.

Starts `ultraroute simulate` on `sim.demo.yaml` and `ultraroute serve` on `providers.demo.yaml` as
child processes, waits until both answer, sends warm-up requests so the stats are not empty, prints
how to use it, and stops both on Ctrl-C. It only orchestrates; it serves nothing itself.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

SIM_CONFIG = Path("sim.demo.yaml")
CATALOGUE = Path("providers.demo.yaml")
SIM_ADMIN = "http://127.0.0.1:9100/admin/health"
LOG = Path("demo.log")  # the gateway's JSON access log: one line per request, kept off the console


def _wait_until_up(url: str, proc: subprocess.Popen[bytes], what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited with code {proc.returncode}")
        try:
            if httpx.get(url, timeout=0.5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"{what} did not start within {timeout_s:.0f} s")


def _warm_up(base_url: str) -> int:
    sent = 0
    with httpx.Client(base_url=base_url, timeout=30) as client:
        for model in ("deepseek-v4.1-flash", "gpt-oss-120b"):
            for _ in range(4):
                r = client.post("/chat/completions", json={
                    "model": model, "max_tokens": 32,
                    "messages": [{"role": "user", "content": "Write a haiku about fast inference."}]})
                sent += r.status_code == 200
    return sent


def _usage(base_url: str) -> str:
    return f"""
Ultraroute is running on simulated providers, in open mode (no client keys; for a real deployment,
`ultraroute keys create --name my-app` and serve without --open).

  base_url   {base_url}
  models     {base_url}/models

curl:
  curl -s {base_url}/chat/completions -H 'content-type: application/json' \\
    -d '{{"model": "deepseek-v4.1-flash", "messages": [{{"role": "user", "content": "hi"}}]}}'

Python (the official openai SDK, unchanged):
  from openai import OpenAI
  client = OpenAI(base_url="{base_url}", api_key="unused-in-open-mode")
  stream = client.chat.completions.create(model="deepseek-v4.1-flash", stream=True,
      messages=[{{"role": "user", "content": "hi"}}])
  for chunk in stream:
      print(chunk.choices[0].delta.content or "", end="")

Live stats: .venv/bin/ultraroute stats    Dashboard: {base_url[:-3]}/dashboard
Access log (one JSON line per request): {LOG}

Press Ctrl-C to stop.
"""


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def run_demo(port: int = 8080, warmup: bool = True) -> int:
    for path in (SIM_CONFIG, CATALOGUE):
        if not path.exists():
            print(f"error: {path} not found; run `make demo` from the repository root", file=sys.stderr)
            return 2
    base_url = f"http://127.0.0.1:{port}/v1"
    signal.signal(signal.SIGTERM, _interrupt)  # stop the children on `kill` as on Ctrl-C
    cmd = [sys.executable, "-m", "gateway"]
    sim = subprocess.Popen([*cmd, "simulate", "--config", str(SIM_CONFIG)], stdout=subprocess.DEVNULL)
    gateway = None
    try:
        _wait_until_up(SIM_ADMIN, sim, "the simulator")
        with LOG.open("ab") as log:
            gateway = subprocess.Popen([*cmd, "serve", "--config", str(CATALOGUE), "--port", str(port),
                                        "--open"],
                                       stdout=log)
        _wait_until_up(f"http://127.0.0.1:{port}/healthz", gateway, "the gateway")
        if warmup:
            print(f"warm-up: {_warm_up(base_url)} requests served")
        print(_usage(base_url), flush=True)
        while gateway.poll() is None and sim.poll() is None:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        for proc in (gateway, sim):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=10)
        print("stopped.")
    return 0
