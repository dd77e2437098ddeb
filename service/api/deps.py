"""Injected dependencies of the routes, as `Annotated` aliases.

Everything a route needs comes from ``app.state`` (built once by the lifespan in
`service.main`), so tests swap any of them with ``app.dependency_overrides``.
"""

from __future__ import annotations

import functools
import secrets
import threading
from collections.abc import Callable, Iterator
from typing import Annotated, Any

import anyio.to_thread
from fastapi import Depends, Request
from sqlalchemy.orm import Session, sessionmaker

from service.core.admission import Admission
from service.core.compiling import (
    Compiler,
    DbBreaker,
    Verifier,
    check_media_type,
    parse_request,
)
from service.core.config import Settings
from service.core.deepen import Followup
from service.core.errors import Forbidden, Unauthorized
from service.core.model_watcher import ModelWatcher
from service.core.schemas import CompileRequest
from service.core.spool import Spool
from service.runners import RqRunner, ThreadRunner

__all__ = [
    "SettingsDep",
    "SessionDep",
    "SpoolDep",
    "BreakerDep",
    "CompilerDep",
    "VerifierDep",
    "BaselineDep",
    "CompileBody",
    "WatcherDep",
    "RunnerDep",
    "FactoryDep",
    "AdminDep",
    "get_settings",
    "get_session",
    "get_spool",
    "get_breaker",
    "get_compiler",
    "get_verifier",
    "get_baseline",
    "get_compile_request",
    "get_watcher",
    "get_runner",
    "get_session_factory",
    "require_admin",
    "get_slots",
    "SlotsDep",
    "AdmissionDep",
    "get_admission",
    "FollowupDep",
    "get_followup",
]


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def get_session(request: Request) -> Iterator[Session]:
    """A session per request; nothing connects until the route uses it."""
    with request.app.state.session_factory() as session:
        yield session


def get_spool(request: Request) -> Spool:
    return request.app.state.spool


def get_breaker(request: Request) -> DbBreaker:
    return request.app.state.db_breaker


def get_compiler(request: Request) -> Compiler:
    """The optimizer's entry point (`tasmopt.optimizer.compile`) bound to this process's
    candidate sources (the model watcher's `SourceSet`)."""
    from tasmopt.optimizer import compile as compile_tir  # imported on first use: heavy

    state = request.app.state
    watcher = getattr(state, "watcher", None)
    cache = getattr(state, "result_cache", None)
    pool = getattr(state, "compile_pool", None)
    run: Any = pool if pool is not None else compile_tir  # processes (embedded) or this one
    if watcher is None:
        return functools.partial(run, cache=cache)
    return functools.partial(run, sources=watcher.sources, cache=cache)


def get_followup(request: Request) -> Followup | None:
    """After-response work: result cache writes, deepening, spot checks (None in apps built
    without a lifespan)."""
    return getattr(request.app.state, "followup", None)


def get_verifier(request: Request) -> Verifier:
    """In-process `check_blocks`, or the RQ backend when REDIS_URL is set."""
    return request.app.state.verifier


def get_baseline() -> Callable[[list[Any], str | None], str]:
    """What to serve when the optimizer fails: the client's baseline, else our lowering."""
    from service.core.baseline import baseline_tasm

    return baseline_tasm


def get_session_factory(request: Request) -> sessionmaker[Session]:
    """For work that outlives the request (async jobs)."""
    return request.app.state.session_factory


def get_slots(request: Request) -> threading.Semaphore:
    """Admission control of compiles in this process (COMPILE_SLOTS)."""
    return request.app.state.compile_slots


def get_admission(request: Request) -> Admission:
    """Admission control of synchronous compiles (COMPILE_SLOTS + COMPILE_QUEUE)."""
    return request.app.state.admission


def get_watcher(request: Request) -> ModelWatcher:
    """The production-checkpoint watcher of this process."""
    return request.app.state.watcher


def get_runner(request: Request) -> ThreadRunner | RqRunner:
    """Where async jobs run: RQ when REDIS_URL is set, else the API's thread pool."""
    return request.app.state.runner


def require_admin(request: Request) -> str:
    """Check ``Authorization: Bearer <ADMIN_TOKEN>``; returns who acts (ADMIN_NAME).

    Raises:
        Unauthorized: no header, or not a bearer token (401).
        Forbidden: a wrong token, or ADMIN_TOKEN unset (403).
    """
    settings: Settings = request.app.state.settings
    header = request.headers.get("authorization")
    if settings.admin_token is None:
        raise Forbidden("admin endpoints are disabled: ADMIN_TOKEN is not set")
    if not header:
        raise Unauthorized("admin endpoint: send Authorization: Bearer <ADMIN_TOKEN>")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized(
            "admin endpoint: malformed Authorization header; expected 'Bearer <token>'"
        )
    expected = settings.admin_token.get_secret_value().encode()
    if not secrets.compare_digest(token.strip().encode(), expected):
        raise Forbidden("admin endpoint: wrong token")
    return settings.admin_name


async def get_compile_request(request: Request) -> CompileRequest:
    """Parse the body ourselves, for messages that name line/column and unknown fields."""
    check_media_type(request.headers.get("content-type"))
    body = await request.body()
    # parsed on a thread: a large body would hold the event loop (and /healthz) meanwhile
    return await anyio.to_thread.run_sync(parse_request, body)


SettingsDep = Annotated[Settings, Depends(get_settings)]
SessionDep = Annotated[Session, Depends(get_session)]
SpoolDep = Annotated[Spool, Depends(get_spool)]
BreakerDep = Annotated[DbBreaker, Depends(get_breaker)]
CompilerDep = Annotated[Compiler, Depends(get_compiler)]
VerifierDep = Annotated[Verifier, Depends(get_verifier)]
BaselineDep = Annotated[Callable[[list[Any], str | None], str], Depends(get_baseline)]
CompileBody = Annotated[CompileRequest, Depends(get_compile_request)]
FactoryDep = Annotated[sessionmaker[Session], Depends(get_session_factory)]
WatcherDep = Annotated[ModelWatcher, Depends(get_watcher)]
RunnerDep = Annotated[ThreadRunner | RqRunner, Depends(get_runner)]
AdminDep = Annotated[str, Depends(require_admin)]
SlotsDep = Annotated[threading.Semaphore, Depends(get_slots)]
AdmissionDep = Annotated[Admission, Depends(get_admission)]
FollowupDep = Annotated[Followup | None, Depends(get_followup)]
