"""The endpoint catalogue (`providers.yaml`) as frozen pydantic models, loaded once.

`load_config()` is the only place that reads the catalogue file and the environment (provider keys,
`REDIS_URL`). Every error names the file and the key path, e.g.
`providers.yaml: models.deepseek-v4.1-flash.endpoints[1].price.output: must be >= 0`.

The file models (`CatalogueFile` and below) mirror the YAML; `Catalogue` is the resolved form the rest
of the gateway uses: one flat `Endpoint` per (model, endpoint), with the provider's defaults applied
and its key looked up. This module does not route, validate requests or talk to providers.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator

from gateway.configfile import ConfigError, format_validation_error, read_yaml
from gateway.policy import PolicySet, load_policies
from gateway.redisconn import parse_redis_url

__all__ = [
    "Catalogue", "Config", "ConfigError", "Endpoint", "Provider", "Tier", "load_catalogue", "load_config",
]


class Tier(StrEnum):
    STANDARD = "standard"
    FAST = "fast"
    ULTRAFAST = "ultrafast"


Quantization = Literal["fp4", "fp8", "int4", "int8", "bf16", "fp16", "unknown"]
Capability = Literal["tools", "response_format", "reasoning", "assistant_prefix", "logprobs", "vision"]
# The upstream APIs an endpoint serves. Responses and Anthropic Messages requests are translated to
# chat completions, so any `chat` endpoint serves them; only these three are ever called upstream.
UpstreamApi = Literal["chat", "completions", "embeddings"]
# The wire API a provider speaks (gateway/upstreams/): OpenAI chat completions (and its legacy
# completions and embeddings), Anthropic Messages, or OpenAI Responses. The gateway appends
# /chat/completions, /messages or /responses to the provider's base_url.
ProviderApi = Literal["openai", "anthropic", "openai-responses"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class LongContextPrice(_Frozen):
    """The rates of a request whose input is above `above_tokens` (OpenAI's above 272k, Gemini's above
    200k): the whole request is billed at them, as those providers bill."""

    above_tokens: int = Field(ge=1)
    input: float = Field(ge=0)
    cached_input: float | None = Field(default=None, ge=0)
    output: float = Field(ge=0)


class PriceFile(_Frozen):
    """USD per 1M tokens."""

    input: float = Field(ge=0)
    cached_input: float | None = Field(default=None, ge=0)  # cache reads (Anthropic's cache_read_input_tokens)
    output: float = Field(ge=0)
    # Anthropic's prompt-cache writes (cache_creation_input_tokens): 5-minute and 1-hour lifetimes.
    # Unset: charged as input (cache_write_1h: at cache_write).
    cache_write: float | None = Field(default=None, ge=0)
    cache_write_1h: float | None = Field(default=None, ge=0)
    long_context: LongContextPrice | None = None

    def rates(self, input_tokens: int) -> tuple[float, float, float]:
        """(input, cached input, output) USD per 1M tokens for a request of `input_tokens`; cached input
        costs as much as input where no cached price is given."""
        tier: PriceFile | LongContextPrice = self
        if self.long_context is not None and input_tokens > self.long_context.above_tokens:
            tier = self.long_context
        cached = tier.cached_input if tier.cached_input is not None else tier.input
        return tier.input, cached, tier.output

    def cost(self, input_tokens: int, cached_tokens: int, output_tokens: int) -> float:
        """USD for one request, at the rates its input size falls in."""
        price_in, price_cached, price_out = self.rates(input_tokens)
        cached = min(max(cached_tokens, 0), input_tokens)
        return ((input_tokens - cached) * price_in + cached * price_cached + output_tokens * price_out) / 1e6

    def cache_write_cost(self, input_tokens: int, written_5m: int, written_1h: int) -> float:
        """USD a prompt-cache write costs beyond the input price those tokens were charged in `cost`:
        at `cache_write` (5-minute) / `cache_write_1h` (1-hour); unset, as input (1h: as cache_write)."""
        price_in = self.rates(input_tokens)[0]
        write = self.cache_write if self.cache_write is not None else price_in
        write_1h = self.cache_write_1h if self.cache_write_1h is not None else write
        return (written_5m * (write - price_in) + written_1h * (write_1h - price_in)) / 1e6


class AdvertisedFile(_Frozen):
    """What the host claims; used as a prior until an endpoint has been measured."""

    tokens_per_second: float | None = Field(default=None, gt=0)
    ttft_ms: float | None = Field(default=None, gt=0)
    prefill_tokens_per_second: float | None = Field(default=None, gt=0)  # uncached prompt tokens


class SloFile(_Frozen):
    """What a tier promises. Breaking it demotes the endpoint like an open circuit (reason `slo`)."""

    ttft_ms: float | None = Field(default=None, gt=0)  # recent TTFT above this breaks it
    decode_tps: float | None = Field(default=None, gt=0)  # recent decode rate below this breaks it


class RateLimitsFile(_Frozen):
    """A provider's limits for the gateway's key, as its rate card states them (shaper.py paces them)."""

    requests_per_minute: int | None = Field(default=None, ge=1)
    tokens_per_minute: int | None = Field(default=None, ge=1)
    burst_s: float = Field(default=60.0, gt=0, le=60)  # the bucket holds this many seconds' worth

    @model_validator(mode="after")
    def _some_limit(self) -> RateLimitsFile:
        if self.requests_per_minute is None and self.tokens_per_minute is None:
            raise ValueError("set requests_per_minute and/or tokens_per_minute")
        return self


class ProviderFile(_Frozen):
    base_url: str = Field(pattern=r"^https?://")  # the API root, /v1 included
    api: ProviderApi = "openai"
    api_key_env: str | None = None  # the NAME of an environment variable; never the key itself
    region: str = "global"
    data_collection: Literal["allow", "deny"] = "deny"
    headers: dict[str, str] = Field(default_factory=dict)
    max_connections: int = Field(default=512, ge=1)
    max_keepalive_connections: int = Field(default=128, ge=0)
    connect_timeout_s: float = Field(default=5.0, gt=0)
    rate_limits: RateLimitsFile | None = None


class EndpointFile(_Frozen):
    provider: str
    model: str
    tier: Tier = Tier.STANDARD
    price: PriceFile | None = None
    hourly_cost: float | None = Field(default=None, ge=0)
    quantization: Quantization | None = None
    region: str | None = None
    context_length: int | None = Field(default=None, ge=1)
    # A fast tier served only below this much uncached input (e.g. 8192): a larger cold prompt goes elsewhere.
    max_uncached_input_tokens: int | None = Field(default=None, ge=1)
    max_output_tokens: int | None = Field(default=None, ge=1)
    max_concurrency: int | None = Field(default=None, ge=1)
    advertised: AdvertisedFile = Field(default_factory=AdvertisedFile)
    capabilities: frozenset[Capability] = frozenset()
    id: str | None = Field(default=None, min_length=1)
    extra_body: dict[str, Any] = Field(default_factory=dict)  # merged into the upstream body
    slo: SloFile | None = None
    first_token_budget_s: float | None = Field(default=None, gt=0)  # fixed; default: from live p90
    # False for a server that ignores `stream_options.include_usage` (llama.cpp's): the gateway then
    # does not ask for usage and estimates it at once, without warning that none came.
    stream_usage: bool = True
    # Which upstream APIs it serves. Only chat by default: many hosts have no /completions or
    # /embeddings, and a wrong guess would cost the client a provider's 404 instead of another endpoint.
    apis: frozenset[UpstreamApi] = Field(default=frozenset({"chat"}), min_length=1)
    # The provider's speed tier to ask for: Anthropic's `speed` ("fast": with its beta header),
    # OpenAI's `service_tier` ("priority", "flex", ...). What served is read from every answer.
    service_tier: str | None = Field(default=None, min_length=1, max_length=64)

    @model_validator(mode="after")
    def _one_pricing_kind(self) -> EndpointFile:
        if (self.price is None) == (self.hourly_cost is None):
            raise ValueError("set exactly one of price or hourly_cost")
        return self


class ModelFile(_Frozen):
    aliases: tuple[str, ...] = ()
    endpoints: tuple[EndpointFile, ...] = Field(min_length=1)


# What one worker sustains before queueing makes every request late (README, "gateway:" section).
MAX_IN_FLIGHT = 1024


class GatewayFile(_Frozen):
    """Optional `gateway:` section: limits of the server itself."""

    max_body_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    max_json_depth: int = Field(default=64, ge=2)  # nesting of the request body; real ones use < 10
    max_messages: int = Field(default=4096, ge=1)  # entries of `messages` in one request
    # First-token budget per attempt: `ttft_budget_multiplier` x the endpoint's live p90 TTFT, kept
    # within [min, max]; `max` when it has no samples. An endpoint's `first_token_budget_s` fixes it.
    ttft_budget_multiplier: float = Field(default=3.0, gt=0)
    ttft_budget_min_s: float = Field(default=2.0, gt=0)
    ttft_budget_max_s: float = Field(default=10.0, gt=0)
    deadline_s: float = Field(default=600.0, gt=0)  # a whole request, all attempts included
    retry_budget: float = Field(default=0.2, ge=0, le=1)  # retries per request, per endpoint
    breaker_failures: int = Field(default=5, ge=1)  # consecutive failures that open an endpoint's circuit
    breaker_open_s: float = Field(default=30.0, gt=0)  # how long before a half-open probe
    stall_timeout_s: float = Field(default=30.0, gt=0)  # mid-stream: longest gap between reads
    # requests that re-check a stale endpoint
    explore_rate: float = Field(default=0.05, ge=0, le=1)
    # Seeds the router's draws (exploration, weighted and power-of-two picks) so a routing run can be
    # replayed; unset, every process draws differently.
    random_seed: int | None = None
    sticky_idle_s: float = Field(default=600.0, gt=0)  # a conversation's affinity lasts this long idle
    redis_key_prefix: str = Field(default="ur", min_length=1)  # replicas sharing stats share this
    telemetry_flush_s: float = Field(default=0.5, gt=0, le=10)  # Redis flush and refresh interval
    record_stats: bool = True  # off only to measure what recording costs: routing then has no data
    keys_file: str = Field(default="keys.json", min_length=1)  # client keys without Redis; beside this file
    keys_refresh_s: float = Field(default=1.0, gt=0, le=60)  # how soon a key change reaches every replica
    limits_sync_s: float = Field(default=0.25, gt=0, le=10)  # how often replicas share usage for limits
    # Client API requests in flight in one process (a worker) before new ones get 503 `overloaded`.
    max_in_flight: int = Field(default=MAX_IN_FLIGHT, ge=1)
    # SIGTERM: how long streams in flight may run on before they are ended with an error event, and
    # how long to keep answering 503 even with nothing in flight (for load balancers still sending).
    shutdown_grace_s: float = Field(default=30.0, ge=0, le=3600)
    shutdown_delay_s: float = Field(default=0.0, ge=0, le=300)
    # A provider's rate limits (shaper.py): how long a request waits for its turn when another
    # candidate could serve it (the last candidate waits up to its first-token budget), and how
    # often each replica leases its share of the provider's bucket from Redis.
    shaper_wait_s: float = Field(default=0.25, ge=0, le=10)
    shaper_sync_s: float = Field(default=0.1, gt=0, le=5)
    # A Responses WebSocket (`GET /v1/responses`) with no response running is closed after this long
    # without a frame; any connection is closed once this old (after its response in flight), as
    # OpenAI's are at 60 minutes: clients reconnect, and a replica's connections turn over.
    websocket_idle_s: float = Field(default=3600.0, gt=0, le=86400)
    websocket_max_age_s: float = Field(default=3600.0, gt=0, le=86400)
    # An endpoint at its `max_concurrency` (capacity.py): how long a request waits in line for a slot
    # (by priority) before it spills to the next candidate.
    capacity_wait_s: float = Field(default=0.5, gt=0, le=60)


class HealthFile(_Frozen):
    """Optional `health:` section: recovering endpoints whose circuit is open."""

    probe: bool = True  # probe open circuits in the background (a 1-token completion)
    probe_interval_s: float = Field(default=5.0, gt=0, le=300)  # between probes of one endpoint, jittered
    max_open_s: float = Field(default=60.0, gt=0)  # failed probes keep a circuit open at most this long
    # At start, measure each chat endpoint no replica has measured (health/warm_up.py); /healthz waits for it.
    warm_up: bool = False
    warm_up_tokens: int = Field(default=32, ge=2, le=1024)  # output tokens of each warm-up completion
    warm_up_timeout_s: float = Field(default=10.0, gt=0, le=300)  # ready after this long, measured or not


class RetryFile(_Frozen):
    """Optional `retry:` section."""

    # A 429 whose retry-after is this short, on the last endpoint of a model, is waited for and tried
    # once more before the next model in `models`.
    max_wait_s: float = Field(default=5.0, ge=0, le=60)
class SessionsFile(_Frozen):
    """Optional `sessions:` section: stored Responses conversations (`store: true`,
    `previous_response_id`), in Redis when REDIS_URL is set, else in this process's memory."""

    ttl_s: float = Field(default=24 * 3600.0, gt=0)  # how long a stored response can be read or continued
    max_bytes: int = Field(default=1024 * 1024, ge=1024)  # a conversation larger than this is not stored
    max_entries: int = Field(default=10_000, ge=1)  # in memory (no Redis): the oldest go first
    timeout_s: float = Field(default=1.0, gt=0, le=30)  # a Redis round trip; past it: 503, never a hang


