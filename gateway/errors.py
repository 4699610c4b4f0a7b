"""The gateway's error tree, and the one place that renders an error as OpenAI's JSON shape.

    GatewayError                      status  type                    retryable
    ├── InvalidRequest                400     invalid_request_error   no
    │   ├── PayloadTooLarge           413     invalid_request_error   no
    │   └── Untranslatable            400     invalid_request_error   no   (valid in the client's API, but a
    │                                                                       translation cannot carry it)
    ├── AuthenticationFailed          401     invalid_request_error   no   (missing_api_key, invalid_api_key)
    ├── PermissionDenied              403     invalid_request_error   no   (model_not_allowed, ...)
    ├── RateLimited                   429     requests | tokens       yes  (rate_limit_exceeded, retry-after)
    │   └── BudgetExceeded            429     insufficient_quota      no   (budget_exceeded)
    ├── ServiceUnavailable            503     api_error               yes  (the key store cannot be reached)
    │   ├── Overloaded                503     server_error            yes  (code overloaded: past max_in_flight)
    │   └── ShuttingDown              503     api_error               yes  (draining after SIGTERM; retry-after,
    │                                                                       connection: close)
    ├── ModelNotFound                 404     invalid_request_error   no   (code model_not_found)
    ├── NoMatchingEndpoint            404     invalid_request_error   no   (code no_matching_endpoint)
    ├── KeyNotFound                   404     invalid_request_error   no   (admin API: code key_not_found)
    ├── ResponseNotFound              404     invalid_request_error   no   (a stored response: unknown,
    │                                                                       expired or another key's)
    ├── UpstreamError                 (the provider's status)         by status: 408/429/5xx yes
    │   ├── UpstreamTimeout           504     timeout                 yes
    │   ├── UpstreamUnreachable       502     api_error               yes
    │   ├── UpstreamMisconfigured     502     api_error               no   (the provider refused our key)
    │   └── StreamBroken              502/504 after the first token (upstreams/stream.py): ends or resumes
    └── AllCandidatesFailed           (the last failure's)  every candidate failed; carries them all

Every error knows its HTTP status, OpenAI `type` and `code`, the offending `param`, whether another
attempt could succeed, and a bounded metric label. `error_body()` renders any of them, in OpenAI's
shape or (`shape="anthropic"`, for `/v1/messages`) in Anthropic's, whose `type` follows from the
status (`ANTHROPIC_TYPES`); nothing else builds an error response. Messages never contain a
provider key: upstream bodies are passed on as the provider wrote them except for its key, which
`upstream.redact()` takes out first (some providers quote it), and a 401/403's text is dropped
altogether.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gateway.upstreams.limit_headers import Reported

import orjson

RETRYABLE_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


class GatewayError(Exception):
    status: int = 500
    type: str = "api_error"
    code: str | None = None
    retryable: bool = False
    metric_label: str = "internal"

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code

    def error_object(self) -> dict[str, Any]:
        return {"message": self.message, "type": self.type, "code": self.code, "param": self.param}

    def headers(self) -> dict[str, str]:
        """Extra response headers. The gateway has done its own retrying, so the SDK should not."""
        return {"x-should-retry": "false"}


class InvalidRequest(GatewayError):
    status = 400
    type = "invalid_request_error"
    code = "invalid_request"
    metric_label = "invalid_request"


class PayloadTooLarge(InvalidRequest):
    status = 413
    code = "payload_too_large"
    metric_label = "payload_too_large"


class Untranslatable(InvalidRequest):
    """A request its own API allows, that a translation into another API cannot honour (a
    `tool_choice` forcing a server tool, say). The adapter keeps it on the request instead of raising
    (`ChatRequest.untranslatable`): an endpoint that is passed the body as sent takes it; only the
    endpoints that need the translation are passed over, and with none left it is the answer."""


class ClientClosed(GatewayError):
    """The client hung up before its request was whole (mid-upload). Nobody is listening, so the
    answer goes nowhere; it is recorded as a hang-up -- status 499 (nginx's "client closed request")
    and outcome `cancelled`, as a request abandoned later is -- never as the gateway's fault."""

    status = 499
    type = "invalid_request_error"
    code = "client_closed"
    metric_label = "cancelled"

    def __init__(self, message: str = "The client closed the connection before its request was sent whole.") -> None:
        super().__init__(message)


class AuthenticationFailed(GatewayError):
    status = 401
    type = "invalid_request_error"
    code = "invalid_api_key"
    metric_label = "unauthenticated"

    def headers(self) -> dict[str, str]:
        return {**super().headers(), "www-authenticate": 'Bearer realm="ultraroute"'}


class PermissionDenied(GatewayError):
    status = 403
    type = "invalid_request_error"
    code = "permission_denied"
    metric_label = "forbidden"


class RateLimited(GatewayError):
    """A client key is over its requests or tokens per minute. Unlike the gateway's other errors,
    the SDK may retry this one: after `retry-after` the window has room again."""

    status = 429
    code = "rate_limit_exceeded"
    retryable = True
    metric_label = "client_rate_limited"

    def __init__(self, message: str, *, limit_kind: str, retry_after_s: float,
                 limit_headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.type = limit_kind  # OpenAI's own: "requests" or "tokens"
        self.retry_after_s = retry_after_s
        self.limit_headers = limit_headers or {}

    def headers(self) -> dict[str, str]:
        return {**self.limit_headers, "retry-after": str(max(1, math.ceil(self.retry_after_s))),
                "x-should-retry": "true"}


class BudgetExceeded(RateLimited):
    """The key's spend budget for the period is used up; retrying before the period ends is useless."""

    code = "budget_exceeded"
    retryable = False
    metric_label = "budget_exceeded"

    def __init__(self, message: str, *, retry_after_s: float) -> None:
        super().__init__(message, limit_kind="insufficient_quota", retry_after_s=retry_after_s)

    def headers(self) -> dict[str, str]:
        return {**super().headers(), "x-should-retry": "false"}


class ServiceUnavailable(GatewayError):
    status = 503
    code = "service_unavailable"
    retryable = True
    metric_label = "unavailable"


class Overloaded(ServiceUnavailable):
    """This gateway process is at `gateway.max_in_flight`: refused at once, before the body is read,
    rather than queued into a timeout that would be blamed on a provider. Nothing upstream was called,
    so no endpoint is charged with it; the client may retry after `retry-after` (another replica, or
    this one with room again)."""

    type = "server_error"
    code = "overloaded"
    metric_label = "overloaded"

    def __init__(self, limit: int, retry_after_s: int = 1) -> None:
        super().__init__(f"The gateway is overloaded ({limit} requests in flight); retry shortly.")
        self.retry_after_s = retry_after_s

    def headers(self) -> dict[str, str]:
        return {"retry-after": str(self.retry_after_s), "x-should-retry": "true"}
class ShuttingDown(ServiceUnavailable):
    """This replica is draining (SIGTERM): new requests go elsewhere; a stream still open when the
    grace period ends is closed with this error as its last event. Another replica can serve it, so
    the SDK may retry; `connection: close` makes the client's next request open a new connection,
    which the load balancer sends to a replica that is staying."""

    code = "shutting_down"
    metric_label = "shutting_down"

    def __init__(self, message: str = "This gateway replica is shutting down; retry on another.",
                 retry_after_s: int = 1) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s

    def headers(self) -> dict[str, str]:
        return {"retry-after": str(self.retry_after_s), "x-should-retry": "true", "connection": "close"}


class ModelNotFound(GatewayError):
    status = 404
    type = "invalid_request_error"
    code = "model_not_found"
    metric_label = "model_not_found"

    def __init__(self, model: str, detail: str = "") -> None:
        super().__init__(f"The model '{model}' does not exist or is not served here.{detail}", param="model")


class NoMatchingEndpoint(GatewayError):
    status = 404
    type = "invalid_request_error"
    code = "no_matching_endpoint"
    metric_label = "no_matching_endpoint"


class KeyNotFound(GatewayError):
    status = 404
    type = "invalid_request_error"
    code = "key_not_found"
    metric_label = "key_not_found"

    def __init__(self) -> None:
        super().__init__("No API key has this id.", param="key_id")


class ResponseNotFound(GatewayError):
    """A stored Responses answer that does not exist, has expired, or belongs to another client key:
    the three look the same, so that no key learns anything about another's conversations."""

    status = 404
    type = "invalid_request_error"
    code = "response_not_found"
    metric_label = "response_not_found"

    def __init__(self, response_id: str, param: str | None) -> None:
        super().__init__(f"No response with id '{response_id[:80]}' is stored for this API key (unknown, "
                         "expired or deleted).", param=param)


class UpstreamError(GatewayError):
    """The provider answered with an error. Its body's error object is passed on (key redacted)."""

    type = "api_error"
    metric_label = "upstream_error"

    def __init__(
        self,
        message: str,
        *,
        status: int,
        body: dict[str, Any] | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.body = body
        self.retry_after_s = retry_after_s
        self.reported: Reported | None = None  # the provider's rate-limit headers (limit_headers.py)
        self.retryable = status in RETRYABLE_STATUSES
        self.metric_label = "rate_limited" if status == 429 else f"upstream_{status // 100}xx"
        if body is not None:
            self.type = str(body.get("type") or self.type)
            self.code = body.get("code") if body.get("code") is not None else self.code
            self.param = body.get("param")

    def error_object(self) -> dict[str, Any]:
        if self.body is not None:
            return {"message": self.message, "type": self.type, "code": self.code, "param": self.param,
                    **{k: v for k, v in self.body.items() if k not in ("message", "type", "code", "param")}}
        return super().error_object()

    def headers(self) -> dict[str, str]:
        headers = super().headers()
        if self.retry_after_s is not None:
            headers["retry-after"] = str(max(1, round(self.retry_after_s)))
        return headers


class UpstreamTimeout(UpstreamError):
    def __init__(self, message: str) -> None:
        super().__init__(message, status=504)
        self.type = "timeout"
        self.code = "upstream_timeout"
        self.metric_label = "timeout"


class UpstreamUnreachable(UpstreamError):
    def __init__(self, message: str) -> None:
        super().__init__(message, status=502)
        self.code = "upstream_unreachable"
        self.metric_label = "connect_error"


class UpstreamMisconfigured(UpstreamError):
    def __init__(self, message: str, status: int) -> None:
        super().__init__(message, status=502)
        self.upstream_status = status
        self.code = "upstream_auth_failed"
        self.retryable = False
        self.metric_label = f"upstream_{status}"


class AllCandidatesFailed(GatewayError):
    """Every endpoint in the plan was tried and failed. Rendered as the last failure, so that an
    upstream error reaches the client with its own status and body when nothing else could serve."""

    def __init__(self, failures: list[tuple[str, GatewayError]]) -> None:
        last = failures[-1][1]
        summary = "; ".join(f"{endpoint_id}: {err.metric_label}" for endpoint_id, err in failures)
        message = last.message if len(failures) == 1 else f"{last.message} (all candidates failed: {summary})"
        super().__init__(message, param=last.param, code=last.code)
        self.failures = failures
        self.last = last
        self.status = last.status
        self.type = last.type
        self.retryable = last.retryable
        self.metric_label = last.metric_label

    def error_object(self) -> dict[str, Any]:
        return {**self.last.error_object(), "message": self.message}

    def headers(self) -> dict[str, str]:
        return self.last.headers()


# Anthropic's error types by HTTP status (its documented set; 413 is its request_too_large).
ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error", 402: "billing_error",
                   403: "permission_error", 404: "not_found_error", 408: "timeout_error",
                   413: "request_too_large", 429: "rate_limit_error", 499: "invalid_request_error",
                   500: "api_error", 502: "api_error", 503: "overloaded_error", 504: "timeout_error",
                   529: "overloaded_error"}


def anthropic_error_object(err: GatewayError) -> dict[str, Any]:
    kind = ANTHROPIC_TYPES.get(err.status, "api_error" if err.status >= 500 else "invalid_request_error")
    return {"type": kind, "message": err.message}


def error_body(err: GatewayError, shape: str = "openai") -> bytes:
    """The JSON body of an error response, in OpenAI's shape or (`"anthropic"`) in Anthropic's."""
    if shape == "anthropic":
        return orjson.dumps({"type": "error", "error": anthropic_error_object(err)})
    return orjson.dumps({"error": err.error_object()})
