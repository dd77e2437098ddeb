"""The service's own exceptions (each with its HTTP status and error code) and the map from
any exception to the ``(code, message)`` a client gets: shared by the API, which turns them into
responses (`service.errors`), and by the worker's async compiles, which record them."""

from __future__ import annotations

from tasmopt.errors import BaselineError, LoweringError, TasmSyntaxError, TirError

__all__ = [
    "ServiceError",
    "MalformedBody",
    "InvalidRequest",
    "LimitExceeded",
    "BodyTooLarge",
    "UnsupportedMediaType",
    "Overloaded",
    "TooManyRequests",
    "RequestCancelled",
    "Unauthorized",
    "Forbidden",
    "JobNotFound",
    "Unavailable",
    "CLIENT_ERRORS",
    "error_code",
]


class ServiceError(Exception):
    """A request the service refuses. Subclasses set `status` and `code`."""

    status = 400
    code = "bad_request"

    headers: dict[str, str] | None = None

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        line: int | None = None,
        column: int | None = None,
        errors: list[str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message, self.path, self.line, self.column = message, path, line, column
        self.errors = errors


class MalformedBody(ServiceError):
    """The body is not JSON (or not UTF-8)."""

    status, code = 400, "malformed_json"


class InvalidRequest(ServiceError):
    """JSON, but not a `CompileRequest` (missing/unknown fields, bad options)."""

    status, code = 422, "invalid_request"


class LimitExceeded(ServiceError):
    """TIR with more ops or deeper nesting than the service accepts."""

    status, code = 422, "limit_exceeded"


class RequestCancelled(ServiceError):
    """The client disconnected before its compile started (nobody reads this answer)."""

    status, code = 499, "client_closed_request"


class _RetryLater(ServiceError):
    """A refusal that tells the client when to come back (the ``Retry-After`` header)."""

    def __init__(self, message: str, *, retry_after_s: int) -> None:
        super().__init__(message)
        self.headers = {"Retry-After": str(retry_after_s)}


class TooManyRequests(_RetryLater):
    """One client already holds its share of this process's compiles."""

    status, code = 429, "too_many_requests"


class Overloaded(_RetryLater):
    """This process already holds as many compiles as it may (running and waiting)."""

    status, code = 503, "overloaded"


class UnsupportedMediaType(ServiceError):
    """The request body is declared as something other than JSON."""

    status, code = 415, "unsupported_media_type"


class BodyTooLarge(ServiceError):
    """The request body is larger than MAX_BODY_BYTES."""

    status, code = 413, "body_too_large"

    def __init__(self, limit: int) -> None:
        super().__init__(f"request body exceeds the limit of {limit} bytes (MAX_BODY_BYTES)")


class Unauthorized(ServiceError):
    """No ``Authorization: Bearer <token>`` header, or a malformed one (admin endpoints)."""

    status, code = 401, "unauthorized"
    headers = {"WWW-Authenticate": "Bearer"}


class Forbidden(ServiceError):
    """A bearer token that is not the admin token, or admin endpoints disabled."""

    status, code = 403, "forbidden"


class JobNotFound(ServiceError):
    """No async compile job with this id."""

    status, code = 404, "not_found"


class Unavailable(ServiceError):
    """A dependency needed to answer is down (e.g. job status with database and Redis down)."""

    status, code = 503, "unavailable"


#: Exceptions raised by `tasmopt` that are the client's fault (never served as a fallback).
CLIENT_ERRORS: tuple[type[Exception], ...] = (
    TirError,
    TasmSyntaxError,
    BaselineError,
    LoweringError,
)


def error_code(exc: BaseException) -> tuple[str, str]:
    """(code, message) a client would get for `exc` (used for failed async jobs)."""
    if isinstance(exc, ServiceError):
        return exc.code, exc.message
    if isinstance(exc, TirError):
        return "invalid_tir", str(exc)
    if isinstance(exc, TasmSyntaxError):
        return "invalid_baseline_tasm", f"baseline_tasm:{exc.line}:{exc.column}: {exc.reason}"
    if isinstance(exc, BaselineError):
        return "invalid_baseline_tasm", f"baseline_tasm: {exc}"
    if isinstance(exc, LoweringError):
        return "unlowerable_tir", str(exc)
    return "internal_error", f"{type(exc).__name__}: {str(exc)[:300]}"
