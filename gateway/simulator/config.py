"""Configuration of the simulated providers: the `sim.yaml` schema, loading and admin patches.

Does: define frozen pydantic models for the whole simulator (`SimConfig`), one endpoint
(`EndpointProfile`), its fault injection (`FaultsConfig`) and its scripted agent turn
(`ScriptConfig`); load and validate a YAML file with errors that name the file and the key path;
deep-merge an admin PATCH into a profile.
Does not: open sockets, sample randomness or know anything about HTTP.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gateway.simulator.prompt_cache import PromptCacheConfig

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class SimConfigError(ValueError):
    """A simulator config (file or admin patch) is invalid; the message names where."""


class FaultsConfig(BaseModel):
    """Fault injection for one endpoint. Every rate is a probability in [0, 1]; 0 and 1 are exact.

    The "terminal" faults (error, hang, error_event, drop, stall) are mutually exclusive: one
    uniform draw per request picks at most one, in that order, so their rates are the exact
    fractions as long as they sum to <= 1. `malformed` and `no_done` are drawn independently and
    only apply to streams that otherwise complete.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    error_rate: float = Field(0.0, ge=0.0, le=1.0)
    error_status: int = Field(503, ge=400, le=599)
    # The error object's `code` for a 4xx error fault (e.g. "context_length_exceeded",
    # "content_policy_violation", "unsupported_parameter"); default: the error's type.
    error_code: str | None = None
    # The next N requests get the error fault whatever `error_rate` says (then back to the rates): a
    # 429 that is over after one try, an outage of N requests. Re-armed by a patch that names it.
    error_next: int = Field(0, ge=0)
    hang_rate: float = Field(0.0, ge=0.0, le=1.0)
    drop_rate: float = Field(0.0, ge=0.0, le=1.0)
    drop_after_tokens: int = Field(20, ge=0)
    stall_rate: float = Field(0.0, ge=0.0, le=1.0)
    malformed_rate: float = Field(0.0, ge=0.0, le=1.0)
    error_event_rate: float = Field(0.0, ge=0.0, le=1.0)
    no_done_rate: float = Field(0.0, ge=0.0, le=1.0)
    refuse: bool = False
    # As llama.cpp's server and some vLLM builds: `stream_options.include_usage` is ignored, so a
    # stream carries no usage at all.
    ignore_include_usage: bool = False
    # Some real providers quote the key they were sent in error messages ("Incorrect API key
    # provided: sk-..."); on, every error answer and error event here does, so tests can prove the
    # gateway never passes a key on.
    echo_key_in_errors: bool = False
    # A silent downgrade: every answer reports this tier (Anthropic `usage.speed`, OpenAI
    # `service_tier`) whatever the request asked for, and does not fail.
    downgrade_to: str | None = None


