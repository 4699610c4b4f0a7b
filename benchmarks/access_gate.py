"""Microbenchmark: the cost of stage 0 (authenticate, authorize, admit, charge) per request.

Run by hand: `.venv/bin/python benchmarks/access_gate.py`. One key with an allow-list, requests and
tokens per minute and a budget, so every check runs; the key ring and ledger are in memory, as on
the request path (Redis is only touched by the background tasks). Prints µs per request for a known
key, and for a wrong key once the store has been reloaded recently (the flood case). The end-to-end
comparison is the "gateway full" rows of `benchmarks/overhead.py` (a key, Redis telemetry and metrics on).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gateway.access.gate import Access
from gateway.access.keyring import KeyRing
from gateway.access.keys import KeySpec, new_key
from gateway.access.ledger import Ledger
from gateway.access.store import FileKeyStore
from gateway.config import load_catalogue
from gateway.context import ChatRequest
from gateway.errors import AuthenticationFailed

N = 20_000


async def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="ultraroute-bench-"))
    endpoint = {"provider": "p", "model": "up", "price": {"input": 1.0, "output": 2.0}}
    (tmp / "providers.yaml").write_text(yaml.safe_dump({
        "providers": {"p": {"base_url": "http://p.test/v1"}}, "models": {"m": {"endpoints": [endpoint]}}}))
    catalogue, _ = load_catalogue(tmp / "providers.yaml", env={})
    store = FileKeyStore(tmp / "keys.json")
    key, secret = new_key(KeySpec(name="bench", models=("m",), rpm=10**7, tpm=10**10, budget_usd=1e9))
    await store.save(key)
    ring = KeyRing(store, miss_refresh_s=3600)
    await ring.reload()
    access = Access(ring, Ledger(None, "bench"), catalogue)
    request = ChatRequest(request_id="r", body={}, model="m", stream=False, include_usage=False, prompt_chars=5)
    good = {"authorization": f"Bearer {secret}"}
    bad = {"authorization": "Bearer ur-not-a-key"}

    for name, headers in (("known key, every limit checked", good), ("wrong key (401)", bad)):
        runs = []
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(N):
                try:
                    client = await access.authenticate(headers)
                except AuthenticationFailed:
                    continue
                access.authorize(client, request)
                access.admit(client)
                access.charge(client, 100, 0.0001)
            runs.append((time.perf_counter() - start) / N * 1e6)
        print(f"{name:<34} {statistics.median(runs):6.1f} µs per request (median of 5 x {N})")


if __name__ == "__main__":
    asyncio.run(main())
