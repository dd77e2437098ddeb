"""Async compiles (``POST /compile/jobs``): where they run and how their status is found.

A job is validated by the API (4xx at once), recorded in the `compile_jobs` table as
``queued``, then run by `compile_job` on the RQ ``compile`` queue (`RqRunner`) or, without
Redis, on a thread pool of the API process (`ThreadRunner`). Either way `execute` compiles
exactly like ``POST /compile`` (baseline served if the optimizer fails), and writes the
BuildResult rows and the job's final state (the response) in one transaction, or spools
both when the database is down. The response is also the RQ job's result, so a status is
answered from the database first and from Redis while the database lags; a result in the
database survives the loss of Redis.

RQ workers import this module by name (``service.jobs.compile_job``) and build their own
`JobContext` from `Settings` on first use.
"""

from __future__ import annotations

import functools
import logging
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from redis import Redis
from redis.exceptions import RedisError
from rq.exceptions import NoSuchJobError
from rq.job import Job, JobStatus, Retry
from rq.registry import StartedJobRegistry
from sqlalchemy.orm import Session, sessionmaker

from service import compiling
from service.core.config import Settings
from service.errors import CLIENT_ERRORS, ServiceError, error_code
from service.metrics import observe_compile
from service.model_watcher import ModelWatcher
from service.schemas import CompileRequest
from service.spool import Spool
from tasmopt.store import get_compile_job, save_compile_job
from worker.queue import COMPILE_QUEUE, named_queue

__all__ = [
    "JobContext",
    "JobView",
    "JobFailed",
    "record_status",
    "execute",
    "compile_job",
    "ThreadRunner",
    "RqRunner",
    "submit",
    "lookup",
]

log = logging.getLogger(__name__)

#: Finished thread-run jobs remembered in memory (their results are in the database).
_REMEMBERED = 1000


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


@dataclass
class JobView:
    """A job's status as `lookup` found it."""

    id: uuid.UUID
    status: str
    backend: str | None = None
    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    response: dict[str, Any] | None = None
    error: str | None = None


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
    except (ServiceError, *CLIENT_ERRORS, ValueError) as exc:
        code, message = error_code(exc)
        error = f"{code}: {message}"
        _finish_failed(ctx, job_id, backend, body, error)
        raise JobFailed(error) from None
    except Exception as exc:
        code, message = error_code(exc)
        _finish_failed(ctx, job_id, backend, body, f"{code}: {message}")
        raise

    def final(stored: str) -> dict[str, Any]:
        response = compiling.to_response(served, stored).model_dump(mode="json")  # type: ignore[arg-type]
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
            from service.baseline import baseline_tasm
            from service.core.db import engine_from_settings
            from tasmopt.optimizer import compile as compile_tir
            from tasmopt.store import make_sessionmaker
            from tasmopt.vm.equivalence import check_blocks

            settings = Settings()
            factory = make_sessionmaker(engine_from_settings(settings))
            watcher = ModelWatcher(
                session_factory=factory,
                model_store=settings.model_store,
                device=settings.model_device,
                poll_s=settings.model_poll_s,
            )
            _CONTEXT = JobContext(
                settings=settings,
                session_factory=factory,
                spool=Spool(settings.spool_dir),
                breaker=compiling.DbBreaker(cooldown_s=settings.spool_retry_s),
                compiler=functools.partial(compile_tir, sources=watcher.sources),
                verify=check_blocks,
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


# -- runners (in the API process) ---------------------------------------------------------------


class ThreadRunner:
    """Runs jobs on a thread pool of the API process (no Redis). Statuses of recent jobs are
    kept in memory; results go to the database (or the spool) like RQ jobs.

    Args:
        threads: pool size (ASYNC_THREADS).
    """

    backend = "thread"

    def __init__(self, threads: int) -> None:
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="compile-job")
        self._jobs: OrderedDict[uuid.UUID, tuple[Future, list[str]]] = OrderedDict()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"ThreadRunner(threads={self.pool._max_workers})"

    def submit(self, job_id: uuid.UUID, fn: Callable[[], Any]) -> str:
        """Queue ``fn()`` under `job_id`; returns the backend name."""
        state = ["queued"]

        def run() -> Any:
            state[0] = "started"
            return fn()

        future = self.pool.submit(run)
        with self._lock:
            self._jobs[job_id] = (future, state)
            while len(self._jobs) > _REMEMBERED:
                self._jobs.popitem(last=False)
        return self.backend

    def pending(self) -> int:
        """Jobs submitted and not started yet."""
        with self._lock:
            return sum(1 for _f, s in self._jobs.values() if s[0] == "queued")

    def view(self, job_id: uuid.UUID) -> JobView | None:
        with self._lock:
            entry = self._jobs.get(job_id)
        if entry is None:
            return None
        future, state = entry
        if not future.done():
            return JobView(job_id, state[0], self.backend)
        exc = future.exception()
        if exc is not None:
            error = str(exc) if isinstance(exc, JobFailed) else ": ".join(error_code(exc))
            return JobView(job_id, "failed", self.backend, error=error)
        result = future.result()
        return JobView(
            job_id, "finished", self.backend, response=result if isinstance(result, dict) else None
        )

    def shutdown(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=False)


