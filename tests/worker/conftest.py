"""Worker fixtures: the verify queue on this session's Redis db, and a burst worker."""

from __future__ import annotations

import pytest
from rq import SimpleWorker

from worker.queue import SERIALIZER, verify_queue


@pytest.fixture()
def queue(redis_conn):
    return verify_queue(redis_conn)


@pytest.fixture()
def burst(redis_conn, queue):
    """``burst()``: run every queued job in this process (rq's SimpleWorker, burst mode)."""

    def run() -> bool:
        worker = SimpleWorker([queue], connection=redis_conn, serializer=SERIALIZER)
        return worker.work(burst=True, logging_level="WARNING")

    return run
