"""Runs a server under `benchmarks/first_write.py`'s valgrind with collection on only on a paced chat
request's way to its first token: not a tool to call by hand.

`python first_write_server.py LIB gateway ARGS...` (the gateway of the working directory) or
`python first_write_server.py LIB SCRIPT ARGS...` (the reference). LIB is the shared library
first_write.py compiles, whose two functions issue callgrind's client requests: `toggle` (collection
on/off) and `dump(label)` (write the counts since the last dump, labelled, and zero them).

Collection is on from a chat request's ASGI entry to the write of its upstream request (aiohttp's
writer, or the gateway's own `write_request`), off while the upstream thinks, and on again from the
upstream's first bytes to the first body write to the client. Each stretch is dumped under the label
of the mark where it ends; in the gateway, marks at its stages' entries and exits split the two
stretches further (a mark whose function a checkout lacks is left out).

Under valgrind a request takes ~50x longer, so the caches that expire by the clock (the router's
ranking, the telemetry views) would be rebuilt inside every request; here they are kept (TTLs lifted),
as between the rebuilds of a gateway running at full speed. What a rebuild costs is for other
measures.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import os
import runpy
import sys
from collections.abc import Callable
from typing import Any

import aiohttp.http_writer
import uvicorn

GATEWAY = sys.argv[2] == "gateway"


class Request:
    """Where the request being measured is: idle -> sending (collected) -> upstream (not) ->
    answering (collected) -> idle. One at a time (the driver sends them one by one)."""

    def __init__(self) -> None:
        self.at = "idle"


def main() -> None:
    lib = ctypes.CDLL(sys.argv[1])
    lib.dump.argtypes = [ctypes.c_char_p]
    toggle: Callable[[], None] = lib.toggle
    request = Request()

    def dump(label: str) -> None:
        if request.at in ("sending", "answering"):
            lib.dump(label.encode())

    def on_upstream_write(write: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
            if request.at == "sending":
                dump("A9 aiohttp to its write")
                toggle()
                request.at = "upstream"
            return write(self, *args, **kwargs)
        return wrapped

    writer = aiohttp.http_writer.StreamWriter
    writer._write = on_upstream_write(writer._write)  # type: ignore[method-assign]
    writer._writelines = on_upstream_write(writer._writelines)  # type: ignore[method-assign]
    if GATEWAY:
        sys.path.insert(0, os.getcwd())
        _mark_gateway(dump)
        try:  # a gateway that writes its provider requests itself (upstreams/aiohttp_post.py)
            import gateway.upstreams.aiohttp_post as lean
        except ImportError:
            pass
        else:
            lean.write_request = on_upstream_write(lean.write_request)  # type: ignore[assignment]
    load = uvicorn.Config.load

    def loaded(config: uvicorn.Config) -> None:
        load(config)
        _on_first_bytes(request, toggle)
        config.loaded_app = _watched(config.loaded_app, request, toggle, dump)

    uvicorn.Config.load = loaded  # type: ignore[method-assign]
    if GATEWAY:
        from gateway.cli import main as gateway_main

        sys.argv = ["ultraroute", *sys.argv[3:]]
        sys.exit(gateway_main())
    sys.argv = sys.argv[2:]
    runpy.run_path(sys.argv[0], run_name="__main__")


def _on_first_bytes(request: Request, toggle: Callable[[], None]) -> None:
    if GATEWAY:
        from gateway.upstreams.aiohttp_tuned import StreamProtocol as protocol
    else:
        from aiohttp.client_proto import ResponseHandler as protocol
    received = protocol.data_received

    def data_received(self: Any, data: bytes) -> None:
        if request.at == "upstream":
            toggle()
            request.at = "answering"
        received(self, data)

    protocol.data_received = data_received  # type: ignore[method-assign]


def _watched(app: Any, request: Request, toggle: Callable[[], None], dump: Callable[[str], None]) -> Any:
    async def watched(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != "/v1/chat/completions":
            await app(scope, receive, send)
            return

        async def sent(message: Any) -> None:
            if request.at == "answering" and message["type"] == "http.response.start":
                dump("B5 to the response's start")
            await send(message)
            if request.at == "answering" and message["type"] == "http.response.body" and message.get("body"):
                dump("B6 start to first body write")
                toggle()
                request.at = "idle"

        toggle()
        request.at = "sending"
        try:
            await app(scope, receive, sent)
        finally:
            if request.at in ("sending", "answering"):
                toggle()
            if request.at != "idle":
                print(f"first_write_server: a request ended {request.at}", file=sys.stderr)
            request.at = "idle"

    return watched


def _mark_gateway(dump: Callable[[str], None]) -> None:
    """Marks at the gateway's stages (label: the stretch that ends there)."""
    import gateway.dispatch as dispatch
    import gateway.pipeline as pipeline
    import gateway.routing.router as router
    import gateway.telemetry.store as store
    import gateway.upstreams.client as client

    def lifted(cls: type, setting: Callable[[Any], None]) -> None:
        init = cls.__init__

        @functools.wraps(init)
        def made(self: Any, *args: Any, **kwargs: Any) -> None:
            init(self, *args, **kwargs)
            setting(self)
        cls.__init__ = made  # type: ignore[misc]

    lifted(router.Router, lambda r: setattr(r, "settings", dataclasses.replace(r.settings, ranking_ttl_s=1e9)))
    # The stores' common base (TelemetryStore is a Protocol: a lift there never reaches a store).
    lifted(getattr(store, "StoreBase", store.TelemetryStore), lambda t: setattr(t, "cache_ttl_s", 1e9))

    def around(owner: Any, name: str, before: str | None, after: str | None) -> None:
        function = getattr(owner, name, None)
        if function is None:
            return

        @functools.wraps(function)
        async def marked(*args: Any, **kwargs: Any) -> Any:
            if before:
                dump(before)
            result = await function(*args, **kwargs)
            if after:
                dump(after)
            return result
        setattr(owner, name, marked)

    prepare = getattr(pipeline, "prepare", None)
    if prepare is not None:
        def prepared(*args: Any, **kwargs: Any) -> Any:
            dump("A3 auth, body, parse")
            return prepare(*args, **kwargs)
        pipeline.prepare = prepared
    around(pipeline, "plan_request", "A1 ASGI entry to plan_request", "A4 prepare (resolve, plan)")
    around(dispatch.Dispatcher, "dispatch", "A5 to dispatch", "B3 to dispatch's return")
    around(dispatch, "open_attempt", "A6 dispatch to open_attempt", "B2 response to gate open")
    around(client.Upstreams, "open", "A7 open_attempt to Upstreams.open", "B1 aiohttp's response")


if __name__ == "__main__":
    main()
