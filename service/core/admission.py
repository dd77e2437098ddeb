"""Admission control of `POST /compile` in one API process.

``COMPILE_SLOTS`` compiles run at once and ``COMPILE_QUEUE`` more may wait for a slot; a request
beyond that is refused at once with 503 and ``Retry-After`` instead of queueing without bound
(design §5). Compiles run on threads of their own (`Admission.limiter`), never on the threads
that answer ``/healthz``, ``/readyz``, ``/metrics`` and the admin endpoints. While a compile
runs, the client is watched: when it disconnects, the compile's `Deadline` is cancelled and
the work stops at the next look (nothing keeps burning CPU for nobody).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
import anyio.to_thread

from service.core.errors import Overloaded, TooManyRequests
from tasmopt.deadline import Deadline

__all__ = ["Admission", "run_watched"]

T = TypeVar("T")

log = logging.getLogger(__name__)

#: Seconds between two looks at the client connection while a compile runs.
WATCH_EVERY_S = 0.25


class Admission:
    """Counts the compiles this process holds (running + waiting).

    Args:
        slots: compiles that run at once (the semaphore inside `service.core.compiling.serve`).
        queue: compiles that may wait for a slot.
        retry_after_s: the ``Retry-After`` given with a 503 or 429, seconds.
        per_client: compiles one client (its address) may hold at once; 0: no limit. One
            client cannot take every place: beyond its share it gets 429.
    """

    def __init__(self, slots: int, queue: int, retry_after_s: int, per_client: int = 0) -> None:
        self.slots, self.queue, self.retry_after_s = slots, queue, retry_after_s
        self.per_client = per_client
        self.held = 0
        self.refused = 0
        self._by_client: dict[str, int] = {}
        self._lock = threading.Lock()
        self.limiter: anyio.CapacityLimiter | None = None  # made in the event loop (lifespan)

    def enter(self, client: str = "") -> None:
        """Take a place for ``client``, or refuse.

        Raises:
            TooManyRequests: ``client`` already holds ``per_client`` compiles (429).
            Overloaded: ``slots + queue`` compiles are already held (503, Retry-After).
        """
        with self._lock:
            mine = self._by_client.get(client, 0)
            if self.per_client and mine >= self.per_client:
                self.refused += 1
                raise TooManyRequests(
                    f"client {client or '?'} already has {mine} compiles running or waiting "
                    f"(COMPILE_PER_CLIENT={self.per_client}); retry in {self.retry_after_s} s",
                    retry_after_s=self.retry_after_s,
                )
            if self.held >= self.slots + self.queue:
                self.refused += 1
                raise Overloaded(
                    f"{self.held} compiles are running or waiting (COMPILE_SLOTS={self.slots}, "
                    f"COMPILE_QUEUE={self.queue}); retry in {self.retry_after_s} s",
                    retry_after_s=self.retry_after_s,
                )
            self.held += 1
            self._by_client[client] = mine + 1

    def leave(self, client: str = "") -> None:
        with self._lock:
            self.held -= 1
            left = self._by_client.get(client, 1) - 1
            if left > 0:
                self._by_client[client] = left
            else:
                self._by_client.pop(client, None)

    def thread_limiter(self) -> anyio.CapacityLimiter:
        """The compiles' own threads (one per held compile): created on first use, inside
        the event loop."""
        if self.limiter is None:
            self.limiter = anyio.CapacityLimiter(self.slots + self.queue)
        return self.limiter


async def run_watched(
    fn: Callable[[], T],
    *,
    deadline: Deadline,
    disconnected: Callable[[], Awaitable[bool]],
    limiter: anyio.CapacityLimiter,
) -> T:
    """Run ``fn`` on a compile thread; cancel ``deadline`` if the client disconnects first.

    The thread is not interrupted: ``fn`` sees the cancelled deadline at its next look and
    returns what it has (the route then answers nobody; persistence still happens).
    """
    failure: BaseException | None = None
    result: T | None = None
    async with anyio.create_task_group() as tg:

        async def watch() -> None:
            while not deadline.expired:
                if await disconnected():
                    deadline.cancel("client disconnected")
                    log.info("client disconnected: its compile is cancelled")
                    return
                await anyio.sleep(WATCH_EVERY_S)

        tg.start_soon(watch)
        try:
            result = await anyio.to_thread.run_sync(fn, limiter=limiter)
        except BaseException as exc:  # raised as itself, not inside an exception group
            failure = exc
        finally:
            tg.cancel_scope.cancel()
    if failure is not None:
        raise failure
    return result  # type: ignore[return-value]  # fn returned it (failure is None)
