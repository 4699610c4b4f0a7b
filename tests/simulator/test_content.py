"""Tests of gateway.simulator.content: deterministic tokens, prompt estimate, prefix cache."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from gateway.simulator.content import (
    TOKEN_TEXT,
    WORDS,
    PrefixCache,
    content_text,
    count_prefix_tokens,
    messages_digest,
    prompt_tokens_of,
    render,
    token_ids,
)


def test_word_list_is_256_unique_single_words() -> None:
    assert len(WORDS) == 256
    assert len(set(WORDS)) == 256
    assert all(word.isalnum() for word in WORDS)
    assert all(text == " " + word for text, word in zip(TOKEN_TEXT, WORDS, strict=True))


def test_digest_ignores_key_order_but_not_content() -> None:
    a = [{"role": "user", "content": "hi"}]
    b = [{"content": "hi", "role": "user"}]
    c = [{"role": "user", "content": "hi!"}]
    assert messages_digest(a) == messages_digest(b)
    assert messages_digest(a) != messages_digest(c)


def test_token_ids_are_prefix_stable() -> None:
    digest = messages_digest([{"role": "user", "content": "x"}])
    long = token_ids(digest, b"answer", 100)
    assert token_ids(digest, b"answer", 40) == long[:40]
    assert token_ids(digest, b"reasoning", 40) != long[:40]
    assert token_ids(digest, b"answer", 0) == b""


def test_tokens_are_stable_across_processes() -> None:
    code = (
        "from gateway.simulator.content import *;"
        "print(render(token_ids(messages_digest([{'role':'user','content':'x'}]), b'answer', 12)))"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    ).stdout
    here = render(token_ids(messages_digest([{"role": "user", "content": "x"}]), b"answer", 12))
    assert out.rstrip("\n") == here
    assert count_prefix_tokens(here) == 12


def test_content_text_and_prompt_estimate() -> None:
    assert content_text("abc") == "abc"
    assert content_text([{"type": "text", "text": "ab"}, {"type": "image_url"}, {"text": "c"}]) == "abc"
    assert content_text(None) == ""
    assert prompt_tokens_of(0, 1) == 4
    assert prompt_tokens_of(11, 1) == 7  # ceil(11/4) + 4
    assert prompt_tokens_of(8, 2) == 10


def test_prefix_cache_reports_longest_seen_prefix() -> None:
    cache = PrefixCache(capacity=100)
    sys_msg = {"role": "system", "content": "x" * 40}
    first = [sys_msg, {"role": "user", "content": "a" * 8}]
    second = [*first, {"role": "assistant", "content": "b" * 4}, {"role": "user", "content": "c"}]
    prefixes = PrefixCache.prefixes(first)
    assert cache.lookup(prefixes) == 0
    cache.insert(prefixes)
    assert cache.lookup(prefixes) == prompt_tokens_of(48, 2)
    assert cache.lookup(PrefixCache.prefixes(second)) == prompt_tokens_of(48, 2)
    assert cache.lookup(PrefixCache.prefixes([sys_msg])) == prompt_tokens_of(40, 1)
    assert cache.lookup(PrefixCache.prefixes([{"role": "user", "content": "a" * 8}])) == 0
    cache.clear()
    assert cache.lookup(prefixes) == 0


def test_prefix_cache_is_bounded_lru() -> None:
    cache = PrefixCache(capacity=2)
    one = PrefixCache.prefixes([{"role": "user", "content": "1"}])
    two = PrefixCache.prefixes([{"role": "user", "content": "2"}])
    three = PrefixCache.prefixes([{"role": "user", "content": "3"}])
    cache.insert(one)
    cache.insert(two)
    assert cache.lookup(one) > 0  # refreshes "one"
    cache.insert(three)  # evicts "two", the least recently used
    assert cache.lookup(two) == 0
    assert cache.lookup(one) > 0
    assert cache.lookup(three) > 0
