"""The verify backend the API uses when Redis is configured: checks run on the RQ pool.

`RqVerifier` has the shape the optimizer expects (``list[BlockCheck] -> list[Verdict]``).
It splits the checks into at most `max_jobs` jobs, enqueues them on the ``verify`` queue
and waits. Jobs not finished by the (soft) deadline, jobs that failed, and every job when
Redis is unreachable are checked in-process instead; once the hard deadline has passed, the
checks still pending are reported as unverified, which makes the optimizer keep the baseline.
Both deadlines count from the start of one call.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

from redis import Redis
from redis.exceptions import RedisError
from rq.job import Job, JobStatus

from service.core.config import Settings
from tasmopt.deadline import Deadline
from tasmopt.vm.equivalence import BlockCheck, Verdict, check_blocks
from worker.queue import VERIFY_QUEUE, verify_queue

__all__ = ["RqVerifier", "unverified", "verifier_from_settings", "Verifier"]

#: A verify backend: ``list[BlockCheck] -> list[Verdict]`` (what the optimizer calls).
Verifier = Callable[[list[BlockCheck]], list[Verdict]]

log = logging.getLogger(__name__)

#: Longest pause between two looks at the job statuses, seconds.
MAX_POLL_S = 0.02


def unverified(reason: str) -> Verdict:
    """The verdict of a check that was not run: not equivalent, so the baseline is kept."""
    return Verdict(equivalent=False, method="rejected", reason=f"unverified: {reason}")


class RqVerifier:
    """Verify backend over an RQ queue, with an in-process fallback.

    Args:
        connection: Redis client (see `worker.queue.connect`).
        deadline_s: seconds to wait for the workers before checking in-process.
        hard_deadline_s: seconds after which pending checks are reported unverified.
        max_jobs: most RQ jobs one call is split into (about twice the number of workers:
            each job costs a queue round trip, so a few big jobs beat many small ones).
        local: the in-process checker (default `tasmopt.vm.equivalence.check_blocks`).
        queue_name: RQ queue to enqueue on.
        help_while_waiting: instead of idling while jobs wait, take the last job still
            queued back (cancelled) and check it in-process, one at a time: the workers
            drain the queue from the front, this process from the back. Without it a request
            under a 200 ms deadline got nothing verified whenever the workers were busy
            deepening (the cold answers of `benchmarks/latency.py --workers` saved 0 cycles).

    Raises (on call):
        Whatever `local` raises for a check it cannot run; Redis errors never escape.
    """

    #: It keeps its own deadlines (VERIFY_DEADLINE_S, VERIFY_HARD_DEADLINE_S) and honours the
    #: request's (`__call__`'s ``deadline``): the optimizer calls it once per compile instead
    #: of in deadline-checked chunks.
    bounded = True

    def __init__(
        self,
        connection: Redis,
        *,
        deadline_s: float = 5.0,
        hard_deadline_s: float = 30.0,
        max_jobs: int = 8,
        local: Callable[[list[BlockCheck]], list[Verdict]] = check_blocks,
        queue_name: str = VERIFY_QUEUE,
        help_while_waiting: bool = True,
    ) -> None:
        if hard_deadline_s < deadline_s:
            raise ValueError("hard_deadline_s must be >= deadline_s")
        self.connection = connection
        self.deadline_s = deadline_s
        self.hard_deadline_s = hard_deadline_s
        self.max_jobs = max(1, max_jobs)
        self.local = local
        self.queue = verify_queue(connection, queue_name)
        self.help_while_waiting = help_while_waiting

    def __repr__(self) -> str:
        return (
            f"RqVerifier(queue={self.queue.name!r}, max_jobs={self.max_jobs}, "
            f"deadline_s={self.deadline_s}, hard_deadline_s={self.hard_deadline_s})"
        )

    def __call__(self, checks: list[BlockCheck], deadline: Deadline | None = None) -> list[Verdict]:
        """Verdicts of ``checks``, in order. ``deadline``: the request's; no check waits or
        runs past it (those left are answered unverified, their queued jobs cancelled)."""
        start = time.monotonic()
        soft, hard = start + self.deadline_s, start + self.hard_deadline_s
        if deadline is not None:
            soft, hard = min(soft, deadline.at), min(hard, deadline.at)
        n = max(1, math.ceil(len(checks) / self.max_jobs))
        chunks = [list(checks[i : i + n]) for i in range(0, len(checks), n)]
        results: list[list[Verdict] | None] = [None] * len(chunks)
        jobs = self._enqueue(chunks)
        local: list[int] = [] if jobs is not None else list(range(len(chunks)))
        cancelled = jobs is None
        pause = 0.001
        while any(r is None for r in results):
            if jobs is not None:
                try:
                    local += self._collect(jobs, results, local)
                except RedisError as exc:
                    log.warning("lost Redis while waiting (%s); checking in-process", exc)
                    jobs = None
            waiting = [i for i, r in enumerate(results) if r is None and i not in local]
            if waiting and (jobs is None or time.monotonic() >= soft):
                if not cancelled and jobs is not None:
                    self._cancel([jobs[i] for i in waiting])
                    cancelled = True
                local += waiting
            todo = [i for i in local if results[i] is None]
            if todo:  # one chunk at a time, then look at the queue again
                i = todo[0]
                late = deadline is not None and deadline.expired
                if late or time.monotonic() >= hard:
                    if not cancelled and jobs is not None:  # nobody waits for them any more
                        self._cancel([jobs[k] for k, r in enumerate(results) if r is None])
                        cancelled = True
                    reason = (
                        f"request {deadline.why() if deadline is not None else 'deadline'} "
                        "before the check ran"
                        if late
                        else f"verification deadline ({self.hard_deadline_s:g} s) passed"
                    )
                    results[i] = [unverified(reason) for _ in chunks[i]]
                else:
                    results[i] = self.local(chunks[i])
            elif any(r is None for r in results):
                queued = self._queued(jobs, results, local) if self.help_while_waiting else []
                if queued:  # work instead of waiting: the last job nobody has started
                    local.append(queued[-1])
                else:
                    time.sleep(min(pause, max(0.0, soft - time.monotonic())))
                    pause = min(pause * 2, MAX_POLL_S)
        if local:
            log.info("%d of %d verify job(s) checked in-process", len(set(local)), len(chunks))
        return [v for chunk in results for v in chunk]  # type: ignore[union-attr]  # every slot was filled above (in-process fallback)

    # -- steps -------------------------------------------------------------------------------

    def _enqueue(self, chunks: list[list[BlockCheck]]) -> list[Job] | None:
        if not chunks:
            return []
        ttl = math.ceil(self.hard_deadline_s)  # nobody waits longer: drop it from the queue
        datas = [
            self.queue.prepare_data(
                "worker.jobs.check_blocks_job",
                args=([c.to_dict() for c in chunk],),
                timeout=ttl + 30,
                ttl=ttl,
                result_ttl=ttl + 30,
                failure_ttl=ttl + 30,
                description=f"verify {len(chunk)} block(s)",
            )
            for chunk in chunks
        ]
        try:
            return self.queue.enqueue_many(datas)
        except RedisError as exc:
            log.warning("Redis unavailable (%s); verifying %d job(s) in-process", exc, len(chunks))
            return None

    def _collect(
        self, jobs: list[Job], results: list[list[Verdict] | None], local: list[int]
    ) -> list[int]:
        """Take the results of finished jobs; return the indices of jobs that ended otherwise."""
        pending = [i for i, r in enumerate(results) if r is None and i not in local]
        if not pending:
            return []
        pipe = self.connection.pipeline(transaction=False)
        for i in pending:
            pipe.hget(jobs[i].key, "status")
        ended: list[int] = []
        for i, raw in zip(pending, pipe.execute(), strict=True):
            status = raw.decode() if isinstance(raw, bytes) else raw
            if status == JobStatus.FINISHED:
                value = jobs[i].return_value(refresh=True)
                if value is not None:
                    results[i] = [Verdict.from_dict(d) for d in value]
                    continue
                ended.append(i)
            elif status in (JobStatus.FAILED, JobStatus.STOPPED, None):
                log.warning(
                    "verify job %s ended %s; checking in-process", jobs[i].id, status or "expired"
                )
                ended.append(i)
        return ended

    def _queued(
        self, jobs: list[Job] | None, results: list[list[Verdict] | None], local: list[int]
    ) -> list[int]:
        """Indices of jobs still waiting in the queue, taken out of it (cancelled): a worker
        can no longer start them. A job a worker started meanwhile is left to it."""
        if jobs is None:
            return []
        out: list[int] = []
        for i in reversed(range(len(jobs))):
            if results[i] is not None or i in local:
                continue
            try:
                if jobs[i].get_status(refresh=True) != JobStatus.QUEUED:
                    continue
                jobs[i].cancel()
            except RedisError:
                return out
            except Exception as exc:  # rq raises InvalidJobOperation on a race: a worker won
                log.debug("could not take back %s: %s", jobs[i].id, exc)
                continue
            out.append(i)
            break  # one at a time: the workers may free up meanwhile
        return out

    def _cancel(self, jobs: list[Job]) -> None:
        # Queued jobs leave the queue; started ones run on, and their result is still used if
        # it arrives before the local check of that chunk starts.
        for job in jobs:
            try:
                if job.get_status(refresh=True) == JobStatus.QUEUED:
                    job.cancel()
            except RedisError:
                return
            except Exception as exc:  # rq raises InvalidJobOperation on a race; harmless
                log.debug("could not cancel %s: %s", job.id, exc)


def verifier_from_settings(
    settings: Settings, *, in_process: bool = False
) -> tuple[Redis | None, Verifier]:
    """The one place that picks the verify backend: in-process `check_blocks` without
    REDIS_URL (or when ``in_process``, as in a worker, which is itself a verifier), else an
    `RqVerifier` over the ``verify`` queue with the settings' deadlines.

    Returns:
        (the Redis connection it opened or None, the backend).
    """
    if in_process or not settings.redis_url:
        return None, check_blocks
    from worker.queue import connect

    conn = connect(settings.redis_url)
    return conn, RqVerifier(
        conn,
        deadline_s=settings.verify_deadline_s,
        hard_deadline_s=settings.verify_hard_deadline_s,
        max_jobs=settings.verify_max_jobs,
        help_while_waiting=settings.verify_help,
    )
