"""The typed, frozen values that pass between the stages of a request.

    ApiKey        who is asking (admit; access/keys.py), None in open mode
    ChatRequest   what the client asked for (parse)
    Preferences   how to route it, after precedence is applied (resolve)
    Plan          the ordered candidates, and why others were left out (select)
    Attempt       what one try at one endpoint did (dispatch; carried by its `Served`)
    RequestContext  the key, request, preferences and plan of one request, built once it is planned

Nothing here does work; it is the vocabulary of the pipeline.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from gateway.access.keys import ApiKey
from gateway.config import Endpoint
from gateway.errors import InvalidRequest
from gateway.policy import PercentileThreshold, ProviderOptions, Sort, Speed
from gateway.routing.figures import Figures
from gateway.telemetry.sample import Outcome


class ChatRequest(NamedTuple):
    """A parsed request, in the shape it is forwarded upstream (`upstream`: a chat completion, a legacy
    completion or an embeddings request), whichever client API (`api`) it came in by.

    `body` is the client's JSON (translated, for the APIs that are not chat) minus the gateway's own
    fields: it is forwarded as it is, apart from `model` and the streaming options the gateway sets.
    It is never mutated.

    (A tuple, made once per request before its upstream is called: a frozen dataclass sets each of
    its 20 fields through `object.__setattr__`, ~1% of a request's instructions. `_replace` makes a
    changed copy.)
    """

    request_id: str
    body: dict[str, Any]
    model: str  # as sent, suffix included (e.g. "deepseek-v4.1-flash:nitro")
    stream: bool
    include_usage: bool
    prompt_chars: int  # a cheap size estimate for context-length checks
    fallback_models: tuple[str, ...] = ()
    session_key: str | None = None
    want_metadata: bool = False
    options: ProviderOptions | None = None  # the body's `provider` object
    speed: Speed | None = None  # the body's `speed`, or OpenRouter's fast `service_tier`
    priority: str = "normal"  # x-ultraroute-priority: high | normal | low (queueing for capacity)
    api: str = "chat"  # the client API it came in by (gateway/apis/): chat, responses, messages, ...
    upstream: str = "chat"  # the API it is forwarded as: chat, completions or embeddings
    origin: Any = None  # the client API's own parsed request, kept for rendering the answer in its shape
    # Client API fields the upstream cannot take, dropped by the adapter: named in `x-ultraroute-dropped`
    # and the access log (README, "Client API fields"), e.g. ("tools.web_search", "context_management").
    dropped: tuple[str, ...] = ()
    # Body fields forwarded only to endpoints with a capability, else removed and named as the client
    # called them: (body key, capability, client field), e.g. ("reasoning_effort", "reasoning", "thinking");
    # a key `messages.<field>` is that field of every message (`reasoning_content` of earlier turns).
    capability_fields: tuple[tuple[str, str, str], ...] = ()
    # The client's body as sent (Messages, Responses) and its `anthropic-beta` header: what an
    # endpoint speaking the same API is passed (gateway/upstreams/), untranslated.
    client_body: dict[str, Any] | None = None
    client_betas: str | None = None
    # What the translation cannot honour (an errors.Untranslatable), kept instead of raised: only an
    # endpoint passed the client body as sent can serve it (dispatch.py).
    untranslatable: InvalidRequest | None = None
    # Anthropic's `fallbacks` entries, when one has fields of its own (`fallback_models` names them
    # all, in order): each model's speed and request (apis/messages_fallbacks.py); else ().
    fallbacks: tuple[Fallback, ...] = ()


@dataclass(frozen=True, slots=True)
class Fallback:
    """One entry of Anthropic's `fallbacks`: the model as named, the speed its endpoints are ranked
    for (None: the request's own) and the request they are sent (None: the request's own)."""

    model: str
    speed: Speed | None = None
    request: ChatRequest | None = None


class Preferences(NamedTuple):
    """The routing options in force for one request, after body > headers > suffix > policy > default.

    (A tuple: part of the keys the router caches plans under, hashed and compared on every request;
    a dataclass's are Python functions over its 18 fields, a tuple's are C.)"""

    policy_name: str = "default"
    speed: Speed | None = None
    sort: Sort | None = None
    order: tuple[str, ...] = ()
    only: tuple[str, ...] | None = None
    ignore: tuple[str, ...] = ()
    allow_fallbacks: bool = True
    quantizations: tuple[str, ...] | None = None
    data_collection: str | None = None
    max_price_prompt: float | None = None
    max_price_completion: float | None = None
    min_throughput: PercentileThreshold | None = None
    max_latency_s: PercentileThreshold | None = None
    require_parameters: bool = False
    regions: tuple[str, ...] | None = None
    hedge_after_ms: float | None = None
    sticky: bool | None = None  # None: sticky when a session is named or cached input is cheaper
    mid_stream_recovery: bool = True


@dataclass(frozen=True, slots=True)
class Exclusion:
    endpoint_key: str
    reason: str


# Not frozen, though never changed once built (hashed and compared as if frozen: `unsafe_hash`): a
# frozen dataclass sets each field through `object.__setattr__`, and building one cost ~4x a plain
# one's -- 1-3 are built per request (the choice, its note).
@dataclass(slots=True, unsafe_hash=True)
class Candidate:
    """One endpoint of the plan with the figures it was ranked by. Treat as immutable."""

    endpoint: Endpoint
    figures: Figures
    tier_rank: int  # 0 = the tier asked for; higher = fallback tiers
    notes: tuple[str, ...] = ()  # why it sits where it does: "sticky", "explore", "slower", ...


@dataclass(frozen=True, slots=True)
class Spill:
    """A premium-tier endpoint passed over for a cheaper tier, and why ("slower" or "capacity")."""

    endpoint_id: str
    reason: str


class Plan(NamedTuple):
    """The endpoints to try, in order, and the ones left out with the reason. (A tuple, as
    `ChatRequest` is: made once per request before its upstream is called.)"""

    model: str  # the public model name asked for (after alias resolution)
    candidates: tuple[Candidate, ...]
    excluded: tuple[Exclusion, ...] = ()
    strategy: str = "default"
    spills: tuple[Spill, ...] = ()
    session_key: str | None = None  # the conversation this request belongs to, for stickiness
    # A fallback model's own request (a `fallbacks` entry's max_tokens, thinking, ...), by the model's
    # public name; every other endpoint is sent the request itself. None: no model has its own.
    model_requests: Mapping[str, ChatRequest] | None = None

    @property
    def endpoints(self) -> tuple[Endpoint, ...]:
        return tuple(c.endpoint for c in self.candidates)

    def request_for(self, request: ChatRequest, endpoint: Endpoint) -> ChatRequest:
        """What `endpoint` is sent of `request`: its model's own request, if the plan has one."""
        own = self.model_requests
        return request if own is None else own.get(endpoint.model, request)


@dataclass(frozen=True, slots=True)
class Attempt:
    endpoint_key: str
    endpoint_id: str
    tier: str
    outcome: Outcome
    status: int | None
    reason: str  # short and bounded: "429", "503", "timeout", "connect", "slo", ...
    duration_s: float


class RequestContext(NamedTuple):
    """(A tuple, as `ChatRequest` is: made once per request before its upstream is called.)"""

    request: ChatRequest
    client: ApiKey | None = None
    limit_headers: tuple[tuple[str, str], ...] = ()  # x-ratelimit-* for the client's key
    preferences: Preferences = Preferences()
    plan: Plan | None = None
    transport: str = "http"  # or "websocket": a response on a Responses WebSocket (apis/responses_ws.py)

    def request_for(self, endpoint: Endpoint) -> ChatRequest:
        """What `endpoint` is sent: its model's own request (a `fallbacks` entry's), else the request."""
        return self.request if self.plan is None else self.plan.request_for(self.request, endpoint)
