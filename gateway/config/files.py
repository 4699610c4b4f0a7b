"""The catalogue file (`providers.yaml`) as frozen pydantic models that mirror the YAML.

They validate shapes and ranges; what needs the whole file (references, uniqueness) is checked when
the catalogue is built (`gateway.config.catalogue`).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


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

