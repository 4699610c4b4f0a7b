"""End to end: client keys, model allow-lists, rate limits and budgets, the admin API and the
`ultraroute keys` command, through real gateway processes in front of the simulator."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import httpx
import openai
import pytest

from gateway.simulator.testing import SimProcess, make_sim_config
from tests.conftest import PrivateRedis
from tests.harness import ROOT, GatewayProcess, catalogue_for, together

ADMIN_KEY = "admin-" + "x" * 30
PROFILE = {"ttft_ms": 5, "ttft_jitter": 0, "tokens_per_second": 2000, "output_tokens": 8}
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    with SimProcess(make_sim_config({"a": dict(PROFILE), "b": dict(PROFILE)})) as server:
        yield server


def catalogue(sim: SimProcess, **gateway: object) -> dict[str, object]:
    return catalogue_for(sim, {"m": [{"sim": "a"}], "other": [{"sim": "b"}]},
                         gateway={"redis_key_prefix": f"acc-{uuid.uuid4().hex[:8]}", **gateway})


def post(gw: GatewayProcess, key: str | None, body: dict[str, object] = BODY) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    return httpx.post(f"{gw.base_url}/chat/completions", json=body, headers=headers, timeout=10)


def error(r: httpx.Response) -> dict[str, object]:
    body = r.json()
    assert set(body["error"]) == {"message", "type", "code", "param"}
    return body["error"]  # type: ignore[no-any-return]


def test_refuses_to_start_without_keys_unless_open(sim: SimProcess) -> None:
    gw = GatewayProcess(catalogue(sim), open_access=False)
    done = subprocess.run([sys.executable, "-m", "gateway", "serve", "--config", str(gw.config),
                           "--port", str(gw.port)], env=gw.env, cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2
    assert "ultraroute keys create" in done.stderr and "--open" in done.stderr

    opened = GatewayProcess(catalogue(sim), open_access=False, env={"ULTRAROUTE_OPEN": "1"})
    with opened:
        assert post(opened, None).status_code == 200
    assert "OPEN MODE" in opened.logs()


def test_keys_models_and_limits(sim: SimProcess) -> None:
    gw = GatewayProcess(catalogue(sim), open_access=False)
    key = gw.create_key("--models", "m", "--rpm", "3")
    with gw:
        missing = post(gw, None)
        assert missing.status_code == 401 and error(missing)["code"] == "missing_api_key"
        wrong = post(gw, "ur-not-a-key")
        assert wrong.status_code == 401 and error(wrong)["code"] == "invalid_api_key"
        assert "ur-not-a-key" not in wrong.text  # never echoed

        ok = post(gw, key)
        assert ok.status_code == 200, ok.text
        assert ok.headers["x-ratelimit-limit-requests"] == "3"
        assert ok.headers["x-ratelimit-remaining-requests"] == "2"

        denied = post(gw, key, {**BODY, "model": "other"})
        assert denied.status_code == 403
        assert error(denied)["code"] == "model_not_allowed" and error(denied)["param"] == "model"
        fallback = post(gw, key, {**BODY, "models": ["other"]})
        assert fallback.status_code == 403 and error(fallback)["param"] == "models"

        # The SDK sees the same errors (no retries, so the 429 is what the gateway said).
        client = openai.OpenAI(base_url=gw.base_url, api_key=key, max_retries=0)
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert post(gw, key).status_code == 200  # the third request of the minute
        with pytest.raises(openai.RateLimitError) as limited:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        response = limited.value.response
        assert 1 <= int(response.headers["retry-after"]) <= 120
        assert error(response)["code"] == "rate_limit_exceeded" and error(response)["type"] == "requests"

        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=gw.base_url, api_key="ur-wrong", max_retries=0).models.list()
        models = [m.id for m in client.models.list()]
        assert models == ["m"]  # only what the key may use
        metrics = httpx.get(f"{gw.url}/metrics").text
        for reason, count in (("unauthenticated", 2), ("forbidden", 2), ("client_rate_limited", 1)):
            assert f'ultraroute_rejected_requests_total{{api="chat",reason="{reason}"}} {count}.0' in metrics, reason


def test_budget_exceeded(sim: SimProcess) -> None:
    gw = GatewayProcess(catalogue(sim), open_access=False)
    key = gw.create_key("--budget", "0.000001", "--period", "day")  # less than one request costs
    with gw:
        assert post(gw, key).status_code == 200
        spent = post(gw, key)
        assert spent.status_code == 429
        assert error(spent)["code"] == "budget_exceeded" and error(spent)["type"] == "insufficient_quota"
        assert spent.headers["x-should-retry"] == "false"
        assert 0 < int(spent.headers["retry-after"]) <= 86_400
    with gw:  # without Redis, spend is kept beside the keys file: a restart does not renew the budget
        assert post(gw, key).json()["error"]["code"] == "budget_exceeded"
    assert "$0.000000" not in gw.keys("list").stdout.split("test", 1)[1]


def test_starts_without_keys_when_the_admin_api_can_create_them(sim: SimProcess) -> None:
    """Kubernetes or compose start the gateway before anyone could run `keys create`: with an admin key it
    starts, refuses requests until a key exists, and takes the key created through the admin API."""
    with GatewayProcess(catalogue(sim), open_access=False, env={"ULTRAROUTE_ADMIN_KEY": ADMIN_KEY}) as gw:
        assert post(gw, None).status_code == 401
        created = httpx.post(f"{gw.url}/admin/keys", headers={"authorization": f"Bearer {ADMIN_KEY}"},
                             json={"name": "first"})
        assert created.status_code == 201, created.text
        assert post(gw, created.json()["key"]).status_code == 200
    assert "no client API keys yet" in gw.logs()


def test_admin_api_and_revocation(sim: SimProcess) -> None:
    gw = GatewayProcess(catalogue(sim), open_access=False, env={"ULTRAROUTE_ADMIN_KEY": ADMIN_KEY})
    gw.create_key()
    admin = {"authorization": f"Bearer {ADMIN_KEY}"}
    with gw:
        assert httpx.get(f"{gw.url}/admin/keys").status_code == 401
        assert httpx.get(f"{gw.url}/admin/keys", headers={"authorization": "Bearer nope"}).status_code == 401

        bad = httpx.post(f"{gw.url}/admin/keys", headers=admin, json={"name": "x", "rpm": "5"})
        assert bad.status_code == 400 and error(bad)["param"] == "rpm"
        unknown = httpx.post(f"{gw.url}/admin/keys", headers=admin, json={"name": "x", "colour": 1})
        assert unknown.status_code == 400 and "colour" in error(unknown)["message"]
        no_model = httpx.post(f"{gw.url}/admin/keys", headers=admin, json={"name": "x", "models": ["nope"]})
        assert no_model.status_code == 400 and error(no_model)["param"] == "models[0]"

        created = httpx.post(f"{gw.url}/admin/keys", headers=admin,
                             json={"name": "app", "policy": "cheapest", "budget_usd": 5})
        assert created.status_code == 201, created.text
        secret, key_id = created.json()["key"], created.json()["id"]
        assert post(gw, secret).status_code == 200  # usable at once

        listed = httpx.get(f"{gw.url}/admin/keys", headers=admin).json()["data"]
        assert {k["name"] for k in listed} == {"test", "app"}
        assert secret not in str(listed) and "key_hash" not in listed[0]

        time.sleep(0.5)
        spend = httpx.get(f"{gw.url}/admin/keys/{key_id}/spend", headers=admin).json()
        assert spend["spend_usd"] > 0 and spend["budget_usd"] == 5 and spend["remaining_usd"] < 5

        assert httpx.post(f"{gw.url}/admin/keys/key_nope/revoke", headers=admin).status_code == 404
        revoked = httpx.post(f"{gw.url}/admin/keys/{key_id}/revoke", headers=admin)
        assert revoked.status_code == 200 and revoked.json()["active"] is False
        gone = post(gw, secret)
        assert gone.status_code == 401 and "revoked" in error(gone)["message"]

    # The CLI sees what the API did; it never prints a secret or a hash.
    listing = gw.keys("list")
    assert listing.returncode == 0 and "app" in listing.stdout and secret not in listing.stdout


def test_key_policy_is_the_default_for_its_requests(sim: SimProcess) -> None:
    gw = GatewayProcess(catalogue(sim), open_access=False)
    cheap = gw.create_key("--policy", "cheapest")
    plain = gw.create_key()
    with gw:
        plan = httpx.post(f"{gw.base_url}/route", json=BODY, headers={"authorization": f"Bearer {cheap}"}).json()
        assert plan["strategy"].startswith("policy=cheapest ")
        plan = httpx.post(f"{gw.base_url}/route", json=BODY, headers={"authorization": f"Bearer {plain}"}).json()
        assert plan["strategy"].startswith("policy=default ")
        assert httpx.post(f"{gw.base_url}/route", json=BODY).status_code == 401


def test_limits_and_budgets_are_shared_by_replicas(sim: SimProcess, redis_url: str) -> None:
    cat = catalogue(sim, limits_sync_s=0.1, keys_refresh_s=0.2)
    env = {"REDIS_URL": redis_url, "ULTRAROUTE_ADMIN_KEY": ADMIN_KEY}
    a = GatewayProcess(cat, env=env, open_access=False)
    b = GatewayProcess(cat, env=env, open_access=False)
    limited = a.create_key("--rpm", "4")
    with together(a, b):
        # A key created on replica A through the admin API works on B at once.
        created = httpx.post(f"{a.url}/admin/keys", headers={"authorization": f"Bearer {ADMIN_KEY}"},
                             json={"name": "budget", "budget_usd": 0.000001})
        budgeted = created.json()["key"]
        for _ in range(4):
            assert post(a, limited).status_code == 200
        assert post(a, budgeted).status_code == 200
        # A's counts reach Redis at its next sync (every 0.1 s; seconds later on a busy machine). Its spend
        # is charged after its last request: once Redis holds that, it holds the 4 requests too.
        spend_url = f"{b.url}/admin/keys/{created.json()['id']}/spend"
        started = time.monotonic()
        while httpx.get(spend_url, headers={"authorization": f"Bearer {ADMIN_KEY}"}).json()["spend_usd"] == 0:
            assert time.monotonic() - started < 10, "A's spend never reached Redis"
            time.sleep(0.05)
        # B reads them back at its own next sync; until then it admits on its own count, which stays under
        # the limit for 3 requests: a refusal within 4 is B counting A's requests.
        for _ in range(4):
            if (over := post(b, limited)).status_code == 429:
                break
            time.sleep(0.3)
        assert over.status_code == 429 and error(over)["code"] == "rate_limit_exceeded"
        assert "retry-after" in over.headers
        # B reads A's charge back at its first sync after Redis held it; the refusal above may have come
        # from an earlier one, which held A's requests but not yet the charge made after them (seen once
        # in a clean-clone run on a Redis Cluster): ten of B's sync intervals.
        time.sleep(1.0)
        spent = post(b, budgeted)
        assert spent.status_code == 429 and error(spent)["code"] == "budget_exceeded"


def test_keys_and_spend_survive_a_restart_with_redis(sim: SimProcess, redis_url: str) -> None:
    cat = catalogue(sim, limits_sync_s=0.1)
    env = {"REDIS_URL": redis_url, "ULTRAROUTE_ADMIN_KEY": ADMIN_KEY}
    gw = GatewayProcess(cat, env=env, open_access=False)
    key = gw.create_key("--budget", "100")
    key_id = gw.keys("list").stdout.split("key_", 1)[1].split()[0]
    with gw:
        assert post(gw, key).status_code == 200
    assert not (gw.dir / "keys.json").exists()  # with Redis, keys live in Redis only
    with gw:  # a new process on the same Redis
        assert post(gw, key).status_code == 200
        spend = httpx.get(f"{gw.url}/admin/keys/key_{key_id}/spend",
                          headers={"authorization": f"Bearer {ADMIN_KEY}"}).json()
        assert spend["spend_usd"] > 0
    spend_cli = gw.keys("spend", f"key_{key_id}")
    assert spend_cli.returncode == 0 and '"spend_usd"' in spend_cli.stdout


def test_redis_outage_keeps_keys_and_limits_working(sim: SimProcess, private_redis: PrivateRedis) -> None:
    env = {"REDIS_URL": private_redis.url, "ULTRAROUTE_ADMIN_KEY": ADMIN_KEY}
    gw = GatewayProcess(catalogue(sim, limits_sync_s=0.1, keys_refresh_s=0.1), env=env, open_access=False)
    key = gw.create_key("--rpm", "3")
    with gw:
        assert post(gw, key).status_code == 200
        private_redis.stop()
        time.sleep(0.5)
        assert post(gw, key).status_code == 200  # the key is known from memory
        assert post(gw, "ur-unknown").status_code == 401
        assert post(gw, key).status_code == 200
        assert post(gw, key).status_code == 429  # limits hold, counted locally
        listing = httpx.get(f"{gw.url}/admin/keys", headers={"authorization": f"Bearer {ADMIN_KEY}"})
        assert listing.status_code == 503 and error(listing)["code"] == "key_store_unavailable"
    assert "Redis unreachable" in gw.logs()


def wait_for_status(gw: GatewayProcess, key: str, status: int, timeout: float = 10) -> float:
    """Seconds until a request with `key` gets `status` (polled every 50 ms); fails after `timeout`."""
    start = time.monotonic()
    while (got := post(gw, key).status_code) != status:
        assert time.monotonic() - start < timeout, f"still {got} after {timeout} s"
        time.sleep(0.05)
    return time.monotonic() - start


def test_a_revoked_key_stops_on_every_replica_within_keys_refresh_s(sim: SimProcess, redis_url: str) -> None:
    refresh_s = 0.3
    env = {"REDIS_URL": redis_url, "ULTRAROUTE_ADMIN_KEY": ADMIN_KEY}
    cat = catalogue(sim, keys_refresh_s=refresh_s)
    admin = {"authorization": f"Bearer {ADMIN_KEY}"}
    a = GatewayProcess(cat, env=env, open_access=False)
    b = GatewayProcess(cat, env=env, open_access=False)
    a.create_key()  # a replica needs a key in the store to start
    with together(a, b):
        created = httpx.post(f"{a.url}/admin/keys", headers=admin, json={"name": "short-lived"}).json()
        # New on A, known to B within one poll or one miss reload (B's start-up load may be under
        # `miss_refresh_s` (0.5 s) old, so "at once" is not promised); 1 s more for a busy machine.
        assert wait_for_status(b, created["key"], 200) < 0.5 + 1.0
        assert httpx.post(f"{a.url}/admin/keys/{created['id']}/revoke", headers=admin).status_code == 200
        took = wait_for_status(b, created["key"], 401)
    # B polls the store's version every 0.3 s; 1 s more for a busy machine.
    assert took < refresh_s + 1.0, took


def test_limits_sharing_resumes_after_redis_returns(sim: SimProcess, private_redis: PrivateRedis) -> None:
    env = {"REDIS_URL": private_redis.url, "ULTRAROUTE_ADMIN_KEY": ADMIN_KEY}
    cat = catalogue(sim, limits_sync_s=0.1, keys_refresh_s=0.2)
    a = GatewayProcess(cat, env=env, open_access=False)
    b = GatewayProcess(cat, env=env, open_access=False)
    a.create_key()
    with together(a, b):
        private_redis.stop()
        time.sleep(0.5)  # both replicas find Redis gone
        private_redis.start()  # empty: keys and counters from before are gone with it
        start = time.monotonic()
        while (created := httpx.post(f"{a.url}/admin/keys", headers={"authorization": f"Bearer {ADMIN_KEY}"},
                                     json={"name": "after", "rpm": 3})).status_code != 201:
            assert time.monotonic() - start < 10, created.text
            time.sleep(0.1)
        key = created.json()["key"]
        for replica in (a, b):  # a replica that saw the outage shares counts again once it says so
            while "usage sharing: Redis unreachable" in (logs := replica.logs()) and \
                    "usage sharing: Redis reachable again" not in logs:
                assert time.monotonic() - start < 20, logs[-2000:]
                time.sleep(0.1)
        for _ in range(3):
            assert post(a, key).status_code == 200
        time.sleep(3.0)  # thirty sync intervals (one second was not enough with the cores busy: 1 run in 12)
        over = post(b, key)  # B has served none of them: only shared counts can refuse it
        assert over.status_code == 429 and error(over)["code"] == "rate_limit_exceeded", \
            f"{over.text}\nA: {a.logs()[-2500:]}\nB: {b.logs()[-2500:]}"
    assert "Redis unreachable" in a.logs()
