"""Reading YAML files and reporting their errors as `<file>: <key path>: <message>`.

Shared by the catalogue (`config`) and the named policies (`policy`). It knows nothing of either schema.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)


class ConfigError(Exception):
    """A catalogue or policy file is wrong. The message names the file and the key path."""


# What pydantic puts in an error location after a union field: the member's name, not a key.
_UNION_TAGS = frozenset({"float", "int", "str", "bool", "SortObject", "PercentileThreshold"})


def clean_loc(loc: tuple[int | str, ...]) -> tuple[int | str, ...]:
    """Drop what pydantic adds to a location that is not a key: union members, validator names."""
    return tuple(p for p in loc if not (isinstance(p, str) and ("[" in p or p in _UNION_TAGS)))


def _key_path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


_MESSAGES = {
    "extra_forbidden": "unknown key",
    "missing": "required key is missing",
}


def format_validation_error(source: str, err: ValidationError) -> str:
    """One line per problem: `<file>: <key path>: <message>`."""
    lines = []
    for e in err.errors():
        loc = clean_loc(e["loc"])
        ctx = e.get("ctx") or {}
        if e["type"] in _MESSAGES:
            msg = _MESSAGES[e["type"]]
        elif "ge" in ctx:
            msg = f"must be >= {ctx['ge']:g}"
        elif "gt" in ctx:
            msg = f"must be > {ctx['gt']:g}"
        else:
            msg = str(e["msg"]).removeprefix("Value error, ")
        lines.append(f"{source}: {_key_path(loc) or '(top level)'}: {msg}")
    return "\n".join(lines)


def read_yaml(path: Path) -> Any:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise ConfigError(f"{path.name}: not valid YAML{where}: {getattr(exc, 'problem', exc)}") from None


def load_model(path: Path, model: type[M]) -> M:
    """Read `path` as YAML into a pydantic `model`; any problem is a ConfigError naming file and key."""
    data = read_yaml(path)
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise ConfigError(format_validation_error(path.name, err)) from None
