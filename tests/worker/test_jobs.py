"""`check_blocks_job` through the real Redis and an in-process RQ worker."""

from __future__ import annotations

from rq.job import JobStatus

from tasmopt.vm.equivalence import BlockCheck, check_blocks
from worker.jobs import check_blocks_job

SAME = BlockCheck(("push 1", "push 2", "add"), ("push 3",))
DIFFERENT = BlockCheck(("push 1", "push 2", "add"), ("push 4",))
#: equal except in st1, which the program never reads again: accepted only with dead_slots
DEAD_ST1 = BlockCheck(("push 1", "push 2"), ("push 5", "push 2"), dead_slots=(1,))


def test_job_matches_in_process_check():
    payload = [SAME.to_dict(), DIFFERENT.to_dict()]
    assert check_blocks_job(payload) == [v.to_dict() for v in check_blocks([SAME, DIFFERENT])]


def test_dead_slots_survive_the_trip_to_a_worker():
    assert BlockCheck.from_dict(DEAD_ST1.to_dict()) == DEAD_ST1
    (verdict,) = check_blocks_job([DEAD_ST1.to_dict()])
    assert verdict["equivalent"] is True
    strict = BlockCheck(DEAD_ST1.baseline, DEAD_ST1.candidate)
    assert check_blocks_job([strict.to_dict()])[0]["equivalent"] is False


def test_job_runs_on_a_worker(queue, burst):
    job = queue.enqueue("worker.jobs.check_blocks_job", [SAME.to_dict(), DIFFERENT.to_dict()])
    assert burst()
    assert job.get_status(refresh=True) == JobStatus.FINISHED
    first, second = job.return_value()
    assert first["equivalent"] is True and first["cycles"] == 1
    assert second["equivalent"] is False and second["reason"]


def test_malformed_payload_fails_the_job(queue, burst):
    job = queue.enqueue("worker.jobs.check_blocks_job", [{"candidate": ["push 1"]}])
    burst()
    assert job.get_status(refresh=True) == JobStatus.FAILED
