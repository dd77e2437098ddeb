"""The one place that maps exceptions to HTTP status codes and error bodies.

Client mistakes are 4xx with a message naming the problem and where it is (TIR path, or
line:column); everything else is a 500 that carries the request id (and is logged). The
optimizer's own failures never get here: `service.core.compiling` serves the baseline instead.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import TypeVar, cast

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from service.core.errors import (
    CLIENT_ERRORS,
    BodyTooLarge,
    Forbidden,
    InvalidRequest,
    JobNotFound,
    LimitExceeded,
    MalformedBody,
    ServiceError,
    Unauthorized,
    Unavailable,
    error_code,
)
from service.core.schemas import ErrorResponse
from tasmopt.errors import BaselineError, LoweringError, TasmSyntaxError, TirError
from tasmopt.store.errors import Conflict, InvalidCheckpoint, NotFound

_E = TypeVar("_E", bound=Exception)

__all__ = [
    "ServiceError",
    "MalformedBody",
    "InvalidRequest",
    "LimitExceeded",
    "BodyTooLarge",
    "Unauthorized",
    "Forbidden",
    "JobNotFound",
    "Unavailable",
    "CLIENT_ERRORS",
    "install",
    "ERROR_RESPONSES",
    "ADMIN_ERROR_RESPONSES",
    "error_code",
]

log = logging.getLogger(__name__)


#: OpenAPI description of the error responses of `/compile`.
ERROR_RESPONSES: dict[int | str, dict] = {
    400: {"model": ErrorResponse, "description": "Body is not JSON (line and column given)."},
    413: {"model": ErrorResponse, "description": "Body larger than MAX_BODY_BYTES."},
    422: {
        "model": ErrorResponse,
        "description": "Invalid TIR (path given), unparsable "
        "baseline_tasm (line:column), unknown option, or a limit exceeded.",
    },
    500: {"model": ErrorResponse, "description": "Not even the baseline could be served."},
}

#: OpenAPI description of the error responses of the admin endpoints.
ADMIN_ERROR_RESPONSES: dict[int | str, dict] = {
    401: {"model": ErrorResponse, "description": "No or malformed Authorization header."},
    403: {"model": ErrorResponse, "description": "Wrong token, or ADMIN_TOKEN unset."},
    404: {"model": ErrorResponse, "description": "Unknown checkpoint version."},
    409: {"model": ErrorResponse, "description": "Not allowed in the checkpoint's state."},
    422: {"model": ErrorResponse, "description": "Invalid body (e.g. no reason)."},
}


def _request_id(request: Request) -> uuid.UUID | None:
    return getattr(request.state, "request_id", None)


def _reply(request: Request, status: int, body: ErrorResponse) -> JSONResponse:
    body.request_id = _request_id(request)
    headers = {"X-Request-ID": str(body.request_id)} if body.request_id else None
    return JSONResponse(
        body.model_dump(mode="json", exclude_none=True), status_code=status, headers=headers
    )


def _service_error(request: Request, exc: ServiceError) -> JSONResponse:
    response = _reply(
        request,
        exc.status,
        ErrorResponse(
            code=exc.code,
            message=exc.message,
            path=exc.path,
            line=exc.line,
            column=exc.column,
            errors=exc.errors,
        ),
    )
    response.headers.update(exc.headers or {})
    return response


def _not_found(request: Request, exc: NotFound) -> JSONResponse:
    return _reply(request, 404, ErrorResponse(code="not_found", message=str(exc)))


def _conflict(request: Request, exc: Conflict) -> JSONResponse:
    return _reply(request, 409, ErrorResponse(code="conflict", message=str(exc)))


def _invalid_checkpoint(request: Request, exc: InvalidCheckpoint) -> JSONResponse:
    return _reply(request, 422, ErrorResponse(code="invalid_checkpoint", message=str(exc)))


def _tir_error(request: Request, exc: TirError) -> JSONResponse:
    return _reply(request, 422, ErrorResponse(code="invalid_tir", message=str(exc), path=exc.path))


def _tasm_error(request: Request, exc: TasmSyntaxError) -> JSONResponse:
    where = f"baseline_tasm:{exc.line}:{exc.column}"
    message = f"{where}: {exc.reason}"
    if exc.source_line:
        message += f" (in {exc.source_line.strip()[:80]!r})"
    return _reply(
        request,
        422,
        ErrorResponse(
            code="invalid_baseline_tasm", message=message, line=exc.line, column=exc.column
        ),
    )


def _baseline_error(request: Request, exc: BaselineError) -> JSONResponse:
    return _reply(
        request,
        422,
        ErrorResponse(code="invalid_baseline_tasm", message=f"baseline_tasm: {exc}"),
    )


def _lowering_error(request: Request, exc: LoweringError) -> JSONResponse:
    return _reply(request, 422, ErrorResponse(code="unlowerable_tir", message=str(exc)))


def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    return _reply(request, exc.status_code, ErrorResponse(code=code, message=str(exc.detail)))


def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    errors = [f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}" for e in exc.errors()]
    return _reply(
        request, 422, ErrorResponse(code="invalid_request", message=errors[0], errors=errors)
    )


def _internal_error(request: Request, exc: Exception) -> JSONResponse:
    log.exception("request %s failed", _request_id(request), exc_info=exc)
    return _reply(
        request,
        500,
        ErrorResponse(
            code="internal_error",
            message="internal error; the request id identifies it in the service log",
        ),
    )


def _on(app: FastAPI, exc_class: type[_E], handler: Callable[[Request, _E], JSONResponse]) -> None:
    """Register ``handler`` for ``exc_class`` (Starlette types every handler as taking an
    `Exception`; it calls each with an instance of its own class)."""
    app.add_exception_handler(
        exc_class, cast(Callable[[Request, Exception], JSONResponse], handler)
    )


def install(app: FastAPI) -> None:
    """Register every handler on `app`."""
    _on(app, ServiceError, _service_error)
    _on(app, TirError, _tir_error)
    _on(app, TasmSyntaxError, _tasm_error)
    _on(app, BaselineError, _baseline_error)
    _on(app, LoweringError, _lowering_error)
    _on(app, NotFound, _not_found)
    _on(app, Conflict, _conflict)
    _on(app, InvalidCheckpoint, _invalid_checkpoint)
    _on(app, HTTPException, _http_error)
    _on(app, RequestValidationError, _validation_error)
    app.add_exception_handler(Exception, _internal_error)
