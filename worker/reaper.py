"""Fast recovery of jobs whose worker died (``kill -9``, an OOM kill, a lost machine).

RQ notices an abandoned job only once its registry entry expires (the job timeout, 300 s for
compiles) and a maintenance pass runs, about 400 s in all. Our workers also keep a short-lived
liveness key in Redis (`ALIVE_TTL_S`, refreshed every `ALIVE_EVERY_S` by a thread of the worker
process, `Liveness`); the API runs `reap` every few seconds: a started job whose worker is one
of ours and whose liveness key has expired is handed to RQ's own abandoned-job handling (retry
if it has retries left, else failed) at once. A job is idempotent by its id (the request id:
stored rows are keyed by it), so a retry never duplicates a result.
"""

from __future__ import annotations

import logging
import threading

from redis import Redis
from rq import Queue
from rq.job import Job
from rq.registry import StartedJobRegistry
from rq.serializers import JSONSerializer

__all__ = ["ALIVE_TTL_S", "ALIVE_EVERY_S", "Liveness", "reap"]

log = logging.getLogger(__name__)

#: Seconds a worker's liveness key lives without a refresh.
ALIVE_TTL_S = 10
#: Seconds between two refreshes.
ALIVE_EVERY_S = 3.0
_ALIVE = "tasmopt:alive:"
#: Names of the workers that keep a liveness key (others are left to RQ's own timeout).
_KEEPERS = "tasmopt:alive-keepers"


class Liveness:
    """A daemon thread that refreshes this worker's liveness key until `stop`."""

    def __init__(self, connection: Redis, name: str) -> None:
        self.connection, self.name = connection, name
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="liveness", daemon=True)

    def start(self) -> None:
        self.connection.sadd(_KEEPERS, self.name)
        self._beat()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        try:
            self.connection.delete(_ALIVE + self.name)
        except Exception as exc:  # Redis gone: the key expires by itself
            log.debug("liveness key of %s not deleted: %s", self.name, exc)

    def _beat(self) -> None:
        self.connection.set(_ALIVE + self.name, "1", ex=ALIVE_TTL_S)

    def _run(self) -> None:
        while not self._stop.wait(ALIVE_EVERY_S):
            try:
                self._beat()
            except Exception as exc:  # Redis down for a moment: try again next time
                log.warning("liveness key of %s not refreshed: %s", self.name, exc)


def reap(connection: Redis, queue_names: list[str] | tuple[str, ...]) -> list[str]:
    """Hand the started jobs of dead workers to RQ's abandoned-job handling now.

    Returns:
        The ids of the jobs handed over.
    """
    keepers = {m.decode() if isinstance(m, bytes) else m for m in connection.smembers(_KEEPERS)}
    if not keepers:
        return []
    reaped: list[str] = []
    for name in queue_names:
        queue = Queue(name, connection=connection, serializer=JSONSerializer)
        registry = StartedJobRegistry(queue=queue)
        dead = []
        for member in connection.zrange(registry.key, 0, -1):
            raw = member.decode() if isinstance(member, bytes) else str(member)
            job_id = registry.parse_job_id(raw)
            try:
                job = Job.fetch(job_id, connection=connection, serializer=JSONSerializer)
            except Exception:
                continue
            worker = job.worker_name
            if not worker or worker not in keepers:
                continue  # not one of ours: RQ's own timeout applies
            if connection.exists(_ALIVE + worker):
                continue
            dead.append(raw)
            reaped.append(job_id)
        if dead:
            # due now: RQ's cleanup retries them (or fails them when no retry is left)
            connection.zadd(registry.key, {m: 0 for m in dead})
            registry.cleanup()
            log.warning("re-queued %d job(s) of dead workers on %s: %s", len(dead), name, dead)
    return reaped
