"""End to end, hostile input: a gateway process in front of a simulator, driven by httpx over loopback.

Covers issue "Access control, budgets and hostile input", section "Hostile input": bodies over the
size cap (declared or chunked), too deep, with too many messages; unknown `x-ultraroute-*` headers
and gateway fields; no request can make the gateway connect anywhere but its catalogue (SSRF); and
nothing the client sends reaches a response header unescaped. The gateway runs open (no client keys).
"""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from gateway.simulator.testing import SimProcess, make_sim_config
from tests.harness import GatewayProcess, catalogue_for
from tests.scrape import access_lines, metric_value

USER = [{"role": "user", "content": "hello"}]
LIMITS = {"max_body_bytes": 65536, "max_json_depth": 16, "max_messages": 50}
GENERATED_ID = re.compile(r"^[0-9a-f]{24}$")


class Listener:
    """A TCP listener on a free loopback port that records every connection made to it: the place a
    hostile request would try to make the gateway connect to."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.settimeout(0.1)
        self.port = int(self.sock.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.connections: list[tuple[str, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, addr = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections.append(addr)
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.sock.close()


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    config = make_sim_config({"std": {"ttft_ms": 5, "ttft_jitter": 0, "tokens_per_second": 2000,
                                      "output_tokens": 8}})
    with SimProcess(config) as process:
        yield process


@pytest.fixture(scope="module")
def gateway(sim: SimProcess) -> Iterator[GatewayProcess]:
    catalogue = catalogue_for(sim, {"chat-model": [{"sim": "std"}]}, gateway=LIMITS)
    with GatewayProcess(catalogue) as process:
        yield process


@pytest.fixture
def client(gateway: GatewayProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gateway.base_url, timeout=10) as c:
        yield c


def assert_openai_error(r: httpx.Response, status: int, code: str | None = None,
                        param: str | None = None) -> dict[str, Any]:
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert set(error) == {"message", "type", "code", "param"}
    assert error["type"] == "invalid_request_error" and error["message"]
    if code is not None:
        assert error["code"] == code
    if param is not None:
        assert error["param"] == param and param in error["message"]
    return error  # type: ignore[no-any-return]


def chunks(total: int, size: int = 16384) -> Iterator[bytes]:
    """An upload without content-length: httpx sends an iterator with transfer-encoding: chunked."""
    sent = 0
    while sent < total:
        piece = min(size, total - sent)
        sent += piece
        yield b" " * piece


# --- (a) limits ---------------------------------------------------------------------------------


def test_body_over_cap_declared_length(client: httpx.Client) -> None:
    body = b'{"model": "chat-model", "messages": [{"role": "user", "content": "' + b"x" * 70000 + b'"}]}'
    r = client.post("/chat/completions", content=body, headers={"content-type": "application/json"})
    error = assert_openai_error(r, 413, "payload_too_large")
    assert "65536" in error["message"]
    assert r.headers["x-should-retry"] == "false"


def test_body_over_cap_chunked(client: httpx.Client, gateway: GatewayProcess) -> None:
    for path in ("/chat/completions", "/route"):
        # 4 MiB, far over the cap: refused once 64 KiB have arrived, the rest is discarded unread.
        started = time.perf_counter()
        r = client.post(path, content=chunks(4 << 20), headers={"content-type": "application/json"})
        assert "content-length" not in r.request.headers
        assert_openai_error(r, 413, "payload_too_large")
        assert time.perf_counter() - started < 5
    # The same connection, and the gateway, still serve.
    ok = client.post("/chat/completions", json={"model": "chat-model", "messages": USER})
    assert ok.status_code == 200 and ok.headers["x-ultraroute-endpoint"] == "std"


def test_chunked_body_under_cap_is_served(client: httpx.Client) -> None:
    raw = b'{"model": "chat-model", "messages": [{"role": "user", "content": "hi"}]}'
    r = client.post("/chat/completions", content=iter([raw[:10], raw[10:30], raw[30:]]),
                    headers={"content-type": "application/json"})
    assert "content-length" not in r.request.headers
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"]


def test_deep_json(client: httpx.Client) -> None:
    deep: Any = "x"
    for _ in range(20):  # 20 levels inside the body: over the limit of 16
        deep = [deep]
    r = client.post("/chat/completions", json={"model": "chat-model", "messages": USER, "metadata": deep})
    error = assert_openai_error(r, 400, "json_too_deep")
    assert "16" in error["message"]
    # Deeper than orjson's own limit, and small enough to pass the size cap: still a named 400.
    bomb = b'{"model": "chat-model", "x": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    r = client.post("/chat/completions", content=bomb, headers={"content-type": "application/json"})
    assert_openai_error(r, 400, "json_too_deep")


def test_too_many_messages(client: httpx.Client) -> None:
    r = client.post("/chat/completions", json={"model": "chat-model", "messages": USER * 51})
    assert_openai_error(r, 400, "too_many_messages", "messages")
    assert client.post("/chat/completions", json={"model": "chat-model", "messages": USER * 50}).status_code == 200


def test_unknown_ultraroute_header(client: httpx.Client) -> None:
    r = client.post("/chat/completions", json={"model": "chat-model", "messages": USER},
                    headers={"x-ultraroute-sped": "fast"})
    assert_openai_error(r, 400, "unknown_header", "x-ultraroute-sped")
    r = client.post("/route", json={"model": "chat-model", "messages": USER},
                    headers={"x-ultraroute-endpoint": "std"})
    assert_openai_error(r, 400, param="x-ultraroute-endpoint")


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"provider": {"sort": "price", "teleport": True}}, "provider.teleport"),
        ({"provider": {"allow_fallbacks": "no"}}, "provider.allow_fallbacks"),
        ({"usage": {"include": True, "cost": 1}}, "usage.cost"),
        ({"route": "cheapest"}, "route"),
        ({"transforms": "middle-out"}, "transforms"),
        ({"session_id": {"id": 1}}, "session_id"),
    ],
)
def test_gateway_fields_name_the_offender(client: httpx.Client, extra: dict[str, Any], param: str) -> None:
    r = client.post("/chat/completions", json={"model": "chat-model", "messages": USER, **extra})
    assert_openai_error(r, 400, param=param)


@pytest.mark.parametrize("raw", [b"", b"\xff\xfe\x00", b"{", b'"str"', b"null", b"[]", b'{"model": NaN}',
                                 b'{"model": "chat-model", "messages": 7}'])
def test_garbage_bodies_are_400(client: httpx.Client, raw: bytes) -> None:
    r = client.post("/chat/completions", content=raw, headers={"content-type": "application/json"})
    assert_openai_error(r, 400)


def test_no_unhandled_errors_logged(client: httpx.Client, gateway: GatewayProcess) -> None:
    """Self-contained: sends a sample of every kind of hostile input itself (whatever ran before), then
    finds no request that reached the catch-all (`unhandled error`) or left a traceback in the log."""
    deep: Any = "x"
    for _ in range(20):
        deep = [deep]
    json_bodies: list[Any] = [{"model": "chat-model", "messages": USER, "metadata": deep},
                              {"model": "chat-model", "messages": USER * 51},
                              {"model": "chat-model", "messages": USER, "provider": {"teleport": True}},
                              {"model": "chat-\r\nx-evil: 1", "messages": USER, "stream": True},
                              {"model": "chat-model", "messages": [{"role": "user", "content": {"x": 1}}]}]
    raw_bodies = [b"", b"\xff\xfe\x00", b"{", b"null", b'{"model": NaN}', b"[" * 5000 + b"]" * 5000,
                  b'{"model": "chat-model", "messages": 7}']
    statuses = [client.post("/chat/completions", json=body).status_code for body in json_bodies]
    statuses += [client.post(path, content=raw, headers={"content-type": "application/json"}).status_code
                 for raw in raw_bodies for path in ("/chat/completions", "/route")]
    statuses.append(client.post("/chat/completions", content=chunks(1 << 20)).status_code)
    statuses.append(client.post("/chat/completions", json={"model": "chat-model", "messages": USER},
                                headers={"x-ultraroute-sped": "fast", "x-request-id": b"\xff"}).status_code)
    proxied = raw_exchange(gateway.port, b"CONNECT 127.0.0.1:9 HTTP/1.1\r\nHost: 127.0.0.1:9\r\n\r\n")
    assert len(statuses) == 21 and all(s < 500 for s in statuses) and statuses.count(200) <= 1, statuses
    assert proxied.startswith(b"HTTP/1.1 4"), proxied[:200]
    assert client.get(f"{gateway.url}/healthz").status_code == 200
    logs = gateway.logs()
    assert "unhandled error" not in logs and "Traceback" not in logs, logs[-3000:]


# --- (b) no SSRF ----------------------------------------------------------------------------------


@pytest.fixture
def listener() -> Iterator[Listener]:
    listening = Listener()
    yield listening
    listening.close()


def raw_exchange(port: int, data: bytes) -> bytes:
    """Send `data` as it is (no client-side checks) and read what comes back until close or 2 s."""
    out = b""
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.sendall(data)
        try:
            while chunk := s.recv(65536):
                out += chunk
        except (TimeoutError, ConnectionResetError):
            pass
    return out


def test_no_request_makes_the_gateway_connect_elsewhere(client: httpx.Client, gateway: GatewayProcess,
                                                        sim: SimProcess, listener: Listener) -> None:
    url = listener.url
    host = f"127.0.0.1:{listener.port}"
    bodies: list[dict[str, Any]] = [
        {"model": url},
        {"model": f"{url}/chat/completions"},
        {"model": f"chat-model:{url}"},
        {"model": f"chat-model@{host}"},
        {"model": "chat-model", "provider": {"order": [url, host]}},
        {"model": "chat-model", "provider": {"only": [url]}},
        {"model": "chat-model", "provider": {"only": [host], "allow_fallbacks": False}},
        {"model": "chat-model", "provider": {"base_url": url}},
        {"model": "chat-model", "base_url": url, "api_base": url, "endpoint": url},
        {"model": "chat-model", "extra_body": {"base_url": url, "api_base": url}},
        {"model": "chat-model", "models": [url, f"{url}/chat/completions"]},
        {"model": url, "models": [url, host]},
        {"model": "chat-model", "stream": True, "base_url": url, "models": [url]},
    ]
    header_sets: list[dict[str, str]] = [
        {"host": host},
        {"x-forwarded-host": host, "x-forwarded-proto": "http", "x-forwarded-port": str(listener.port)},
        {"forwarded": f"host={host};proto=http", "x-original-url": url, "x-rewrite-url": url},
        {"x-ultraroute-endpoint": url},
        {"x-ultraroute-base-url": url},
        {"x-ultraroute-policy": url},
    ]
    statuses: list[int] = []
    for body in bodies:
        for path in ("/chat/completions", "/route"):
            statuses.append(client.post(path, json={"messages": USER, **body}).status_code)
    for headers in header_sets:
        statuses.append(client.post("/chat/completions", json={"model": "chat-model", "messages": USER},
                                    headers=headers).status_code)
    # Proxy-style requests: an absolute-form target naming the listener, and CONNECT to it.
    payload = b'{"model": "chat-model", "messages": [{"role": "user", "content": "hi"}]}'
    replies = {}
    for method, first_line in (("absolute", f"POST {url}/chat/completions HTTP/1.1"),
                               ("connect", f"CONNECT {host} HTTP/1.1")):
        replies[method] = raw_exchange(
            gateway.port, (f"{first_line}\r\nHost: {host}\r\ncontent-type: application/json\r\n"
                           f"content-length: {len(payload)}\r\nconnection: close\r\n\r\n").encode() + payload)
    # An absolute-form target is read as the gateway's own route: served from its catalogue, by its
    # own endpoint, never forwarded to the host it names; CONNECT is no tunnel, it is refused (400).
    head, _, body = replies["absolute"].partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 "), replies["absolute"][:300]
    assert b"\r\nx-ultraroute-endpoint: std\r\n" in head and b'"object":"chat.completion"' in body
    assert replies["connect"].startswith(b"HTTP/1.1 400 "), replies["connect"][:300]
    assert b"200 Connection established" not in replies["connect"]

    assert 500 not in statuses and 200 in statuses  # the hostile options were refused or ignored
    time.sleep(0.3)  # a connection attempt made late (a retry, a hedge) would show by now
    assert listener.connections == []

    before = sim.stats("std")["requests"]
    r = client.post("/chat/completions", json={"model": "chat-model", "messages": USER})
    assert r.status_code == 200 and r.headers["x-ultraroute-endpoint"] == "std"
    assert sim.stats("std")["requests"] == before + 1


# --- (c) nothing client-sent lands in a response header unescaped ------------------------------


def printable_headers(r: httpx.Response) -> None:
    for name, value in r.headers.raw:
        assert all(0x20 <= b <= 0x7E for b in name + value), (name, value)
        assert not name.lower().startswith(b"x-evil")


@pytest.mark.parametrize("request_id", [b"bad id", b"caf\xc3\xa9-\xe2\x98\x83", b"a" * 500, b"a%0d%0ax-evil:%201",
                                        b"id;x-evil=1", b"\xff\xfe"])
def test_unsafe_request_ids_are_replaced(client: httpx.Client, request_id: bytes) -> None:
    for r in (client.post("/chat/completions", json={"model": "chat-model", "messages": USER},
                          headers={"x-request-id": request_id}),
              client.post("/chat/completions", json={"model": "nope", "messages": USER},
                          headers={"x-request-id": request_id}),
              client.get("/models", headers={"x-request-id": request_id})):
        printable_headers(r)
        assert GENERATED_ID.match(r.headers["x-request-id"]), r.headers["x-request-id"]
        assert request_id not in r.content


@pytest.mark.parametrize("model", ["chät-mödel", "chat-model%0d%0ax-evil: 1", "chat-model:%0d%0a",
                                   "chat-model\r\nx-evil: 1", "chat-model\u2028x", "\u202echat-model"])
def test_hostile_model_names_stay_out_of_headers(client: httpx.Client, model: str) -> None:
    bodies = [{"model": model, "messages": USER},
              {"model": model, "messages": USER, "stream": True},
              {"model": "chat-model", "messages": USER, "models": [model]},
              {"model": "chat-model", "messages": USER, "provider": {"order": [model]}, "session_id": model}]
    for body in bodies:
        r = client.post("/chat/completions", json=body, headers={"x-session-id": "s%0d%0ax-evil: 1"})
        assert r.status_code in (200, 400, 404), r.text
        printable_headers(r)
        if r.status_code != 200:
            assert_openai_error(r, r.status_code)


def test_a_client_that_hangs_up_mid_upload_is_a_hang_up_not_a_500(client: httpx.Client,
                                                                   gateway: GatewayProcess) -> None:
    """Headers that announce 60 kB, 1 kB of body, then the connection closes: Starlette's disconnect
    while the body is read is recorded as the client's hang-up (499, outcome `cancelled`), counted so
    in the metrics; it is not a 500 and leaves no traceback."""
    before = client.get(f"{gateway.url}/metrics").text
    request_id = f"upload-{time.monotonic_ns()}"
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{gateway.port}\r\n"
            f"content-type: application/json\r\ncontent-length: 60000\r\nx-request-id: {request_id}\r\n\r\n")
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=5) as s:
        s.sendall(head.encode() + b'{"model": "chat-model", "messages": [{"role": "user", "content": "'
                  + b"x" * 1000)
        time.sleep(0.2)  # the gateway is reading the body when the client goes
    deadline = time.monotonic() + 20
    while not (lines := [line for line in access_lines(gateway.logs()) if line["request_id"] == request_id]):
        assert time.monotonic() < deadline, gateway.logs()[-3000:]
        time.sleep(0.1)
    assert len(lines) == 1 and lines[0]["status"] == 499 and lines[0]["outcome"] == "cancelled", lines
    after = client.get(f"{gateway.url}/metrics").text

    def grew(name: str, **labels: str) -> float:
        return metric_value(after, name, **labels) - metric_value(before, name, **labels)

    assert grew("ultraroute_rejected_requests_total", api="chat", reason="cancelled") == 1
    assert grew("ultraroute_client_requests_total", api="chat", status="4xx") == 1
    assert grew("ultraroute_client_requests_total", api="chat", status="5xx") == 0
    logs = gateway.logs()
    assert "unhandled error" not in logs and "Traceback" not in logs, logs[-3000:]
