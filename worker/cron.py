"""The schedule of the learning loop: an RQ cron scheduler (``tasmopt scheduler``) that
enqueues `worker.jobs.finetune_job` on the ``learn`` queue (design §1, §5).

RQ's `CronScheduler` enqueues with RQ's default (pickle) serializer; `JsonCronScheduler`
enqueues with the JSON serializer every tasmopt worker uses (`worker.queue.SERIALIZER`), so
no pickle crosses Redis and the same workers run the jobs.
"""

from __future__ import annotations

import logging
from typing import Any

from redis import Redis
from rq.cron import CronJob, CronScheduler
from rq.cron_job_registry import add as registry_add
from rq.defaults import DEFAULT_CRON_JOB_HISTORY_LIMIT, DEFAULT_CRON_JOB_HISTORY_TTL
from rq.job import Job

from worker.jobs import finetune_job
from worker.queue import LEARN_QUEUE, named_queue

__all__ = ["JsonCronJob", "JsonCronScheduler", "build_scheduler", "FINETUNE_CRON_NAME"]

log = logging.getLogger(__name__)

#: Name of the cron entry (and of its job history in Redis).
FINETUNE_CRON_NAME = "tasmopt-finetune"


class JsonCronJob(CronJob):
    """A `CronJob` whose jobs are serialized as JSON."""

    def enqueue(self, connection: Redis) -> Job:
        if not self.func:
            raise ValueError("CronJob has no function to enqueue")
        queue = named_queue(connection, self.queue_name)
        with connection.pipeline() as pipeline:
            job = queue.enqueue(
                self.func, args=self.args, kwargs=self.kwargs, **self.job_options, pipeline=pipeline
            )
            assert job.enqueued_at is not None
            pipeline.zadd(self.job_history_key, {job.id: job.enqueued_at.timestamp()})
            pipeline.zremrangebyrank(self.job_history_key, 0, -(DEFAULT_CRON_JOB_HISTORY_LIMIT + 1))
            pipeline.expire(self.job_history_key, DEFAULT_CRON_JOB_HISTORY_TTL)
            registry_add(self.name, pipeline, enqueue_timestamp=job.enqueued_at.timestamp())
            pipeline.execute()
        log.info("enqueued %s on %s", self.func_name, self.queue_name)
        return job


class JsonCronScheduler(CronScheduler):
    """`CronScheduler` that registers `JsonCronJob`s."""

    def register(self, func: Any, queue_name: str, **kwargs: Any) -> CronJob:  # type: ignore[override]  # rq's CronScheduler.register signature, with our defaults
        job = JsonCronJob(queue_name=queue_name, func=func, **kwargs)
        self._cron_jobs.append(job)
        log.info(
            "registered %s on %s (%s)",
            job.func_name,
            queue_name,
            f"cron {job.cron!r}" if job.cron else f"every {job.interval} s",
        )
        return job


def build_scheduler(
    connection: Redis,
    *,
    cron: str | None = None,
    interval_s: int | None = None,
    min_results: int,
    max_age_h: float,
) -> JsonCronScheduler:
    """The scheduler with the finetune check registered.

    Args:
        cron: cron expression (FINETUNE_CRON), or
        interval_s: a period in seconds instead (tests, demos).
        min_results, max_age_h: the finetune trigger (design §4 Stage 3).

    Raises:
        ValueError: neither or both of `cron` and `interval_s`.
    """
    scheduler = JsonCronScheduler(connection=connection, logging_level="WARNING")
    scheduler.register(
        finetune_job,
        LEARN_QUEUE,
        kwargs={"trigger": "cron", "min_results": min_results, "max_age_h": max_age_h},
        cron=None if interval_s else cron,
        interval=interval_s,
        job_timeout=3600,
        result_ttl=86400,
        name=FINETUNE_CRON_NAME,
    )
    return scheduler
