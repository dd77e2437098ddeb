"""Background deepening with Redis: the API's `RqDeepener` and the workers' `deepen_job`.

The API submits deepening and spot-check payloads (`service.core.deepen`) to the RQ queue
``deepen``, which every worker drains after ``verify`` and ``compile``. A function is claimed
in Redis (``tasmopt:deepen:<kind>:<cache key>``, DEEPEN_CLAIM_S) when it is queued, so that
every API replica queues it once; a full queue (DEEPEN_QUEUE) drops new work. When Redis does
not answer, deepening is off for a cool-down and compiles go on without it.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from redis import Redis
from redis.exceptions import RedisError
from rq import get_current_job

from service.core.compiling import DbBreaker
from service.core.config import Settings
from service.core.deepen import CLAIM_WHILE_RUNNING, count_outcomes, replay_writer, run_payload
from service.core.result_cache import ResultCache
from worker.queue import DEEPEN_QUEUE, named_queue

__all__ = ["RqDeepener", "deepen_job", "CLAIM_PREFIX"]

log = logging.getLogger(__name__)

#: Redis key prefix of the claims.
CLAIM_PREFIX = "tasmopt:deepen:"


class RqDeepener:
    """`service.core.deepen.Deepener` on the RQ queue ``deepen``.

    Args:
        connection: Redis client (commands time out: `worker.queue.connect`).
        settings: DEEPEN_QUEUE, DEEPEN_CLAIM_S, DEEPEN_TIMEOUT_S.
        cooldown_s: seconds deepening stays off after Redis failed to answer.
    """

    def __init__(self, connection: Redis, settings: Settings, *, cooldown_s: float = 30.0):
        self._redis = connection
        self._settings = settings
        self._breaker = DbBreaker(cooldown_s=cooldown_s)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"RqDeepener(queue={DEEPEN_QUEUE!r})"

    def submit(self, payload: dict[str, Any]) -> str:
        if not self._breaker.allow():
            return "unavailable"
        kind = payload["kind"]
        try:
            with self._lock:
                q = named_queue(self._redis, DEEPEN_QUEUE)
                names = list(payload["functions"])
                claims = [f"{CLAIM_PREFIX}{kind}:{payload['functions'][n]}" for n in names]
                pipe = self._redis.pipeline()
                for claim in claims:
                    pipe.set(claim, 1, nx=True, ex=self._settings.deepen_claim_s)
                claimed = pipe.execute()
                fresh = {n: payload["functions"][n] for n, ok in zip(names, claimed) if ok}
                if not fresh:
                    return "duplicate"
                if q.count >= self._settings.deepen_queue:
                    self._redis.delete(*[c for c, ok in zip(claims, claimed) if ok])
                    return "full"
                q.enqueue(
                    "worker.deepen.deepen_job",
                    {**payload, "functions": fresh},
                    job_timeout=int(self._settings.deepen_timeout_s) + 60,
                    result_ttl=600,
                    failure_ttl=3600,
                )
            return "queued"
        except (RedisError, OSError) as exc:
            self._breaker.trip()
            log.warning("deepening is off for a while: Redis did not answer (%s)", exc)
            return "unavailable"


def deepen_job(payload: dict[str, Any]) -> dict[str, str]:
    """RQ entry point: one deepening or spot check (`service.core.deepen.run_payload`) with
    the worker's settings, database and production model.

    Returns:
        outcome per function (also counted in the worker's metrics).
    """
    from worker.compile import _worker_context

    ctx = _worker_context()
    if ctx.watcher is not None:
        ctx.watcher.refresh_if_due()
    outcomes = run_payload(
        payload,
        cache=ResultCache(ctx.session_factory),
        sources=ctx.watcher.sources if ctx.watcher is not None else None,
        settings=ctx.settings,
        replay=replay_writer(ctx.session_factory, ctx.spool, ctx.breaker),
    )
    count_outcomes(payload["kind"], outcomes)
    job = get_current_job()
    if payload["kind"] in CLAIM_WHILE_RUNNING and job is not None:  # claimed while it runs
        job.connection.delete(
            *[f"{CLAIM_PREFIX}{payload['kind']}:{k}" for k in payload["functions"].values()]
        )
    return outcomes
