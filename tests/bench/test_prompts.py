from __future__ import annotations

from pathlib import Path

import pytest

from gateway.bench.prompts import load_prompts, prompt_for
from gateway.bench.targets import BenchConfigError


def test_bundled_prompts_are_coding_tasks_short_and_long_in_file_order() -> None:
    prompts = load_prompts()
    assert len(prompts) >= 8
    assert prompts[0].id == "py-dedupe"  # the file's order, not sorted or shuffled
    assert {p.kind for p in prompts} == {"short", "long"}
    long_chars = [sum(len(m["content"]) for m in p.messages) for p in prompts if p.kind == "long"]
    assert min(long_chars) > 700
    assert all(p.messages[-1]["role"] == "user" for p in prompts)
    assert load_prompts() == prompts  # deterministic


def test_request_i_gets_prompt_i_mod_n() -> None:
    prompts = load_prompts()
    assert prompt_for(prompts, 0) is prompts[0]
    assert prompt_for(prompts, len(prompts) + 2) is prompts[2]


def test_own_file(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("prompts:\n  - {id: a, prompt: hello}\n"
                    "  - {id: b, kind: long, messages: [{role: system, content: s},\n"
                    "                                   {role: user, content: u}]}\n")
    a, b = load_prompts(path)
    assert a.messages == ({"role": "user", "content": "hello"},)
    assert b.kind == "long" and len(b.messages) == 2


@pytest.mark.parametrize("text", ["prompts: []\n", "prompts:\n  - {id: a}\n",
                                  "prompts:\n  - {id: a, prompt: x}\n  - {id: a, prompt: y}\n",
                                  "prompts:\n  - {id: a, messages: [{content: x}]}\n"])
def test_bad_files(tmp_path: Path, text: str) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(BenchConfigError, match=r"p\.yaml"):
        load_prompts(path)
