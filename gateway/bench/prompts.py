"""The prompts a bench sends: the bundled `prompts.yaml` or a file in the same format.

Does: load and validate the prompts (each becomes a `messages` list), keep the file's order, and
say which prompt request i gets (i mod the number of prompts): the same requests in the same order
on every run and every target, so two targets are compared on identical work.
Does not: send anything, or shuffle (a bench that randomised prompts could not be repeated).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gateway.bench.targets import BenchConfigError
from gateway.configfile import ConfigError, load_model

BUNDLED = Path(__file__).with_name("prompts.yaml")


class _Entry(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1)
    kind: Literal["short", "long"] = "short"
    prompt: str | None = None
    messages: tuple[dict[str, Any], ...] | None = None

    @model_validator(mode="after")
    def _one_form(self) -> _Entry:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("set exactly one of prompt or messages")
        if self.messages is not None and not all(isinstance(m.get("role"), str) for m in self.messages):
            raise ValueError("every message needs a role")
        return self


class _File(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    prompts: tuple[_Entry, ...] = Field(min_length=1)


@dataclass(frozen=True, slots=True)
class Prompt:
    id: str
    kind: str
    messages: tuple[dict[str, Any], ...]


def load_prompts(path: Path | None = None) -> tuple[Prompt, ...]:
    """The prompts of `path`, or the bundled ones; raises BenchConfigError naming the file."""
    path = path or BUNDLED
    try:
        parsed = load_model(path, _File)
    except ConfigError as err:
        raise BenchConfigError(str(err)) from None
    ids = [e.id for e in parsed.prompts]
    if len(set(ids)) != len(ids):
        raise BenchConfigError(f"{path}: prompt ids must be unique")
    return tuple(
        Prompt(e.id, e.kind, e.messages or ({"role": "user", "content": e.prompt},)) for e in parsed.prompts
    )


def prompt_for(prompts: tuple[Prompt, ...], index: int) -> Prompt:
    return prompts[index % len(prompts)]
