"""End to end: `ultraroute serve --workers 2`, each worker a replica.

With Redis, a request one worker served shows in the other's `/v1/endpoints` (they share stats as
replicas on different machines do). A keep-alive connection stays with the worker that accepted it,
so a client pinned to each worker (told apart by `/healthz`'s replica id) can ask each in turn.
Without Redis, start-up says that each worker measures and limits alone. SIGHUP reloads every worker
without killing anyone; a worker killed with SIGKILL is replaced by a new one that serves; SIGTERM to the
supervisor stops every worker, and it exits 0.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
import uuid
from pathlib import Path

import httpx
import openai
import pytest
import yaml

from gateway.simulator.testing import SimProcess, make_sim_config
from tests.harness import GatewayProcess, catalogue_for, free_ports

FAST = {"ttft_ms": 5, "ttft_jitter": 0, "tokens_per_second": 10_000, "output_tokens": 4}


def pinned_clients(url: str, workers: int) -> dict[str, httpx.Client]:
    """One keep-alive client per worker: replica id -> a client whose connection that worker accepted."""
    found: dict[str, httpx.Client] = {}
    for _ in range(100):  # the kernel spreads new connections over the workers at random
        client = httpx.Client(base_url=url, timeout=20, limits=httpx.Limits(max_connections=1))
        replica = client.get("/healthz").json()["replica"]
        if replica in found:
            client.close()
            continue
        found[replica] = client
        if len(found) == workers:
            return found
    raise AssertionError(f"only {sorted(found)} answered 100 new connections")


def models_of(client: httpx.Client, key: str) -> set[str]:
    return {m["id"] for m in client.get("/v1/models", headers={"authorization": f"Bearer {key}"}).json()["data"]}


def requests_seen(client: httpx.Client) -> int:
    return sum(row["stats"]["requests"] for row in client.get("/v1/endpoints").json()["data"])


def wait_until_seen(client: httpx.Client, n: int) -> None:
    """Stats are recorded after the response and shared every flush: wait for them (bounded)."""
    deadline = time.monotonic() + 15
    while requests_seen(client) < n:
        assert time.monotonic() < deadline, f"{client.get('/healthz').json()} never saw {n} request(s)"
        time.sleep(0.1)


@pytest.fixture
def sim() -> SimProcess:
    with SimProcess(make_sim_config({"fast": FAST})) as sim:
        yield sim


def test_two_workers_share_stats_through_redis(sim: SimProcess, redis_url: str) -> None:
    catalogue = catalogue_for(sim, {"m": [{"sim": "fast", "id": "fast"}]},
                              gateway={"redis_key_prefix": f"t-{uuid.uuid4().hex[:8]}", "telemetry_flush_s": 0.2})
    own = free_ports(2)
    gw = GatewayProcess(catalogue, env={"REDIS_URL": redis_url}, workers=2,
                        serve_args=("--worker-ports", str(own))).start()
    try:
        clients = pinned_clients(gw.url, 2)
        (first, a), (second, b) = clients.items()
        assert first != second
        # Each worker also answers on its own port, e.g. for Prometheus to scrape each one.
        assert {httpx.get(f"http://127.0.0.1:{port}/healthz").json()["replica"] for port in (own, own + 1)} == \
            {first, second}
        assert requests_seen(a) == 0 and requests_seen(b) == 0
        sdk = openai.OpenAI(base_url=gw.base_url, api_key="unused", max_retries=0, http_client=a)
        answer = sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert answer.choices[0].message.content
        assert a.get("/healthz").json()["replica"] == first  # it was the first worker that served it
        wait_until_seen(b, 1)  # the other worker's view, merged from Redis
        wait_until_seen(a, 1)
        assert b.get("/healthz").json()["replica"] == second
        assert requests_seen(a) == 1 and requests_seen(b) == 1  # counted once, not once per worker
        for client in clients.values():
            client.close()
        assert "without REDIS_URL" not in gw.logs()
    finally:
        proc = gw.proc
        gw.stop()
    assert proc is not None and proc.returncode == 0, gw.logs()[-2000:]  # SIGTERM: a clean stop


def test_without_redis_each_worker_says_it_stands_alone(sim: SimProcess) -> None:
    """...and each reads the client keys from the keys file, as a single process does."""
    catalogue = catalogue_for(sim, {"m": [{"sim": "fast", "id": "fast"}]})
    gw = GatewayProcess(catalogue, workers=2, open_access=False)
    key = gw.create_key()
    with gw:
        clients = pinned_clients(gw.url, 2)  # both serve
        for client in clients.values():
            stranger = openai.OpenAI(base_url=gw.base_url, api_key="ur-wrong", max_retries=0, http_client=client)
            with pytest.raises(openai.AuthenticationError):
                stranger.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
            sdk = openai.OpenAI(base_url=gw.base_url, api_key=key, max_retries=0, http_client=client)
            assert sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        for client in clients.values():
            wait_until_seen(client, 1)
        for client in clients.values():
            assert requests_seen(client) == 1  # its own request only: nothing is shared
        # SIGHUP with a catalogue that has one more model: every worker reloads it (each logs it, and
        # each one's /v1/models shows the new model), and none died of it (same workers, same connections).
        changed = {**catalogue, "models": {**catalogue["models"], "m2": catalogue["models"]["m"]}}
        gw.config.write_text(yaml.safe_dump(changed))
        assert gw.proc is not None
        gw.proc.send_signal(signal.SIGHUP)  # forwarded to the workers
        pending = dict(clients)
        deadline = time.monotonic() + 30
        while pending:  # each worker asked in turn (an idle keep-alive connection would be closed after 5 s)
            assert time.monotonic() < deadline, f"{sorted(pending)} never reloaded: {gw.logs()[-2000:]}"
            for replica, client in list(pending.items()):
                assert client.get("/healthz").json()["replica"] == replica  # still that worker
                if "m2" in models_of(client, key):
                    pending.pop(replica).close()
            time.sleep(0.1)
        assert gw.logs().count("SIGHUP: configuration reloaded") == 2, gw.logs()[-2000:]
        assert gw.proc.poll() is None
        notices = [line for line in gw.logs().splitlines() if "2 workers without REDIS_URL" in line]
        assert len(notices) == 1 and "each worker measures endpoints" in notices[0], gw.logs()[-2000:]


def test_a_crashed_worker_is_replaced_by_one_that_serves(sim: SimProcess) -> None:
    catalogue = catalogue_for(sim, {"m": [{"sim": "fast", "id": "fast"}]})
    with GatewayProcess(catalogue, workers=2) as gw:
        clients = pinned_clients(gw.url, 2)
        victim, survivor = clients
        pid = int(victim.rsplit("-", 1)[1])  # a replica id is "<host>-<pid>"
        os.kill(pid, signal.SIGKILL)
        clients[victim].close()
        deadline = time.monotonic() + 60
        newcomer: tuple[str, httpx.Client] | None = None
        while newcomer is None:  # until a third replica (the new worker) accepts a new connection
            assert time.monotonic() < deadline, gw.logs()[-2000:]
            client = httpx.Client(base_url=gw.url, timeout=10, limits=httpx.Limits(max_connections=1))
            with contextlib.suppress(httpx.HTTPError):
                replica = client.get("/healthz").json()["replica"]
                if replica not in clients:
                    newcomer = replica, client
                    continue
            client.close()
            time.sleep(0.1)
        replica, client = newcomer
        sdk = openai.OpenAI(base_url=gw.base_url, api_key="unused", max_retries=0, http_client=client)
        answer = sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert answer.choices[0].message.content
        assert client.get("/healthz").json()["replica"] == replica  # served by the new worker
        client.close()
        clients[survivor].close()
        os.kill(int(survivor.rsplit("-", 1)[1]), 0)  # the other worker untouched: still running
        assert f"(pid {pid}) exited with -9; restarting" in gw.logs()
        assert gw.proc is not None and gw.proc.poll() is None


def socket_fds(pid: int) -> int:
    """How many sockets process `pid` holds open."""
    fds = Path(f"/proc/{pid}/fd")
    return sum(1 for fd in fds.iterdir() if os.readlink(fd).startswith("socket:"))


def zombie(pid: int) -> bool:
    """Exited, not yet reaped by its parent."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"


