"""The simulator's admin API: JSON over HTTP on its own port, for tests and benchmarks.

Routes:
  GET   /admin/health                    -> {"ok": true}
  GET   /admin/endpoints                 -> {name: {"profile", "stats" (no attempts), "base_url"}}
  GET   /admin/endpoints/{name}          -> {"profile", "stats" (no attempts), "base_url"}
  PATCH /admin/endpoints/{name}          body: partial profile -> the new profile (400 if invalid)
  GET   /admin/endpoints/{name}/stats    -> counters plus the last 1000 attempts
  GET   /admin/endpoints/{name}/requests -> the last 100 API requests received: [{"path", "body"}]
  POST  /admin/endpoints/{name}/reset    body: optional {"profiles": bool} -> that endpoint only
  POST  /admin/reset                     body: optional {"profiles": bool} -> every endpoint

Does: route and (de)serialise. Does not: hold state of its own; the endpoints own it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from gateway.simulator.config import SimConfigError
from gateway.simulator.endpoint import Endpoint
from gateway.simulator.http11 import HttpConnection, Request


class AdminApi:
    """Request handler for the admin listener, over the simulator's endpoints."""

    def __init__(self, endpoints: dict[str, Endpoint], base_url: Callable[[str], str]) -> None:
        self._endpoints = endpoints
        self._base_url = base_url

    def _summary(self, name: str) -> dict[str, Any]:
        endpoint = self._endpoints[name]
        return {
            "profile": endpoint.profile.model_dump(mode="json"),
            "stats": endpoint.stats(attempts=False),
            "base_url": self._base_url(name),
        }

    async def handle(self, req: Request, conn: HttpConnection) -> None:
        try:
            status, payload = await self._route(req)
        except SimConfigError as err:
            status, payload = 400, {"error": {"message": str(err), "type": "invalid_request_error"}}
        conn.send(status, orjson.dumps(payload))

    async def _route(self, req: Request) -> tuple[int, Any]:
        parts = [part for part in req.path.split("/") if part]
        method = req.method
        if parts[:1] != ["admin"]:
            return _not_found(req.path)
        rest = parts[1:]
        if rest == ["health"] and method == "GET":
            return 200, {"ok": True}
        if rest == ["reset"] and method == "POST":
            profiles = _profiles_flag(req.body)
            for endpoint in self._endpoints.values():
                await endpoint.reset(profiles)
            return 200, {"ok": True}
        if rest == ["endpoints"] and method == "GET":
            return 200, {name: self._summary(name) for name in self._endpoints}
        if len(rest) < 2 or rest[0] != "endpoints":
            return _not_found(req.path)
        name = rest[1]
        endpoint = self._endpoints.get(name)
        if endpoint is None:
            return 404, {"error": {"message": f"no endpoint named {name!r}", "type": "not_found"}}
        tail = rest[2:]
        if not tail and method == "GET":
            return 200, self._summary(name)
        if not tail and method == "PATCH":
            try:
                patch = orjson.loads(req.body or b"{}")
            except orjson.JSONDecodeError:
                raise SimConfigError("patch: body is not valid JSON") from None
            profile = await endpoint.apply_patch(patch)
            return 200, profile.model_dump(mode="json")
        if tail == ["stats"] and method == "GET":
            return 200, endpoint.stats(attempts=True)
        if tail == ["requests"] and method == "GET":
            return 200, endpoint.requests.as_list()
        if tail == ["reset"] and method == "POST":
            await endpoint.reset(_profiles_flag(req.body))
            return 200, {"ok": True}
        return _not_found(req.path)


def _profiles_flag(body: bytes) -> bool:
    if not body.strip():
        return False
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise SimConfigError("reset: body is not valid JSON") from None
    if not isinstance(data, dict):
        raise SimConfigError("reset: body must be a JSON object")
    return bool(data.get("profiles", False))


def _not_found(path: str) -> tuple[int, Any]:
    return 404, {"error": {"message": f"no admin route {path}", "type": "not_found"}}
