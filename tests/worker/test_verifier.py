"""`RqVerifier`: the worker pool first, in-process after the deadline or without Redis, and
"unverified" (baseline kept) past the hard deadline."""

from __future__ import annotations

import threading
import time

import pytest

from tasmopt.vm.equivalence import BlockCheck, check_blocks
from worker.queue import connect
from worker.verifier import RqVerifier

CHECKS = [
    BlockCheck(("push 1", "push 2", "add"), ("push 3",)),
    BlockCheck(("dup 0", "pop 1"), ()),
    BlockCheck(("push 5",), ("push 6",)),
]


class Spy:
    """In-process checker that records what it was asked."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def __call__(self, checks):
        self.calls.append(len(checks))
        return check_blocks(checks)


def _waiting(conn, **kw):
    """A verifier that only waits for the workers (no help while waiting)."""
    return RqVerifier(conn, help_while_waiting=False, **kw)


def test_workers_do_the_checks(redis_conn, queue, burst):
    spy = Spy()
    verifier = _waiting(redis_conn, deadline_s=10, hard_deadline_s=20, max_jobs=2, local=spy)
    out: list = []
    t = threading.Thread(target=lambda: out.extend(verifier(CHECKS)))
    t.start()
    deadline = time.monotonic() + 5
    while queue.count < 2 and time.monotonic() < deadline:
        time.sleep(0.005)
    burst()
    t.join(10)
    assert [v.equivalent for v in out] == [True, True, False]
    assert out == check_blocks(CHECKS)
    assert spy.calls == []


def test_no_worker_checks_in_process_after_the_deadline(redis_conn, queue):
    spy = Spy()
    verifier = _waiting(redis_conn, deadline_s=0.1, hard_deadline_s=10, max_jobs=2, local=spy)
    start = time.monotonic()
    out = verifier(CHECKS)
    assert 0.1 <= time.monotonic() - start < 5
    assert out == check_blocks(CHECKS)
    assert spy.calls == [2, 1]
    assert queue.count == 0  # queued jobs were cancelled, not left for a late worker


def test_past_the_hard_deadline_checks_are_unverified(redis_conn):
    spy = Spy()
    verifier = _waiting(redis_conn, deadline_s=0.05, hard_deadline_s=0.05, local=spy)
    out = verifier(CHECKS)
    assert spy.calls == []
    assert all(not v.equivalent and v.reason.startswith("unverified") for v in out)


def test_redis_down_checks_in_process():
    spy = Spy()
    dead = connect("redis://127.0.0.1:1/0")  # nothing listens on port 1
    verifier = RqVerifier(dead, deadline_s=5, hard_deadline_s=10, local=spy)
    start = time.monotonic()
    assert verifier(CHECKS) == check_blocks(CHECKS)
    assert time.monotonic() - start < 3 and sum(spy.calls) == 3


def test_empty_call_touches_nothing():
    verifier = RqVerifier(connect("redis://127.0.0.1:1/0"), local=Spy())
    assert verifier([]) == []


def test_deadlines_must_be_ordered(redis_conn):
    with pytest.raises(ValueError):
        RqVerifier(redis_conn, deadline_s=2, hard_deadline_s=1)


def test_the_request_deadline_bounds_the_wait_and_cancels_queued_jobs(redis_conn, queue):
    """No worker is running; the verifier's own deadlines are long, the request's is 0.2 s:
    the call returns by then, every check unverified (baseline kept), and the queued jobs are
    cancelled, so no worker runs checks for a request that has been answered."""
    from tasmopt.deadline import Deadline

    spy = Spy()
    verifier = _waiting(redis_conn, deadline_s=10, hard_deadline_s=20, max_jobs=2, local=spy)
    start = time.monotonic()
    out = verifier(CHECKS, deadline=Deadline(0.2))
    assert time.monotonic() - start < 1.5
    assert all(not v.equivalent and v.reason.startswith("unverified: request") for v in out)
    assert spy.calls == [] and queue.count == 0
    gone = Deadline(30)
    gone.cancel("client disconnected")
    out = verifier(CHECKS, deadline=gone)
    assert all("client disconnected" in v.reason for v in out) and queue.count == 0


def test_while_the_workers_are_busy_this_process_checks_the_queue_from_the_back(redis_conn, queue):
    """No worker takes anything (all busy deepening, say) and the request has 0.5 s: every
    check is still verified, in-process, well before the deadline, and no job is left in the
    queue for a worker to run for nobody."""
    from tasmopt.deadline import Deadline

    spy = Spy()
    verifier = RqVerifier(redis_conn, deadline_s=10, hard_deadline_s=20, max_jobs=3, local=spy)
    start = time.monotonic()
    out = verifier(CHECKS, deadline=Deadline(0.5))
    assert time.monotonic() - start < 0.5
    assert out == check_blocks(CHECKS)
    assert spy.calls == [1, 1, 1] and queue.count == 0


def test_with_a_free_worker_the_front_goes_to_it_and_the_back_is_checked_here(
    redis_conn, queue, burst
):
    """Work is shared: this process takes the last queued job, a worker drains the rest;
    the verdicts are the same as checking everything in one place."""
    spy = Spy()
    slow = lambda checks: (time.sleep(0.3), spy(checks))[1]  # noqa: E731 - a slow local check
    verifier = RqVerifier(redis_conn, deadline_s=10, hard_deadline_s=20, max_jobs=3, local=slow)
    out: list = []
    t = threading.Thread(target=lambda: out.extend(verifier(CHECKS)))
    t.start()
    deadline = time.monotonic() + 5
    while queue.count < 2 and time.monotonic() < deadline:  # enqueued, the last taken back
        time.sleep(0.002)
    burst()  # a worker takes what is still queued while this process checks the last job
    t.join(10)
    assert out == check_blocks(CHECKS)
    assert 1 <= sum(spy.calls) < len(CHECKS)  # some here, the rest by the worker