def test_after_sigterm_the_port_refuses_once_the_workers_stop_listening(sim: SimProcess) -> None:
    """The supervisor lets go of its copy of the listening socket at SIGTERM. Held until it exits, the
    kernel would complete handshakes after the last worker stopped accepting, and reset them later:
    a client would send a request and get no answer instead of a refused connection.

    The supervisor is frozen (SIGSTOP) while the workers drain (3 s at least), so the moment between the workers' exit
    and its own lasts as long as the test needs."""
    catalogue = catalogue_for(sim, {"m": [{"sim": "fast", "id": "fast"}]}, gateway={"shutdown_delay_s": 3.0})
    own = free_ports(2)
    gw = GatewayProcess(catalogue, workers=2, serve_args=("--worker-ports", str(own))).start()
    assert gw.proc is not None
    supervisor = gw.proc.pid
    try:
        workers = [int(httpx.get(f"http://127.0.0.1:{port}/healthz").json()["replica"].rsplit("-", 1)[1])
                   for port in (own, own + 1)]
        assert socket_fds(supervisor) >= 3  # the shared port and each worker's own
        gw.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 15
        while socket_fds(supervisor) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert socket_fds(supervisor) == 0
        os.kill(supervisor, signal.SIGSTOP)
        deadline = time.monotonic() + 60
        while not all(zombie(pid) for pid in workers):
            assert time.monotonic() < deadline, gw.logs()[-2000:]
            time.sleep(0.1)
        with pytest.raises(ConnectionRefusedError):  # not a connection nobody will ever accept
            socket.create_connection(("127.0.0.1", gw.port), timeout=5).close()
        os.kill(supervisor, signal.SIGCONT)
        assert gw.proc.wait(timeout=30) == 0
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(supervisor, signal.SIGCONT)
        gw.stop()