class CatalogueFile(_Frozen):
    gateway: GatewayFile = Field(default_factory=GatewayFile)
    health: HealthFile = Field(default_factory=HealthFile)
    retry: RetryFile = Field(default_factory=RetryFile)
    sessions: SessionsFile = Field(default_factory=SessionsFile)
    providers: dict[str, ProviderFile]
    models: dict[str, ModelFile]


@dataclass(frozen=True, slots=True)
class Provider:
    name: str
    base_url: str
    region: str
    data_collection: str
    headers: Mapping[str, str]
    api_key: SecretStr | None  # SecretStr so that no repr or log line can show it
    key_missing: bool  # api_key_env is set but the variable is not
    max_connections: int
    max_keepalive_connections: int
    connect_timeout_s: float
    rate_limits: RateLimitsFile | None = None
    api: str = "openai"  # the wire API it speaks (ProviderApi)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One way to serve one public model: a provider, an upstream model id and a tier."""

    key: str  # "<public model>/<endpoint id>", unique across the catalogue
    id: str  # unique within the model, e.g. "fireworks/standard"
    model: str  # the public model name
    provider: Provider
    upstream_model: str
    tier: Tier
    price: PriceFile | None
    hourly_cost: float | None
    quantization: str | None
    region: str
    context_length: int | None
    max_output_tokens: int | None
    max_concurrency: int | None
    advertised: AdvertisedFile
    capabilities: frozenset[str]
    extra_body: Mapping[str, Any]
    slo: SloFile | None = None
    first_token_budget_s: float | None = None
    stream_usage: bool = True
    apis: frozenset[str] = frozenset({"chat"})  # the upstream APIs it serves
    max_uncached_input_tokens: int | None = None
    service_tier: str | None = None  # the provider's speed tier asked for (EndpointFile.service_tier)
    # Price per service tier of the same provider and upstream model, as the catalogue lists them:
    # an answer is charged at the tier that served. Empty unless the catalogue lists several.
    tier_prices: Mapping[str, PriceFile] = field(default_factory=dict)

    @property
    def api(self) -> str:
        """The wire API its provider speaks: openai, anthropic or openai-responses."""
        return self.provider.api

    @property
    def available(self) -> bool:
        return not self.provider.key_missing


