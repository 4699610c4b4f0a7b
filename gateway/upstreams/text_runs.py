"""Runs of answer-text chunks decoded in one call, for a client that did not stream.

Most of a chat stream is chunks that carry one piece of choice 0's answer text and nothing else,
alike byte for byte but for that text (`{"id":"c1",...,"choices":[{"index":0,"delta":{"content":
"tok"},"finish_reason":null}]}`). A client that did not stream only gets them joined (upstreams/
assemble.py), so after one such chunk, parsed as any other, the chunks of the same read that have its
bytes before and after the text (its `Form`) are decoded as one JSON string: their texts' insides,
joined. They become one chunk, the first one's with the run's joined text, counted as the tokens
they were. A run that does not decode as one string (a malformed chunk) is parsed chunk by chunk, as
every chunk used to be; a text ending in a backslash (it could join its neighbour's escape) ends a
run and is parsed on its own; so are chunks in another form (a provider that varies a field per
chunk, tool calls, reasoning, logprobs).
Parsing whole chunks costs ~10k instructions each, most of a JSON answer's read.
"""

from __future__ import annotations

from itertools import islice
from typing import Any, NamedTuple

import orjson

_CONTENT = b'"delta":{"content":'
_BACKSLASH = ord("\\")


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


class Run(NamedTuple):
    count: int  # text chunks joined
    text: str  # their texts, joined


def text_run(payloads: list[bytes], start: int, payload: bytes, chunk: dict[str, Any]) -> Run | None:
    """After the text chunk `chunk` (parsed from `payload`), the run of `payloads` in its form from
    index `start` on, decoded; None when there is none or it does not decode."""
    form = text_form(payload, chunk)
    if form is None:
        return None
    head, tail = form
    inner, outer, least = len(head), -len(tail), len(head) + len(tail)
    pieces = [b'"']
    for piece in islice(payloads, start, None):
        # Sliced, not replaced in the joined run: CPython searches for a needle of a hundred bytes
        # or more (a head is) with its slow two-way search, ~100k instructions a run.
        if (len(piece) <= least or not piece.startswith(head) or not piece.endswith(tail)
                or piece[outer - 1] == _BACKSLASH):
            break
        pieces.append(piece[inner:outer])
    if len(pieces) == 1:
        return None
    pieces.append(b'"')
    try:
        text = orjson.loads(b"".join(pieces))
    except orjson.JSONDecodeError:
        return None
    return Run(len(pieces) - 2, text) if type(text) is str else None


def with_text(chunk: dict[str, Any], text: str) -> dict[str, Any]:
    """A text chunk (one `text_form` accepted) carrying `text` instead of its own."""
    choice = chunk["choices"][0]
    return {**chunk, "choices": [{**choice, "delta": {"content": text}}]}