class ScriptConfig(BaseModel):
    """A scripted agent turn (script.py): one shell tool call with `command`, then `answer`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    command: str = "echo agent-ok > result.txt"
    answer: str = "DONE: agent-ok"
    # The names coding agents give their shell tool, tried in order: Codex CLI, older Codex, Claude Code.
    shell_tools: tuple[str, ...] = ("exec_command", "shell_command", "shell", "Bash")


class EndpointProfile(BaseModel):
    """How one simulated endpoint behaves (latency, speed, limits, faults).

    Time to first token = (`ttft_ms`, the base latency, jittered) + the prompt's uncached tokens at
    `prefill_tokens_per_second` + its cached tokens at `cached_prefill_tokens_per_second`, both rates
    slowed by load as decode is (`slowdown_per_user`); 0 leaves that part out (the prompt's size does
    not matter: the simulator's behaviour before prefill was modelled). Decode slows further by
    `decode_slowdown_per_1k_context` per 1,000 prompt tokens (attention over a longer context).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    port: int = Field(ge=0, le=65535)  # 0 = any free port (in-process use; reported via base_url)
    model: str | None = None
    ttft_ms: float = Field(600.0, ge=0.0)
    ttft_jitter: float = Field(0.1, ge=0.0)
    tokens_per_second: float = Field(150.0, gt=0.0)
    slowdown_per_user: float = Field(0.0092, ge=0.0)
    capacity: int = Field(256, ge=0)  # 0 = every request is rate limited
    # A rate card's limit: a token bucket holding a minute's worth, refilled continuously. 0 = none.
    requests_per_minute: int = Field(0, ge=0)
    tokens_per_minute: int = Field(0, ge=0)  # prompt + answer tokens, taken at admission (rate_card.py)
    retry_after_s: float = Field(1.0, ge=0.0)
    output_tokens: int = Field(64, ge=0)
    # With a limit set, an answer has exactly `limit` tokens (finish "length") unless this is set: then
    # it ends at `output_tokens` (finish "stop") when the limit is above that, as a model done talking.
    natural_stop: bool = False
    reasoning_tokens: int = Field(0, ge=0)
    context_length: int = Field(131072, ge=1)
    accepts_prefix: bool = False
    tick_ms: float = Field(10.0, gt=0.0)
    prefill_tokens_per_second: float = Field(0.0, ge=0.0)  # 0: prefill takes no time
    cached_prefill_tokens_per_second: float = Field(0.0, ge=0.0)  # 0: cached tokens take no time
    decode_slowdown_per_1k_context: float = Field(0.0, ge=0.0)
    prompt_cache: PromptCacheConfig = PromptCacheConfig()
    faults: FaultsConfig = FaultsConfig()
    # Set: chat answers follow the script (a shell tool call, then a final text) instead of words.
    script: ScriptConfig | None = None

    def _load_factor(self, concurrency: int) -> float:
        return 1.0 + self.slowdown_per_user * max(concurrency - 1, 0)

    def rate_at(self, concurrency: int, context_tokens: int = 0) -> float:
        """Per-user decode rate (tokens/s) when `concurrency` requests are in flight, for a request
        whose prompt holds `context_tokens`."""
        context = 1.0 + self.decode_slowdown_per_1k_context * context_tokens / 1000.0
        return self.tokens_per_second / (self._load_factor(concurrency) * context)

    def prefill_s(self, prompt_tokens: int, cached_tokens: int, concurrency: int) -> float:
        """Seconds to prefill a prompt of which `cached_tokens` are cached, with `concurrency` in flight."""
        seconds = 0.0
        uncached = max(prompt_tokens - cached_tokens, 0)
        if self.prefill_tokens_per_second:
            seconds += uncached / self.prefill_tokens_per_second
        if self.cached_prefill_tokens_per_second:
            seconds += cached_tokens / self.cached_prefill_tokens_per_second
        return seconds * self._load_factor(concurrency)


class SimConfig(BaseModel):
    """The whole simulator: one admin port plus named endpoints, each on its own port."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str = "127.0.0.1"
    admin_port: int = Field(9100, ge=0, le=65535)
    seed: int = 0
    endpoints: dict[str, EndpointProfile] = Field(min_length=1)

    @field_validator("endpoints")
    @classmethod
    def _names_are_url_safe(cls, value: dict[str, EndpointProfile]) -> dict[str, EndpointProfile]:
        # Names appear in admin URL paths, so keep them to a path-safe alphabet.
        for name in value:
            if not _NAME_RE.match(name):
                raise ValueError(f"endpoint name {name!r} must match {_NAME_RE.pattern}")
        return value

    @model_validator(mode="after")
    def _ports_are_distinct(self) -> SimConfig:
        seen: dict[int, str] = {}
        if self.admin_port:
            seen[self.admin_port] = "admin_port"
        for name, profile in self.endpoints.items():
            if profile.port and profile.port in seen:
                raise ValueError(f"endpoint {name!r} reuses port {profile.port} of {seen[profile.port]}")
            if profile.port:
                seen[profile.port] = f"endpoint {name!r}"
        return self


def format_validation_error(err: ValidationError, where: str) -> str:
    """One line per problem: `<where>: <dotted key path>: <message>`."""
    lines = []
    for item in err.errors():
        path = ".".join(str(part) for part in item["loc"]) or "<root>"
        lines.append(f"{where}: {path}: {item['msg']}")
    return "\n".join(lines)


def parse_sim_config(data: Any, where: str = "<config>") -> SimConfig:
    """Validate an already-parsed mapping; `where` names its origin in error messages."""
    if not isinstance(data, dict):
        raise SimConfigError(f"{where}: top level must be a mapping, got {type(data).__name__}")
    try:
        return SimConfig.model_validate(data)
    except ValidationError as err:
        raise SimConfigError(format_validation_error(err, where)) from None


def load_sim_config(path: Path | str) -> SimConfig:
    """Read and validate a `sim.yaml`. Raises `SimConfigError` naming the file and key path."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise SimConfigError(f"{path}: cannot read: {err.strerror or err}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise SimConfigError(f"{path}: invalid YAML: {err}") from None
    return parse_sim_config(data, str(path))


def merge_profile(profile: EndpointProfile, patch: Any, where: str = "patch") -> EndpointProfile:
    """Apply an admin PATCH: top-level keys replace, `faults` and `prompt_cache` are merged key by key; re-validated.

    The port cannot change through a patch (the listener is bound once); sending the same value
    is allowed so a GET-modify-PATCH round trip works.
    """
    if not isinstance(patch, dict):
        raise SimConfigError(f"{where}: body must be a JSON object")
    merged = profile.model_dump()
    for key, value in patch.items():
        if key in ("faults", "prompt_cache") and isinstance(value, dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    if merged.get("port") != profile.port:
        raise SimConfigError(f"{where}: port: cannot be changed at run time")
    try:
        return EndpointProfile.model_validate(merged)
    except ValidationError as err:
        raise SimConfigError(format_validation_error(err, where)) from None