@dataclass(frozen=True, slots=True)
class Catalogue:
    models: Mapping[str, tuple[Endpoint, ...]]  # public name -> endpoints in catalogue order
    aliases: Mapping[str, str]  # alias -> public name
    providers: Mapping[str, Provider]

    def resolve_model(self, name: str) -> str | None:
        """The public model name for a name or alias, or None."""
        if name in self.models:
            return name
        return self.aliases.get(name)

    def endpoints(self) -> tuple[Endpoint, ...]:
        return tuple(e for eps in self.models.values() for e in eps)


@dataclass(frozen=True, slots=True)
class Config:
    """Everything the gateway is configured with, loaded once at start."""

    catalogue: Catalogue
    policies: PolicySet
    gateway: GatewayFile = field(default_factory=GatewayFile)
    health: HealthFile = field(default_factory=HealthFile)
    retry: RetryFile = field(default_factory=RetryFile)
    sessions: SessionsFile = field(default_factory=SessionsFile)
    redis_url: str | None = None
    source: str = "providers.yaml"
    open_access: bool = False  # no client keys: only with `serve --open` or ULTRAROUTE_OPEN=1
    admin_key: SecretStr | None = None  # ULTRAROUTE_ADMIN_KEY: unset, the admin API is off
    keys_file: Path = Path("keys.json")
    worker: int | None = None  # this process's index under `serve --workers N` (N > 1)
    # Where it was read from, so that a reload (SIGHUP, POST /admin/reload) reads the same files.
    catalogue_path: Path | None = None
    policies_dir: Path | None = None

    @property
    def spend_file(self) -> Path:
        """Without Redis, client keys' spend is kept here, beside the keys; one file per worker, since
        each keeps its own (worker 0 and a single process share the plain name)."""
        suffix = f".worker-{self.worker}" if self.worker else ""
        return self.keys_file.with_name(f"{self.keys_file.stem}.spend{suffix}.json")


