"""Prometheus metrics of an RQ worker process, served on its own port.

Each worker process runs `start_metrics_server` (``tasmopt worker --metrics-port``; default
WORKER_METRICS_PORT=9100): in docker compose every replica has its own address, and
Prometheus finds them all through DNS (``deploy/prometheus.yml``). Job metrics are recorded by
`MeteredWorkerMixin` in the worker's main process around ``execute_job``, so they also count
jobs run in a forked child (``--fork``) and jobs whose child died.
"""

from __future__ import annotations

import logging
import time

from prometheus_client import Counter, Histogram, start_http_server
from rq import SimpleWorker, Worker
from rq.job import Job, JobStatus
from rq.queue import Queue

from worker.queue import QUEUES
from worker.reaper import Liveness

__all__ = [
    "JOB_SECONDS",
    "JOB_FAILURES",
    "FINETUNE_RUNS",
    "GUARD_REJECTIONS",
    "FINETUNE_OUTCOMES",
    "MeteredWorkerMixin",
    "MeteredSimpleWorker",
    "MeteredWorker",
    "start_metrics_server",
]

log = logging.getLogger(__name__)

#: Outcomes of `worker.jobs.finetune_job` (see `tasmopt.store.FinetuneRun`).
FINETUNE_OUTCOMES = (
    "no_new_results",
    "waiting",
    "learning_unavailable",
    "candidate",
    "rejected",
    "failed",
)

JOB_SECONDS = Histogram(
    "tasmopt_worker_job_duration_seconds",
    "Seconds a worker spent on a job, by queue.",
    ["queue"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0),
)
JOB_FAILURES = Counter(
    "tasmopt_worker_job_failures_total",
    "Jobs that ended failed (raised, timed out, or their work horse died), by queue.",
    ["queue"],
)
FINETUNE_RUNS = Counter(
    "tasmopt_finetune_runs_total",
    "Runs of the finetune check, by outcome: no_new_results, "
    "waiting (below the trigger), learning_unavailable, candidate (passed the guard), "
    "rejected (by the guard), failed.",
    ["outcome"],
)
GUARD_REJECTIONS = Counter(
    "tasmopt_guard_rejections_total",
    "Finetuned checkpoints the regression guard rejected "
    "(validity dropped more than 2 points, design §4).",
)

for _q in QUEUES:
    JOB_SECONDS.labels(_q)
    JOB_FAILURES.labels(_q)
for _o in FINETUNE_OUTCOMES:
    FINETUNE_RUNS.labels(_o)


class MeteredWorkerMixin:
    """Times every job and counts failures, from the worker's main process, and keeps the
    worker's liveness key (`worker.reaper.Liveness`) while it lives."""

    _liveness: Liveness | None = None

    def register_birth(self) -> None:
        super().register_birth()  # type: ignore[misc]  # rq's Worker/SimpleWorker mixin: register_birth exists on the concrete base
        self._liveness = Liveness(self.connection, self.name)  # type: ignore[attr-defined]  # rq's Worker attributes
        self._liveness.start()

    def register_death(self) -> None:
        if self._liveness is not None:
            self._liveness.stop()
        super().register_death()  # type: ignore[misc]  # rq's Worker/SimpleWorker mixin: register_death exists on the concrete base

    def execute_job(self, job: Job, queue: Queue) -> None:
        start = time.perf_counter()
        try:
            super().execute_job(job, queue)  # type: ignore[misc]  # rq's Worker/SimpleWorker mixin: execute_job exists on the concrete base
        finally:
            JOB_SECONDS.labels(queue.name).observe(time.perf_counter() - start)
            try:
                if job.get_status(refresh=True) in (JobStatus.FAILED, JobStatus.STOPPED):
                    JOB_FAILURES.labels(queue.name).inc()
            except Exception as exc:  # the job may have expired already
                log.debug("job %s: status unknown after execution (%s)", job.id, exc)


class MeteredSimpleWorker(MeteredWorkerMixin, SimpleWorker):
    """`rq.SimpleWorker` (jobs in the worker's process) with job metrics."""


class MeteredWorker(MeteredWorkerMixin, Worker):
    """`rq.Worker` (a forked child per job) with job metrics."""


def start_metrics_server(port: int, addr: str = "0.0.0.0") -> int:
    """Serve ``/metrics`` of this process on `port` (0: a free port); returns the port."""
    server, _thread = start_http_server(port, addr=addr)
    bound = server.server_address[1]
    log.info("worker metrics on %s:%d/metrics", addr, bound)
    return bound
