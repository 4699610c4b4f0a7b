"""The bare pass-through the gateway is measured against: uvicorn (httptools, uvloop), one plain ASGI
function, aiohttp to the upstream, no features. `python benchmarks/reference.py PORT UPSTREAM_ROOT`
(e.g. `http://127.0.0.1:9000`): each request goes to the same path there (/v1/chat/completions,
/v1/messages, /v1/responses), its body as sent."""

from __future__ import annotations

import sys

import aiohttp
import uvicorn

UPSTREAM = sys.argv[2]
session: aiohttp.ClientSession | None = None


async def app(scope, receive, send):  # type: ignore[no-untyped-def]
    global session
    if scope["type"] == "lifespan":
        while (message := await receive())["type"] != "lifespan.shutdown":
            if message["type"] == "lifespan.startup":
                session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
                await send({"type": "lifespan.startup.complete"})
        await session.close()  # type: ignore[union-attr]
        return await send({"type": "lifespan.shutdown.complete"})
    if scope["path"] == "/healthz":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        return await send({"type": "http.response.body", "body": b"ok"})
    body, more = b"", True
    while more:
        message = await receive()
        body, more = body + message.get("body", b""), message.get("more_body", False)
    async with session.post(UPSTREAM + scope["path"], data=body, headers={"content-type": "application/json"}) as r:  # type: ignore[union-attr]
        await send({"type": "http.response.start", "status": r.status,
                    "headers": [(b"content-type", r.headers["content-type"].encode())]})
        async for data in r.content.iter_any():
            await send({"type": "http.response.body", "body": data, "more_body": True})
    await send({"type": "http.response.body", "body": b""})


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), loop="uvloop", http="httptools",
                access_log=False, log_level="warning")