def parse_catalogue(data: Any, source: str) -> CatalogueFile:
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: (top level): must be a mapping with 'providers' and 'models'")
    try:
        return CatalogueFile.model_validate(data)
    except ValidationError as err:
        raise ConfigError(format_validation_error(source, err)) from None


def build_catalogue(file: CatalogueFile, source: str, env: Mapping[str, str]) -> Catalogue:
    """Resolve providers (keys from `env`) and check what pydantic cannot: references and uniqueness."""
    problems: list[str] = []
    providers: dict[str, Provider] = {}
    for name, p in file.providers.items():
        key = env.get(p.api_key_env) if p.api_key_env else None
        providers[name] = Provider(
            name=name,
            base_url=p.base_url.rstrip("/"),
            region=p.region,
            data_collection=p.data_collection,
            headers=dict(p.headers),
            api_key=SecretStr(key) if key else None,
            key_missing=bool(p.api_key_env) and not key,
            max_connections=p.max_connections,
            max_keepalive_connections=p.max_keepalive_connections,
            connect_timeout_s=p.connect_timeout_s,
            rate_limits=p.rate_limits,
            api=p.api,
        )

    models: dict[str, tuple[Endpoint, ...]] = {}
    aliases: dict[str, str] = {}
    for model_name, m in file.models.items():
        seen: set[str] = set()
        endpoints: list[Endpoint] = []
        for i, e in enumerate(m.endpoints):
            where = f"{source}: models.{model_name}.endpoints[{i}]"
            provider = providers.get(e.provider)
            if provider is None:
                problems.append(f"{where}.provider: unknown provider '{e.provider}'")
                continue
            endpoint_id = e.id or f"{e.provider}/{e.tier.value}"
            if endpoint_id in seen:
                problems.append(f"{where}.id: '{endpoint_id}' is not unique within the model; set `id`")
                continue
            seen.add(endpoint_id)
            if provider.api != "openai" and e.apis != {"chat"}:
                # Legacy completions and embeddings exist only in OpenAI's own API.
                problems.append(f"{where}.apis: a provider with api '{provider.api}' serves chat only")
                continue
            endpoints.append(
                Endpoint(
                    key=f"{model_name}/{endpoint_id}",
                    id=endpoint_id,
                    model=model_name,
                    provider=provider,
                    upstream_model=e.model,
                    tier=e.tier,
                    price=e.price,
                    hourly_cost=e.hourly_cost,
                    quantization=e.quantization,
                    region=e.region or provider.region,
                    context_length=e.context_length,
                    max_output_tokens=e.max_output_tokens,
                    max_concurrency=e.max_concurrency,
                    advertised=e.advertised,
                    capabilities=frozenset(e.capabilities),
                    extra_body=dict(e.extra_body),
                    slo=e.slo,
                    first_token_budget_s=e.first_token_budget_s,
                    stream_usage=e.stream_usage,
                    apis=frozenset(e.apis),
                    service_tier=e.service_tier,
                    max_uncached_input_tokens=e.max_uncached_input_tokens,
                )
            )
        models[model_name] = tuple(endpoints)
        for j, alias in enumerate(m.aliases):
            if alias in file.models or (alias in aliases and aliases[alias] != model_name):
                problems.append(f"{source}: models.{model_name}.aliases[{j}]: '{alias}' names another model")
            aliases[alias] = model_name
    if problems:
        raise ConfigError("\n".join(problems))
    return Catalogue(models=_with_tier_prices(models), aliases=aliases, providers=providers)


