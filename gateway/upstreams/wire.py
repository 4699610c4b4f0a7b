"""What every upstream API module makes: the request to send, and the translator of its stream.

`Outgoing` is one request on the wire. A `Translator` reads one upstream API's SSE events (their
`data:` payloads, in order) and returns the chat-completion chunks they mean (dicts, as the stream
reader would have parsed them: no JSON round trip), `END` at the end, None for a malformed event; it
keeps what it needs between events (open blocks, usage) and the tier the provider reports
(`served_tier`). `ChunkHead` builds those chunks in the shape the rest of the gateway reads;
`JsonTranslator` and `PassThroughEvents` are what the native API modules' translators share.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import orjson

Chunk = dict[str, Any]
END: Chunk = {"object": "end"}  # the end of the answer (chat's `[DONE]`); compared by identity


# What a pass-through stream's token events count as: the meter needs the kind of token, not its
# text (the client gets the upstream's own event). Shared and never changed.
ANSWER_TOKEN: list[Chunk] = [{"choices": [{"delta": {"content": "-"}}]}]
REASONING_TOKEN: list[Chunk] = [{"choices": [{"delta": {"reasoning_content": "-"}}]}]
NO_TOKEN: list[Chunk] = []
# What a pass-through translator makes of one network read's events (`PassThroughEvents.read`): the
# token events among them, whether any was answer (not reasoning), and the chunks its other events
# translate to (role, finish, usage, `END`, errors), None for each malformed one.
Read = tuple[int, bool, list[Chunk | None]]


class Translator(Protocol):
    served_tier: str | None

    def events(self, payload: bytes) -> list[Chunk] | None: ...


class Outgoing(NamedTuple):
    """(A tuple: made once per attempt, and a frozen dataclass costs a setattr call per field.)"""

    body: bytes
    path: str  # under the provider's base_url
    headers: Mapping[str, str] | None = None  # besides the provider's own
    translator: Callable[[], Translator] | None = None  # None: the stream is chat chunks already


@dataclass(slots=True)
class ChunkHead:
    """The fields every chat chunk of one answer repeats."""

    id: str = ""
    model: str = ""
    created: int = 0

    def chunk(self, delta: dict[str, Any] | None = None, finish: str | None = None) -> Chunk:
        choice = {"index": 0, "delta": delta or {}, "finish_reason": finish}
        return {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                "choices": [choice]}

    def usage_chunk(self, usage: dict[str, Any], tier: str | None) -> Chunk:
        out: Chunk = {"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                      "model": self.model, "choices": [], "usage": usage}
        if tier is not None:
            out["service_tier"] = tier
        return out

    def tool_call(self, index: int, call_id: Any, name: Any) -> Chunk:
        """A tool call's first chunk: its id and name, arguments to follow."""
        call = {"index": index, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
        return self.chunk({"tool_calls": [call]})

    def tool_arguments(self, index: int, text: Any) -> Chunk:
        return self.chunk({"tool_calls": [{"index": index, "function": {"arguments": text}}]})


class JsonTranslator:
    """A `Translator` whose events are JSON objects: `translate()` reads one, parsed."""

    def translate(self, event: dict[str, Any]) -> list[Chunk]:
        raise NotImplementedError

    def events(self, payload: bytes) -> list[Chunk] | None:
        event = loads(payload)
        if event is None:
            return None  # malformed: the reader counts it
        return self.translate(event)


class PassThroughEvents:
    """What a pass-through translator keeps for a client of the upstream's own API: the SSE events
    as they came (only the model renamed to `model`), to `take()` while streaming; when `whole`, the
    translator assembles its `result()` instead."""

    passthrough = True

    def __init__(self, model: str, whole: bool) -> None:
        self.model = model
        self.whole = whole
        self._public: PublicModel | None = None  # made by the first event that names the model
        self._out: list[bytes] = []

    def take(self) -> bytes:
        out, self._out = b"".join(self._out), []
        return out

    def read(self, payloads: list[bytes]) -> Read:
        raise NotImplementedError

    def renamed(self, payload: bytes, upstream: Any) -> bytes | None:
        """An event naming the model `upstream` with the public name in its bytes (`PublicModel.renamed`)."""
        if self._public is None:
            self._public = PublicModel(self.model)
        return self._public.renamed(payload, upstream)

    def events(self, payload: bytes) -> list[Chunk] | None:
        """One event as a `Translator` takes it: a read of its own. (The stream reader gives a
        pass-through translator whole reads; this is for one event at a time.)"""
        tokens, answered, chunks = self.read([payload])
        if tokens:
            return ANSWER_TOKEN if answered else REASONING_TOKEN
        return None if chunks == [None] else chunks  # type: ignore[return-value]


_NULL_USAGE = b',"usage":null'


class PublicModel:
    """Gives a chunk the public model name without re-encoding it: the provider's compact
    `"model":"<its name>"` is replaced in the bytes when it occurs exactly once (a JSON string value
    cannot contain it unescaped, so once means the chunk's own field). A chunk that has no `model`,
    or where the pattern is missing or repeated, is re-encoded, as every chunk used to be."""

    __slots__ = ("_from", "_pattern", "_target", "model")

    def __init__(self, model: str) -> None:
        self.model = model
        self._target = b'"model":' + orjson.dumps(model)
        self._from: object = None
        self._pattern = b""

    def __call__(self, payload: bytes, chunk: dict[str, Any]) -> bytes:
        upstream = chunk.get("model")
        if upstream == self.model:
            return payload
        out = self.renamed(payload, upstream)
        if out is not None:
            return out
        chunk["model"] = self.model
        return orjson.dumps(chunk)

    def renamed(self, payload: bytes, upstream: Any) -> bytes | None:
        """`payload` with `"model":<upstream>` made the public name if it occurs exactly once (an
        object nested in an event, as a pass-through's `message` or `response`, too), else None."""
        if upstream is not None and upstream != self._from and isinstance(upstream, str):
            self._from, self._pattern = upstream, b'"model":' + orjson.dumps(upstream)
        if upstream == self._from and payload.count(self._pattern) == 1:
            return payload.replace(self._pattern, self._target)
        return None

    def without_usage(self, payload: bytes, chunk: dict[str, Any]) -> bytes:
        """The chunk without its `usage` field (most often `"usage":null`, as OpenAI sends it)."""
        if chunk["usage"] is None and payload.count(_NULL_USAGE) == 1:
            return self(payload.replace(_NULL_USAGE, b""), chunk)
        del chunk["usage"]
        chunk["model"] = self.model
        return orjson.dumps(chunk)


def error_chunk(message: str, status: int, kind: str | None) -> Chunk:
    """An error event as the stream reader raises it (its `code`: the HTTP status it stands for)."""
    return {"error": {"message": message, "type": kind, "code": status}}


def chat_usage(prompt: int, completion: int, cached: int = 0, cache_write: int = 0,
               reasoning: int | None = None) -> dict[str, Any]:
    """Usage in chat completions' shape: prompt tokens include cached ones (OpenAI's convention);
    Anthropic's cache writes are kept as `cache_creation_input_tokens` for pricing."""
    usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion,
                             "total_tokens": prompt + completion,
                             "prompt_tokens_details": {"cached_tokens": cached}}
    if cache_write:
        usage["cache_creation_input_tokens"] = cache_write
    if reasoning is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return usage


def loads(payload: bytes) -> dict[str, Any] | None:
    try:
        value = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return None
    return value if type(value) is dict else None


__all__ = ["ANSWER_TOKEN", "END", "NO_TOKEN", "REASONING_TOKEN", "Chunk", "ChunkHead", "JsonTranslator", "Outgoing",
           "PassThroughEvents", "PublicModel", "Read", "Translator", "chat_usage", "error_chunk", "loads"]
