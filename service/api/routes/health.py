"""Liveness (`/healthz`: the process answers) and readiness (`/readyz`: its dependencies do)."""

from __future__ import annotations

import anyio.to_thread
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from service.core.db import schema_status
from service.core.schemas import CheckOut, HealthResponse, ReadyResponse

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=HealthResponse)
async def healthz() -> HealthResponse:
    """The process is up (no dependency is consulted). Answered on the event loop: it never
    waits for a thread, so compiles cannot starve it."""
    return HealthResponse()


@router.get(
    "/readyz",
    response_model=ReadyResponse,
    responses={503: {"model": ReadyResponse, "description": "A dependency is down."}},
)
async def readyz(request: Request) -> JSONResponse:
    """The database is reachable and at the Alembic head; Redis answers, if configured. The
    checks run on the control plane's own threads, never behind compiles."""
    return await anyio.to_thread.run_sync(
        _ready, request, limiter=request.app.state.control_threads
    )


def _ready(request: Request) -> JSONResponse:
    state = request.app.state
    ready = ReadyResponse(
        ready=False, database=CheckOut(ok=False), spooled_rows=state.spool.pending_rows()
    )
    try:
        status = schema_status(state.engine)
        ready.schema_revision, ready.schema_head = status.current, status.head
        ready.database = CheckOut(
            ok=status.migrated,
            detail=None
            if status.migrated
            else f"schema at {status.current}, head is {status.head}",
        )
    except Exception as exc:
        ready.database = CheckOut(ok=False, detail=_first_line(exc))
    if state.redis is not None:
        try:
            state.redis.ping()
            ready.redis = CheckOut(ok=True)
        except Exception as exc:
            ready.redis = CheckOut(ok=False, detail=_first_line(exc))
    ready.ready = ready.database.ok and (ready.redis is None or ready.redis.ok)
    return JSONResponse(ready.model_dump(mode="json"), status_code=200 if ready.ready else 503)


def _first_line(exc: Exception) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
