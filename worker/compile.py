"""The async compile job (``POST /compile/jobs``): what a worker runs.

`execute` compiles exactly like ``POST /compile`` (`service.core.compiling`: the baseline is
served if the optimizer fails) and writes the BuildResult rows and the job's final state (the
response) in one transaction, or spools both when the database is down. It runs in an RQ
worker as `compile_job` (queue ``compile``; the worker builds its `JobContext` from `Settings`
on first use) or, without Redis, on the API's thread pool (`service.runners.ThreadRunner`).
"""

from __future__ import annotations

import functools
import logging
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from service.core import compiling
from service.core.config import Settings
from service.core.deepen import Followup
from service.core.errors import CLIENT_ERRORS, ServiceError, error_code
from service.core.metrics import observe_compile
from service.core.model_watcher import ModelWatcher
from service.core.schemas import CompileRequest
from service.core.spool import Spool
from tasmopt.store import save_compile_job
from worker.verifier import verifier_from_settings

__all__ = ["JobContext", "JobFailed", "record_status", "execute", "compile_job"]

log = logging.getLogger(__name__)


class JobFailed(Exception):
    """The job's request was refused (a client error found while compiling)."""


@dataclass
class JobContext:
    """What `execute` needs: the same pieces as ``POST /compile``."""

    settings: Settings
    session_factory: sessionmaker[Session]
    spool: Spool
    breaker: compiling.DbBreaker
    compiler: compiling.Compiler
    verify: compiling.Verifier
    baseline: Callable[[list[Any], str | None], str]
    watcher: ModelWatcher | None = None
    slots: threading.Semaphore | None = None
    followup: Followup | None = None


def record_status(
    ctx: JobContext,
    job_id: uuid.UUID,
    backend: str,
    body: dict[str, Any],
    status: str,
    error: str | None = None,
) -> None:
    """Best-effort status write of a job (a failure here never fails the job)."""
    if not ctx.breaker.allow():
        return
    try:
        with ctx.session_factory() as session, session.begin():
            save_compile_job(
                session, id=job_id, status=status, backend=backend, request=body, error=error
            )
    except Exception as exc:
        log.warning(
            "job %s: could not record status %s (%s)",
            job_id,
            status,
            str(exc).splitlines()[0][:200],
        )


def execute(
    job_id: uuid.UUID, body: dict[str, Any], ctx: JobContext, *, backend: str
) -> dict[str, Any]:
    """Run one async compile and store its result.

    Args:
        job_id: also the request id of the BuildResult rows.
        body: the request as submitted (already validated by the API).
        backend: ``rq`` or ``thread`` (recorded with the job).

    Returns:
        The `CompileResponse` as JSON.

    Raises:
        JobFailed: the request is refused (``code: message``); recorded as failed.
        Exception: not even the baseline could be served; recorded as failed.
    """
    record_status(ctx, job_id, backend, body, "started")
    if ctx.watcher is not None:
        ctx.watcher.refresh_if_due()
    if ctx.spool.files() and ctx.breaker.allow():  # a worker drains what it spooled earlier
        try:
            ctx.spool.drain(ctx.session_factory)
        except Exception:
            log.exception("spool drain failed; will retry")
    try:
        req = CompileRequest.model_validate(body)
        served = compiling.serve(
            req,
            request_id=job_id,
            compiler=ctx.compiler,
            verify=ctx.verify,
            settings=ctx.settings,
            baseline=ctx.baseline,
            slots=ctx.slots,
        )
    except (ServiceError, ValueError, *CLIENT_ERRORS) as exc:  # type: ignore[misc]  # CLIENT_ERRORS: exception classes
        code, message = error_code(exc)
        error = f"{code}: {message}"
        _finish_failed(ctx, job_id, backend, body, error)
        raise JobFailed(error) from None
    except Exception as exc:
        code, message = error_code(exc)
        _finish_failed(ctx, job_id, backend, body, f"{code}: {message}")
        raise

    def final(stored: str) -> dict[str, Any]:
        response = compiling.to_response(served, stored).model_dump(mode="json")  # type: ignore[arg-type]  # serve() returns a result on this path (it raised otherwise)
        return {
            "id": job_id,
            "status": "finished",
            "backend": backend,
            "request": body,
            "response": response,
            "at": datetime.now(UTC),
        }

    with ctx.session_factory() as session:
        stored = compiling.persist(
            served.rows, session=session, spool=ctx.spool, breaker=ctx.breaker, job=final
        )
    if ctx.followup is not None:
        ctx.followup.after_compile(req, served.result)
    observe_compile(
        result=served.result,
        timings=served.timings,
        rows=len(served.rows),
        stored=stored,
        mode="async",
    )
    return final(stored)["response"]


def _finish_failed(
    ctx: JobContext, job_id: uuid.UUID, backend: str, body: dict[str, Any], error: str
) -> None:
    job = {
        "id": job_id,
        "status": "failed",
        "backend": backend,
        "request": body,
        "error": error,
        "at": datetime.now(UTC),
    }
    with ctx.session_factory() as session:
        compiling.persist(
            [], session=session, spool=ctx.spool, breaker=ctx.breaker, job=lambda _stored: dict(job)
        )


# -- the RQ job (runs in a worker process) ------------------------------------------------------

_CONTEXT: JobContext | None = None
_CONTEXT_LOCK = threading.Lock()


def _worker_context() -> JobContext:
    global _CONTEXT
    with _CONTEXT_LOCK:
        if _CONTEXT is None:
            from service.core.baseline import baseline_tasm
            from service.core.db import engine_from_settings
            from service.core.result_cache import ResultCache
            from tasmopt.optimizer import compile as compile_tir
            from tasmopt.store import make_sessionmaker
            from worker.deepen import RqDeepener
            from worker.queue import connect

            settings = Settings()
            factory = make_sessionmaker(engine_from_settings(settings))
            watcher = ModelWatcher.from_settings(settings, factory)
            cache = ResultCache(factory) if settings.result_cache else None
            deepener = (
                RqDeepener(connect(settings.redis_url), settings)
                if settings.redis_url and settings.deepen and cache is not None
                else None
            )
            _CONTEXT = JobContext(
                settings=settings,
                session_factory=factory,
                spool=Spool(settings.spool_dir),
                breaker=compiling.DbBreaker(cooldown_s=settings.spool_retry_s),
                compiler=functools.partial(compile_tir, sources=watcher.sources, cache=cache),
                followup=Followup(settings, cache, deepener),
                # a worker verifies in its own process (it is one of the verifiers)
                verify=verifier_from_settings(settings, in_process=True)[1],
                baseline=baseline_tasm,
                watcher=watcher,
            )
        return _CONTEXT


def compile_job(job_id: str, body: dict[str, Any]) -> dict[str, Any]:
    """RQ entry point of an async compile (settings from the worker's environment).

    Returns:
        The `CompileResponse` as JSON (also stored in the database).

    Raises:
        JobFailed: the request is refused; the job ends failed.
    """
    return execute(uuid.UUID(job_id), body, _worker_context(), backend="rq")
