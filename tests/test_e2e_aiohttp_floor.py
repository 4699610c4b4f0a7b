"""The gateway on the lowest aiohttp pyproject.toml allows, and on the release just below it.

gateway/upstreams/aiohttp_tuned.py leans on aiohttp's internals, so pyproject.toml bounds aiohttp to the
releases they were tested on. Each aiohttp here is installed once with pip `--target` under
`.venv/third-party-aiohttp/` (aiohttp only: its dependencies are the venv's) and put first on the
gateway's PYTHONPATH. On the floor the tuned classes run, with no warning, and pass their pinning tests;
below it (no `resume_reading(resume_parser)`), the gateway says so in one warning line and streams on
aiohttp's stock classes.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from gateway.simulator.testing import SimProcess, make_sim_config
from tests.harness import ROOT, GatewayProcess, catalogue_for

CACHE = ROOT / ".venv" / "third-party-aiohttp"
BELOW_FLOOR = "3.13.5"  # the last release before 3.14: `resume_reading()` takes no `resume_parser`
WARNING = "provider streams run on aiohttp's stock classes"


def aiohttp_bounds() -> tuple[str, str]:
    """pyproject.toml's `aiohttp>=LOW,<HIGH`."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    spec = next(d for d in project["dependencies"] if d.startswith("aiohttp"))
    found = re.fullmatch(r"aiohttp>=([\d.]+),<([\d.]+)", spec.replace(" ", ""))
    assert found, f"aiohttp is not bounded on both sides in pyproject.toml: {spec!r}"
    return found[1], found[2]


def aiohttp_at(version: str) -> Path:
    """A directory holding aiohttp `version` alone (installed the first time, then reused)."""
    target = CACHE / version
    CACHE.mkdir(parents=True, exist_ok=True)
    # Locked: another test run on this machine (its .venv may be this one) can install the same version at
    # the same moment, and would remove this run's half-written `.partial` under it.
    fd = os.open(CACHE / f"{version}.lock", os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if not (target / "aiohttp").is_dir():
            partial = CACHE / f"{version}.partial"
            shutil.rmtree(partial, ignore_errors=True)
            subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target",
                            str(partial), f"aiohttp=={version}"], check=True, timeout=300)
            partial.rename(target)  # whole or not at all: a run cut short leaves no half-installed cache
    finally:
        os.close(fd)  # closing releases the lock
    return target


def env_with(version: str) -> dict[str, str]:
    return {"PYTHONPATH": os.pathsep.join([str(aiohttp_at(version)), str(ROOT)])}


def running_version(env: dict[str, str]) -> str:
    done = subprocess.run([sys.executable, "-c", "import aiohttp; print(aiohttp.__version__)"],
                          env={**os.environ, **env}, cwd=ROOT, capture_output=True, text=True, check=True)
    return done.stdout.strip()


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    profile = {"ttft_ms": 5, "ttft_jitter": 0, "tokens_per_second": 5000, "output_tokens": 300}
    with SimProcess(make_sim_config({"sim": profile})) as sim:
        yield sim


def stream_through_gateway(sim: SimProcess, env: dict[str, str]) -> tuple[str, str]:
    """One streamed completion through a gateway started with `env`: its text and the gateway's log."""
    with GatewayProcess(catalogue_for(sim, {"m": [{"sim": "sim"}]}), env=env) as gw:
        client = openai.OpenAI(base_url=gw.base_url, api_key="unused", max_retries=0)
        stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}],
                                                stream=True, stream_options={"include_usage": True})
        chunks = list(stream)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 300
        return text, gw.logs()


def test_the_floor_runs_the_tuned_classes_the_lean_post_and_their_pinning_tests(sim: SimProcess) -> None:
    low, _ = aiohttp_bounds()
    env = env_with(low)
    assert running_version(env) == low
    text, log = stream_through_gateway(sim, env)
    assert text
    assert WARNING not in log
    # -n 0: one file's tests, in this process (pyproject's addopts would start two xdist workers for them)
    pinning = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
                              "tests/upstreams/test_aiohttp_tuned.py", "tests/upstreams/test_aiohttp_post.py"],
                             env={**os.environ, **env}, cwd=ROOT,
                             capture_output=True, text=True, timeout=120)
    assert pinning.returncode == 0, pinning.stdout[-3000:]


def test_below_the_floor_the_gateway_warns_once_and_streams_on_stock_aiohttp(sim: SimProcess) -> None:
    low, _ = aiohttp_bounds()
    assert tuple(map(int, BELOW_FLOOR.split("."))) < tuple(map(int, low.split(".")))
    env = env_with(BELOW_FLOOR)
    assert running_version(env) == BELOW_FLOOR
    text, log = stream_through_gateway(sim, env)
    assert text
    assert log.count(WARNING) == 1, log[-3000:]
    assert "resume_reading(resume_parser)" in log
    assert "Traceback" not in log


def test_the_image_installs_within_the_same_bounds() -> None:
    """The Dockerfile installs the package (`pip install .`), so pyproject.toml's bounds hold there
    too, and installs no aiohttp of its own."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"pip install \.( |$)", dockerfile, re.MULTILINE)
    assert "aiohttp" not in dockerfile.split("pip install", 1)[1].split("\n", 1)[0]