# The tier a provider reports when none was asked for.
DEFAULT_SERVICE_TIER = {"anthropic": "standard", "openai": "default", "openai-responses": "default"}


def served_tier_name(endpoint: Endpoint) -> str:
    return endpoint.service_tier or DEFAULT_SERVICE_TIER[endpoint.provider.api]


def _with_tier_prices(models: dict[str, tuple[Endpoint, ...]]) -> dict[str, tuple[Endpoint, ...]]:
    """Each endpoint told the prices of its provider's other service tiers of the same model."""
    prices: dict[tuple[str, str], dict[str, PriceFile]] = {}
    for endpoints in models.values():
        for e in endpoints:
            if e.price is not None:
                prices.setdefault((e.provider.name, e.upstream_model), {})[served_tier_name(e)] = e.price
    return {name: tuple(replace(e, tier_prices=prices[(e.provider.name, e.upstream_model)])
                        if len(prices.get((e.provider.name, e.upstream_model), ())) > 1 else e for e in endpoints)
            for name, endpoints in models.items()}


def load_catalogue(path: Path, env: Mapping[str, str] | None = None) -> tuple[Catalogue, GatewayFile]:
    catalogue, gateway, _ = load_catalogue_file(path, env)
    return catalogue, gateway


def load_catalogue_file(path: Path, env: Mapping[str, str] | None = None
                        ) -> tuple[Catalogue, GatewayFile, SessionsFile]:
    env = os.environ if env is None else env
    file = parse_catalogue(read_yaml(path), path.name)
    return build_catalogue(file, path.name, env), file.gateway, file.sessions


