"""Queue names and Redis connection helpers shared by the API process and the workers.

Jobs are serialized as JSON (`SERIALIZER`): payloads are plain lists and dicts, and no
pickle crosses Redis. A worker started by hand must use the same serializer:
``rq worker verify --url redis://... --serializer rq.serializers.JSONSerializer``
(``tasmopt worker`` does this for you).
"""

from __future__ import annotations

from redis import Redis
from rq import Queue
from rq.serializers import JSONSerializer

__all__ = [
    "VERIFY_QUEUE",
    "COMPILE_QUEUE",
    "LEARN_QUEUE",
    "DEEPEN_QUEUE",
    "QUEUES",
    "SERIALIZER",
    "connect",
    "verify_queue",
    "named_queue",
]

#: Name of the queue the API enqueues equivalence checks on.
VERIFY_QUEUE = "verify"

#: Async compiles (``POST /compile/jobs``): `worker.compile.compile_job`.
COMPILE_QUEUE = "compile"

#: The learning loop: `worker.jobs.finetune_job`, enqueued by the scheduler and the admin API.
LEARN_QUEUE = "learn"

#: Background deepening and cache spot checks: `worker.deepen.deepen_job`.
DEEPEN_QUEUE = "deepen"

#: The queues a worker listens on, in priority order (verification is on a request's path;
#: deepening only improves later builds).
QUEUES = (VERIFY_QUEUE, COMPILE_QUEUE, DEEPEN_QUEUE, LEARN_QUEUE)

#: Serializer of every tasmopt job (arguments and results are JSON).
SERIALIZER = JSONSerializer

#: Seconds a Redis connect or command may take before it counts as "Redis is down".
SOCKET_TIMEOUT_S = 2.0


def connect(url: str, *, socket_timeout_s: float | None = SOCKET_TIMEOUT_S) -> Redis:
    """A Redis client for `url` (e.g. ``redis://127.0.0.1:6379/0``). Does not connect yet.

    Args:
        socket_timeout_s: limit on each command, seconds; None for a worker, whose dequeue
            blocks for long on purpose. Connecting is always limited to `SOCKET_TIMEOUT_S`.
    """
    return Redis.from_url(
        url, socket_connect_timeout=SOCKET_TIMEOUT_S, socket_timeout=socket_timeout_s
    )


def verify_queue(connection: Redis, name: str = VERIFY_QUEUE) -> Queue:
    """The verify queue on `connection`, with the JSON serializer."""
    return Queue(name, connection=connection, serializer=SERIALIZER)


def named_queue(connection: Redis, name: str) -> Queue:
    """Queue `name` (one of `QUEUES`) on `connection`, with the JSON serializer."""
    return Queue(name, connection=connection, serializer=SERIALIZER)
