"""End to end: what a gateway killed outright (SIGKILL) loses of its spend and access log (issue 32, item 10).

The bound the README states: an answer that ended more than `limits_sync_s` (plus the access log's
`FLUSH_S`, which is shorter) before the kill is charged in Redis and has its access-log line. Answers
in the last moments before the kill may be lost, never more, and nothing is charged twice.
"""

from __future__ import annotations

import signal
import time
import uuid
from typing import Any

import httpx
import orjson

from gateway.simulator.testing import SimProcess, make_sim_config
from tests.harness import GatewayProcess, catalogue_for

ADMIN_KEY = "admin-" + "c" * 30
PROFILE = {"ttft_ms": 5, "ttft_jitter": 0, "tokens_per_second": 2000, "output_tokens": 12}
PRICE = {"input": 1000.0, "output": 5000.0}  # USD per million tokens: a request costs ~ $0.1
SYNC_S = 0.25
MARGIN_S = 1.0  # the sync's own round trip and a busy machine's scheduling, many times over


def cost(usage: dict[str, Any]) -> float:
    return (usage["prompt_tokens"] * PRICE["input"] + usage["completion_tokens"] * PRICE["output"]) / 1e6


def test_answers_older_than_the_sync_interval_survive_a_sigkill(server_redis_url: str) -> None:
    with SimProcess(make_sim_config({"a": dict(PROFILE)})) as sim:
        catalogue = catalogue_for(sim, {"m": [{"sim": "a", "price": PRICE}]},
                                  gateway={"redis_key_prefix": f"crash-{uuid.uuid4().hex[:8]}",
                                           "limits_sync_s": SYNC_S})
        gw = GatewayProcess(catalogue, open_access=False,
                            env={"REDIS_URL": server_redis_url, "ULTRAROUTE_ADMIN_KEY": ADMIN_KEY})
        with gw:
            created = httpx.post(f"{gw.url}/admin/keys", headers={"authorization": f"Bearer {ADMIN_KEY}"},
                                 json={"name": "crash"})
            secret, key_id = created.json()["key"], created.json()["id"]
            client = httpx.Client(base_url=gw.base_url, headers={"authorization": f"Bearer {secret}"}, timeout=30)

            def ask(request_id: str, stream: bool) -> float:
                body = {"model": "m", "messages": [{"role": "user", "content": "hello"}], "stream": stream,
                        **({"stream_options": {"include_usage": True}} if stream else {})}
                r = client.post("/chat/completions", json=body, headers={"x-request-id": request_id})
                assert r.status_code == 200, r.text
                if not stream:
                    return cost(r.json()["usage"])
                events = [line[6:] for line in r.text.splitlines() if line.startswith("data: {")]
                return cost(next(e for e in map(orjson.loads, events) if e.get("usage"))["usage"])

            old = [f"old-{i}-{uuid.uuid4().hex[:8]}" for i in range(12)]
            old_cost = sum(ask(rid, stream=i % 2 == 0) for i, rid in enumerate(old))
            time.sleep(SYNC_S + MARGIN_S)  # these ended more than a sync interval ago ...
            late = [f"late-{i}-{uuid.uuid4().hex[:8]}" for i in range(4)]
            late_cost = sum(ask(rid, stream=i % 2 == 0) for i, rid in enumerate(late))
            assert gw.proc is not None
            gw.proc.send_signal(signal.SIGKILL)  # ... these just before the kill
            gw.proc.wait(timeout=10)
        spend = gw.keys("spend", key_id)
        assert spend.returncode == 0, spend.stderr
        charged = orjson.loads(spend.stdout[spend.stdout.index("{"):])["spend_usd"]
        assert old_cost - 1e-5 <= charged <= old_cost + late_cost + 1e-5, (charged, old_cost, late_cost)
        logged = {orjson.loads(line)["request_id"] for line in gw.logs().splitlines()
                  if line.startswith('{"ts"') and '"request_id"' in line}
        assert set(old) <= logged
        print(f"charged ${charged:.6f}: every earlier answer (${old_cost:.6f}) and "
              f"${charged - old_cost:.6f} of the last ones (${late_cost:.6f}); "
              f"{len(set(late) & logged)} of {len(late)} late log lines")