class RqRunner:
    """Enqueues jobs on the RQ ``compile`` queue; falls back to `fallback` (a
    `ThreadRunner`) while Redis is unreachable.

    Args:
        connection: Redis client of the API.
        settings: job timeout, retries and result TTL.
        fallback: where jobs run when Redis refuses them.
    """

    backend = "rq"

    def __init__(self, connection: Redis, settings: Settings, fallback: ThreadRunner) -> None:
        self.connection = connection
        self.settings = settings
        self.fallback = fallback
        self.queue = named_queue(connection, COMPILE_QUEUE)

    def __repr__(self) -> str:
        return f"RqRunner(queue={self.queue.name!r})"

    def enqueue(self, job_id: uuid.UUID, body: dict[str, Any]) -> None:
        """Enqueue `service.jobs.compile_job`.

        Raises:
            RedisError: Redis is unreachable.
        """
        s = self.settings
        retry = Retry(max=s.compile_job_retries) if s.compile_job_retries else None
        self.queue.enqueue(
            "service.jobs.compile_job",
            args=(str(job_id), body),
            job_id=str(job_id),
            job_timeout=s.compile_job_timeout_s,
            result_ttl=s.job_result_ttl_s,
            failure_ttl=s.job_result_ttl_s,
            retry=retry,
            description=f"compile {job_id}",
        )

    def view(self, job_id: uuid.UUID) -> JobView | None:
        """The job as Redis knows it (None if unknown, or Redis unreachable)."""
        local = self.fallback.view(job_id)
        if local is not None:
            return local
        try:
            job = Job.fetch(
                str(job_id), connection=self.connection, serializer=self.queue.serializer
            )
            status = job.get_status(refresh=False)
            if status == JobStatus.STARTED:  # a dead worker's job: retry or fail it now
                StartedJobRegistry(queue=self.queue).cleanup()
                status = job.get_status(refresh=True)
        except NoSuchJobError:
            return None
        except RedisError as exc:
            log.debug("job %s: Redis unavailable (%s)", job_id, exc)
            return None
        view = JobView(
            job_id,
            "queued",
            self.backend,
            created_at=job.created_at,
            started_at=job.started_at,
            finished_at=job.ended_at,
        )
        if status == JobStatus.FINISHED:
            view.status = "finished"
            value = job.return_value(refresh=True)
            view.response = value if isinstance(value, dict) else None
        elif status in (JobStatus.FAILED, JobStatus.STOPPED, JobStatus.CANCELED):
            view.status = "failed"
            view.error = _rq_error(job)
        elif status == JobStatus.STARTED:
            view.status = "started"
        return view


def _rq_error(job: Job) -> str:
    latest = job.latest_result()
    text = (latest.exc_string if latest is not None else None) or ""
    last = [ln for ln in text.strip().splitlines() if ln.strip()]
    line = last[-1] if last else "failed"
    prefix = f"{JobFailed.__module__}.{JobFailed.__name__}: "
    if line.startswith(prefix):
        return line[len(prefix) :]
    if "AbandonedJobError" in text or "Moved to FailedJobRegistry" in text:
        return "internal_error: the worker running the job died"
    return f"internal_error: {line[:300]}"


def submit(
    job_id: uuid.UUID, body: dict[str, Any], ctx: JobContext, runner: ThreadRunner | RqRunner
) -> str:
    """Record the job as queued and hand it to `runner` (the thread pool if Redis refuses it).

    Returns:
        The backend that took it: ``rq`` or ``thread``.
    """
    record_status(ctx, job_id, runner.backend, body, "queued")
    if isinstance(runner, RqRunner):
        try:
            runner.enqueue(job_id, body)
            return "rq"
        except RedisError as exc:
            log.warning("Redis unavailable (%s); job %s runs in the API process", exc, job_id)
            runner = runner.fallback
    runner.submit(job_id, lambda: execute(job_id, body, ctx, backend="thread"))
    return "thread"


def lookup(
    job_id: uuid.UUID, *, session_factory: sessionmaker[Session], runner: ThreadRunner | RqRunner
) -> JobView | None:
    """Find a job: the database first (final states), then the runner (in-flight states and
    results the database does not have yet; those are written back to the database).

    Returns:
        The job, or None if nobody knows it.

    Raises:
        ServiceError (503): neither the database nor the runner could be asked.
    """
    row_view: JobView | None = None
    db_ok = True
    try:
        with session_factory() as session:
            row = get_compile_job(session, id=job_id)
            if row is not None:
                row_view = JobView(
                    row.id,
                    row.status,
                    row.backend,
                    row.created_at,
                    row.started_at,
                    row.finished_at,
                    row.response,
                    row.error,
                )
    except Exception as exc:
        db_ok = False
        log.warning("job %s: database unavailable (%s)", job_id, str(exc).splitlines()[0][:200])
    if row_view is not None and row_view.status in ("finished", "failed"):
        return row_view
    live = runner.view(job_id)
    if live is None:
        if row_view is None and not db_ok:
            from service.errors import Unavailable

            raise Unavailable("job status unavailable: the database cannot be reached")
        return row_view
    if row_view is not None:  # keep the database's timestamps where Redis has none
        live.created_at = live.created_at or row_view.created_at
        live.started_at = live.started_at or row_view.started_at
    if live.status in ("finished", "failed") and db_ok:
        _write_back(session_factory, live)
    return live


def _write_back(session_factory: sessionmaker[Session], view: JobView) -> None:
    if view.status == "finished" and view.response is None:
        return
    try:
        with session_factory() as session, session.begin():
            row = get_compile_job(session, id=view.id)
            save_compile_job(
                session,
                id=view.id,
                status=view.status,
                backend=view.backend or "rq",
                request=row.request if row is not None else {},
                response=view.response,
                error=view.error,
                at=view.finished_at,
            )
    except Exception as exc:
        log.warning(
            "job %s: could not store the result (%s)", view.id, str(exc).splitlines()[0][:200]
        )
