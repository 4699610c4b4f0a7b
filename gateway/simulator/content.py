"""Deterministic fake model output and prompt accounting for the simulator.

Does: derive the answer and reasoning token sequences from the messages (a stable hash, not
`hash()`, so they are equal across processes and runs), estimate prompt tokens, count the tokens of
an assistant prefix, and keep a per-endpoint LRU "prefix cache" that reports how many prompt
tokens a provider-side prompt cache would have hit.
Does not: touch the network, time anything, or know about profiles and faults.
"""

from __future__ import annotations

import hashlib
import math
from collections import OrderedDict
from typing import Any

import orjson

_WORD_TEXT = """
    lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut labore
    et dolore magna aliqua enim ad minim veniam quis nostrud exercitation ullamco laboris nisi aliquip
    ex ea commodo consequat duis aute irure in reprehenderit voluptate velit esse cillum eu fugiat
    nulla pariatur excepteur sint occaecat cupidatat non proident sunt culpa qui officia deserunt
    mollit anim id est laborum alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu
    xi omicron pi rho sigma tau upsilon phi chi psi omega river stone cloud light shadow forest
    meadow ocean harbor signal vector matrix tensor kernel packet socket router gateway latency token
    stream buffer window cache queue thread lock batch shard replica cluster region zone node edge
    core pulse orbit comet nebula quasar photon proton neutron atom crystal prism lens mirror candle
    lantern beacon compass anchor sail keel rudder mast deck cabin bridge tunnel canyon valley summit
    ridge plateau glacier tundra desert oasis dune reef lagoon fjord estuary marsh grove orchard field
    garden hedge fence gate path trail road street avenue plaza market bazaar forge anvil hammer
    chisel saw drill lathe loom spindle needle bobbin fabric linen silk wool cotton velvet amber
    jade onyx opal pearl ruby topaz quartz granite marble slate basalt obsidian flint copper bronze
    iron steel silver gold cobalt nickel zinc tin lead mercury helium neon argon xenon radon carbon
    oxygen hydrogen nitrogen sulfur sodium calcium ember spark flame blaze frost snow rain storm
    thunder breeze gale tempest willow cedar maple birch aspen juniper hazel laurel myrtle sage
"""
# Exactly 256 words so one byte of SHAKE output picks one word without bias.
WORDS: tuple[str, ...] = tuple(_WORD_TEXT.split())
assert len(WORDS) == 256 and len(set(WORDS)) == 256, len(WORDS)

# Each token is one word with a leading space; its JSON string form is precomputed for streaming.
TOKEN_TEXT: tuple[str, ...] = tuple(" " + word for word in WORDS)
TOKEN_JSON: tuple[bytes, ...] = tuple(orjson.dumps(text) for text in TOKEN_TEXT)


def canonical(value: Any) -> bytes:
    """Stable JSON bytes (sorted keys) so equal messages hash equally whatever their key order."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def messages_digest(messages: list[Any]) -> bytes:
    return hashlib.sha256(canonical(messages)).digest()


def token_ids(digest: bytes, kind: bytes, count: int) -> bytes:
    """`count` word indexes (one byte each) for the answer (`kind=b"answer"`) or reasoning."""
    if count <= 0:
        return b""
    return hashlib.shake_256(digest + b"/" + kind).digest(count)


def render(ids: bytes) -> str:
    return "".join(TOKEN_TEXT[i] for i in ids)


def content_text(content: Any) -> str:
    """The text of a message's `content`: a string, a list of parts (text parts only), or null."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text", "")) for part in content if isinstance(part, dict) and "text" in part
        )
    return ""


def count_prefix_tokens(text: str) -> int:
    """Tokens in an already-delivered answer: one per whitespace-separated word."""
    return len(text.split())


def prompt_tokens_of(chars: int, n_messages: int) -> int:
    """The deterministic prompt-token estimate: ceil(content chars / 4) + 4 per message."""
    return math.ceil(chars / 4) + 4 * n_messages


class PrefixCache:
    """LRU of message-prefix hashes -> prompt tokens of that prefix (a provider's prompt cache)."""

    def __init__(self, capacity: int = 8192) -> None:
        self._capacity = capacity
        self._entries: OrderedDict[bytes, int] = OrderedDict()

    def clear(self) -> None:
        self._entries.clear()

    @staticmethod
    def prefixes(messages: list[Any]) -> list[tuple[bytes, int]]:
        """(chained hash, prompt tokens) of messages[:1], messages[:2], ... messages[:n]."""
        out: list[tuple[bytes, int]] = []
        digest = b""
        chars = 0
        for i, message in enumerate(messages, start=1):
            digest = hashlib.sha256(digest + canonical(message)).digest()
            if isinstance(message, dict):
                chars += len(content_text(message.get("content")))
            out.append((digest, prompt_tokens_of(chars, i)))
        return out

    def lookup(self, prefixes: list[tuple[bytes, int]]) -> int:
        """Prompt tokens of the longest prefix seen before (0 if none); refreshes its recency."""
        for digest, tokens in reversed(prefixes):
            if digest in self._entries:
                self._entries.move_to_end(digest)
                return tokens
        return 0

    def insert(self, prefixes: list[tuple[bytes, int]]) -> None:
        for digest, tokens in prefixes:
            self._entries[digest] = tokens
            self._entries.move_to_end(digest)
        while len(self._entries) > self._capacity:
            self._entries.popitem(last=False)
