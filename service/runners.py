"""Async compiles (``POST /compile/jobs``): where they run and how their status is found.

A job is validated by the API (4xx at once), recorded in the `compile_jobs` table as
``queued``, then run by the worker's `worker.compile.compile_job` on the RQ ``compile`` queue
(`RqRunner`) or, without Redis, by `worker.compile.execute` on a thread pool of the API
process (`ThreadRunner`). The response is also the RQ job's result, so a status is answered
from the database first and from Redis while the database lags; a result in the database
survives the loss of Redis.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from redis import Redis
from redis.exceptions import RedisError
from rq.exceptions import NoSuchJobError
from rq.job import Job, JobStatus, Retry
from rq.registry import StartedJobRegistry
from sqlalchemy.orm import Session, sessionmaker

from service.core.config import Settings
from service.core.errors import error_code
from tasmopt.store import get_compile_job, save_compile_job
from worker.compile import JobContext, JobFailed, execute, record_status
from worker.queue import COMPILE_QUEUE, named_queue

__all__ = [
    "JobView",
    "ThreadRunner",
    "RqRunner",
    "submit",
    "lookup",
]

log = logging.getLogger(__name__)

#: Finished thread-run jobs remembered in memory (their results are in the database).
_REMEMBERED = 1000


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
        """Enqueue `worker.compile.compile_job`.

        Raises:
            RedisError: Redis is unreachable.
        """
        s = self.settings
        retry = Retry(max=s.compile_job_retries) if s.compile_job_retries else None
        self.queue.enqueue(
            "worker.compile.compile_job",
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
            from service.core.errors import Unavailable

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