MIN_ADMIN_KEY_CHARS = 24


def load_config(
    catalogue_path: Path,
    policies_dir: Path | None = None,
    env: Mapping[str, str] | None = None,
    open_access: bool = False,
) -> Config:
    """Load the catalogue, the named policies and the environment's settings, once, at start.

    Environment: provider keys (by the names the catalogue gives), `REDIS_URL`, `ULTRAROUTE_OPEN=1`
    (same as `open_access`), `ULTRAROUTE_ADMIN_KEY`."""
    env = os.environ if env is None else env
    file = parse_catalogue(read_yaml(catalogue_path), catalogue_path.name)
    catalogue, gateway = build_catalogue(file, catalogue_path.name, env), file.gateway
    policies = load_policies(policies_dir) if policies_dir is not None else PolicySet.builtin()
    redis_url = env.get("REDIS_URL") or None
    if redis_url is not None:
        parse_redis_url(redis_url)  # a malformed URL fails at start, not in a background task
    admin_key = env.get("ULTRAROUTE_ADMIN_KEY") or None
    if admin_key is not None and len(admin_key) < MIN_ADMIN_KEY_CHARS:
        raise ConfigError(f"ULTRAROUTE_ADMIN_KEY: must be at least {MIN_ADMIN_KEY_CHARS} characters "
                          "(e.g. `openssl rand -hex 24`)")
    return Config(
        catalogue=catalogue,
        policies=policies,
        gateway=gateway,
        health=file.health,
        retry=file.retry,
        sessions=file.sessions,
        redis_url=redis_url,
        source=catalogue_path.name,
        open_access=open_access or env.get("ULTRAROUTE_OPEN", "").lower() in ("1", "true", "yes"),
        admin_key=SecretStr(admin_key) if admin_key else None,
        keys_file=catalogue_path.parent / gateway.keys_file,
        catalogue_path=catalogue_path,
        policies_dir=policies_dir,
    )
