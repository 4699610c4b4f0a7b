"""serve/request_id.py: a client's plain-token id is kept and echoed; anything else is replaced."""

from __future__ import annotations

from starlette.types import Message

from gateway.serve.request_id import assign_request_id


async def _sent_headers(request_headers: list[tuple[bytes, bytes]],
                        response_headers: list[tuple[bytes, bytes]] | None = None) -> tuple[str, dict, list]:
    scope: dict = {"type": "http", "headers": request_headers}
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)
    request_id, send_with_id = assign_request_id(scope, send)
    await send_with_id({"type": "http.response.start", "status": 200, "headers": list(response_headers or [])})
    return request_id, scope, sent[0]["headers"]


async def test_a_plain_token_from_the_client_is_kept_and_echoed() -> None:
    request_id, scope, headers = await _sent_headers([(b"x-request-id", b"trace-42.a:b_c")])
    assert request_id == "trace-42.a:b_c" == scope["state"]["request_id"]
    assert headers == [(b"x-request-id", b"trace-42.a:b_c")]


async def test_an_id_that_could_inject_a_header_is_replaced_by_a_new_one() -> None:
    request_id, _, headers = await _sent_headers([(b"x-request-id", b"x\r\nset-cookie: a=b")])
    assert len(request_id) == 24 and int(request_id, 16) >= 0
    assert headers == [(b"x-request-id", request_id.encode())]
    other, _, _ = await _sent_headers([])
    assert other != request_id  # a new one each time


async def test_a_response_that_names_its_own_id_is_not_given_a_second() -> None:
    _, _, headers = await _sent_headers([], [(b"x-request-id", b"upstream")])
    assert headers == [(b"x-request-id", b"upstream")]
