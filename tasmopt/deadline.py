"""Deadlines and cancellation shared by every stage of a compile (design §1: every stage has a
deadline; no candidate source may make a request wait past its budget).

A `Deadline` is a point on the monotonic clock plus a cancel flag. The service creates one per
request (``COMPILE_DEADLINE_S``) and cancels it when the client disconnects; the optimizer and
the candidate sources look at it inside their loops and return what is proven by then (at worst
the baseline, unchanged). It is thread-safe and survives pickling (a copy has its own flag).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

__all__ = ["Deadline", "current"]

_CURRENT: ContextVar[Deadline | None] = ContextVar("tasmopt_deadline", default=None)


def current() -> Deadline | None:
    """The deadline a caller made `Deadline.active` around the running code (in this thread
    or task), if any: for code deep below an interface that takes no deadline (the verifier's
    guard solving inside `check_block`)."""
    return _CURRENT.get()


class Deadline:
    """A wall-clock budget that can also be cancelled.

    Args:
        seconds: budget from now, seconds; None or ``inf`` for no time limit (cancellation
            still works).
        within: an enclosing deadline (e.g. the request's around a search's own budget):
            this one is never later, and is cancelled with it.
    """

    __slots__ = ("at", "_cancelled", "reason", "_within")

    def __init__(self, seconds: float | None = None, *, within: Deadline | None = None) -> None:
        at = math.inf if seconds is None else time.monotonic() + max(0.0, seconds)
        self.at = at if within is None else min(at, within.at)
        self._within = within
        self._cancelled = threading.Event()
        self.reason: str | None = None

    def cancel(self, reason: str = "cancelled") -> None:
        """Stop all work under this deadline as soon as it next looks (e.g. the client left)."""
        self.reason = self.reason or reason
        self._cancelled.set()

    @property
    def cancelled(self) -> bool:
        """Cancelled itself, or with the deadline it lies within."""
        return self._cancelled.is_set() or (self._within is not None and self._within.cancelled)

    @property
    def expired(self) -> bool:
        """True once cancelled or past the time limit."""
        return self.cancelled or time.monotonic() >= self.at

    def remaining(self) -> float:
        """Seconds left (0 when expired; ``inf`` without a time limit)."""
        if self.cancelled:
            return 0.0
        return max(0.0, self.at - time.monotonic())

    def share(self, fraction: float) -> Deadline:
        """A deadline ``fraction`` of the time left from now, within this one (cancelled with
        it); this one itself when it has no time limit."""
        left = self.remaining()
        if math.isinf(left):
            return self
        return Deadline(left * fraction, within=self)

    def why(self) -> str:
        """Why work stopped: the cancel reason (``cancelled`` if none was given), or
        ``deadline``."""
        if self._cancelled.is_set():
            return self.reason or "cancelled"
        if self._within is not None and self._within.cancelled:
            return self._within.why()
        return "deadline"

    @contextmanager
    def active(self) -> Iterator[Deadline]:
        """Make this the `current` deadline inside the ``with`` body."""
        token = _CURRENT.set(self)
        try:
            yield self
        finally:
            _CURRENT.reset(token)

    def __getstate__(self) -> dict[str, Any]:
        left = self.remaining()
        return {"left": None if math.isinf(left) else left, "cancelled": self.cancelled}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["left"])  # type: ignore[misc]  # re-initialise a fresh copy (an enclosing deadline does not travel)
        if state["cancelled"]:
            self.cancel()

    def __repr__(self) -> str:
        return f"Deadline(remaining={self.remaining():.3f}s, cancelled={self.cancelled})"
