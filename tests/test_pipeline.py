"""pipeline.py's own helpers."""

from __future__ import annotations

from gateway.pipeline import MAX_DROPPED_HEADER, dropped_header


def test_the_dropped_header_is_printable_ascii_and_bounded() -> None:
    assert dropped_header(("tools.web_search", "reasoning.summary")) == "tools.web_search, reasoning.summary"
    escaped = dropped_header(("caf\u00e9\r\nx-injected: 1", "\U0001f600"))
    assert escaped.isascii() and escaped.isprintable() and "\r" not in escaped and "\n" not in escaped
    many = dropped_header(tuple(f"field_{i:04d}" for i in range(1000)))
    assert len(many) <= MAX_DROPPED_HEADER + 20 and many.endswith("more)") and many.startswith("field_0000, ")
