"""Runs of answer-text chunks decoded in one call, for a client that did not stream.

Most of a chat stream is chunks that carry one piece of choice 0's answer text and nothing else,
alike byte for byte but for that text (`{"id":"c1",...,"choices":[{"index":0,"delta":{"content":
"tok"},"finish_reason":null}]}`). A client that did not stream only gets them joined (upstreams/
assemble.py), so after one such chunk, parsed as any other, the chunks of the same read that have its
bytes before and after the text (its `Form`) are decoded as one JSON string: NUL-joined (raw, never
inside a valid JSON string), the strings' insides are what lies between each `<tail><NUL><head>`.
They become one chunk, the first one's with the run's joined text, counted as the tokens they were.
A run that does not decode as one string (a malformed chunk, a piece ending in a backslash, which
could join its neighbour's escape) is parsed chunk by chunk, as every chunk used to be; so are
chunks in another form (a provider that varies a field per chunk, tool calls, reasoning, logprobs).
Parsing whole chunks costs ~10k instructions each, most of a JSON answer's read.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import orjson

_CONTENT = b'"delta":{"content":'


class Form(NamedTuple):
    head: bytes  # a text chunk's bytes up to its text's opening quote
    tail: bytes  # from its text's closing quote to the end


def text_form(payload: bytes, chunk: dict[str, Any]) -> Form | None:
    """The form of `chunk` (parsed from `payload`) if it carries choice 0's answer text and nothing
    else that a run of its kind could change: else None."""
    choices = chunk.get("choices")
    if type(choices) is not list or len(choices) != 1 or chunk.get("usage") or "error" in chunk:
        return None
    choice = choices[0]
    delta = choice.get("delta") if type(choice) is dict else None
    if (type(delta) is not dict or len(delta) != 1 or choice.get("index", 0) != 0 or choice.get("finish_reason")
            or choice.get("logprobs") or choice.get("text")):
        return None
    content = delta.get("content")
    if type(content) is not str or not content:
        return None
    start = payload.find(_CONTENT)
    if start < 0 or payload.find(_CONTENT, start + 1) >= 0:
        return None
    start += len(_CONTENT)
    text = orjson.dumps(content)  # as compact encoders write it; another escaping is not a run's form
    if not payload.startswith(text, start):
        return None
    return Form(payload[:start + 1], payload[start + len(text) - 1:])


def run_length(payloads: list[bytes], start: int, form: Form) -> int:
    """How many of `payloads` from index `start` on are in `form`, with some text between."""
    head, tail = form
    least = len(head) + len(tail)
    end = start
    while end < len(payloads):
        payload = payloads[end]
        if len(payload) <= least or not payload.startswith(head) or not payload.endswith(tail):
            break
        end += 1
    return end - start


def run_text(run: list[bytes], form: Form) -> str | None:
    """The joined texts of `run` (payloads in `form`), or None when they are not each one whole string."""
    head, tail = form
    body = b"\x00".join(run)
    if body.count(b"\x00") != len(run) - 1 or body.find(b"\\" + tail) >= 0:
        return None
    quoted = body[len(head) - 1:len(body) - len(tail) + 1].replace(tail + b"\x00" + head, b"")
    try:
        text = orjson.loads(quoted)
    except orjson.JSONDecodeError:
        return None
    return text if type(text) is str else None


class Run(NamedTuple):
    count: int  # text chunks joined
    text: str  # their texts, joined


def text_run(payloads: list[bytes], start: int, payload: bytes, chunk: dict[str, Any]) -> Run | None:
    """After the text chunk `chunk` (parsed from `payload`), the run of `payloads` in its form from
    index `start` on, decoded; None when there is none or it does not decode."""
    form = text_form(payload, chunk)
    if form is None:
        return None
    count = run_length(payloads, start, form)
    text = run_text(payloads[start:start + count], form) if count else None
    return None if text is None else Run(count, text)


def with_text(chunk: dict[str, Any], text: str) -> dict[str, Any]:
    """A text chunk (one `text_form` accepted) carrying `text` instead of its own."""
    choice = chunk["choices"][0]
    return {**chunk, "choices": [{**choice, "delta": {"content": text}}]}
