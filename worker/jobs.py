"""RQ jobs: plain functions over `tasmopt`, importable by name from a worker process.

* `check_blocks_job` (queue ``verify``): equivalence checks for `RqVerifier`.
* `finetune_job` (queue ``learn``): the finetune check of design §4 Stage 3, enqueued by the
  scheduler (``tasmopt scheduler``, RQ cron) and by ``POST /admin/finetune``.

(Async compiles run `worker.compile.compile_job` on the ``compile`` queue.)
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from tasmopt.store import (
    checkpoint_dir,
    count_trajectories,
    last_finetune_run,
    production_checkpoint,
    prune_trajectories,
    record_finetune_run,
    results_since,
)
from tasmopt.train.online import finetune_line, guard_rows, micro_finetune
from tasmopt.vm.equivalence import BlockCheck, check_blocks
from worker import context
from worker.context import Learning
from worker.metrics import FINETUNE_RUNS, GUARD_REJECTIONS

__all__ = ["check_blocks_job", "finetune_job", "run_learning", "MIN_NEW_RESULTS", "MAX_AGE_H"]

log = logging.getLogger(__name__)

#: Design §4 Stage 3: a micro-finetune when >= 50 new results or 24 h.
MIN_NEW_RESULTS = 50
MAX_AGE_H = 24.0


def check_blocks_job(payload: list[dict]) -> list[dict]:
    """Check candidate blocks; JSON in, JSON out.

    Args:
        payload: `BlockCheck.to_dict()` of each check.

    Returns:
        `Verdict.to_dict()` of each check, in order.

    Raises:
        KeyError, TypeError: a malformed payload (the job fails; the caller checks locally).
    """
    return [v.to_dict() for v in check_blocks([BlockCheck.from_dict(d) for d in payload])]


def _learning_loop() -> Callable[..., dict[str, Any]] | None:
    """The micro-finetune + regression guard of this worker (`tasmopt.train.online`), or
    None when the worker was configured without one (the run is then recorded as
    ``learning_unavailable`` and the new results stay counted for the next run)."""
    learning = context.current().learning
    if learning is None:
        return None

    def loop(*, session: Session, since: datetime | None, progress: bool) -> dict[str, Any]:
        return run_learning(session, learning, progress=progress)

    return loop


def run_learning(session: Session, learning: Learning, *, progress: bool) -> dict[str, Any]:
    """One micro-finetune on the production checkpoint (design §4 Stage 3), trajectories
    pruned to the retention bound first. Returns ``outcome``, ``checkpoint_version`` and a
    JSON-safe ``detail``; ``outcome`` is ``no_new_results`` without a production checkpoint
    or replay data."""
    pruned = prune_trajectories(session)
    prod = production_checkpoint(session)
    if prod is None:
        note = "no production checkpoint"
        return {"outcome": "no_new_results", "detail": {"note": note, "line": _idle()}}
    if not count_trajectories(session):  # nothing to learn from: skip the guard's holdout
        note = "no judged candidates in the replay buffer"
        return {"outcome": "no_new_results", "detail": {"note": note, "line": _idle()}}
    path = checkpoint_dir(prod.path, learning.model_store)
    guard = guard_rows(
        learning.corpus_dir, limit=learning.config.guard_limit, cache=learning.guard_cache
    )
    out = micro_finetune(
        session,
        production=path,
        model_store=learning.model_store,
        cfg=learning.config,
        guard=guard,
        progress=progress,
    )
    detail = {**out.detail, "pruned_trajectories": pruned, "line": out.line()}
    return {
        "outcome": out.outcome,
        "checkpoint_version": out.version,
        "detail": json.loads(json.dumps(detail, default=str)),
    }


def _idle() -> str:
    return finetune_line("no_new_results")


def finetune_job(
    trigger: str = "cron",
    *,
    min_results: int = MIN_NEW_RESULTS,
    max_age_h: float = MAX_AGE_H,
    force: bool = False,
    job_id: str | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """Decide whether the replay buffer warrants a micro-finetune, and record the run.

    Counts the block results served since the previous triggered run's watermark. A
    finetune is due when at least `min_results` are new, when the oldest new one has waited
    `max_age_h` hours, or when `force` is set (an admin asked). Runs that are not due record
    ``no_new_results`` or ``waiting`` and keep the watermark, so the results keep counting.

    Args:
        trigger: ``cron``, ``admin`` or ``cli`` (``tasmopt finetune``).
        progress: show a progress bar over the finetune steps (the CLI).
        job_id: the RQ job id (recorded with the run).

    Returns:
        The run as a dict (``outcome``, ``new_results``, ``run_id``).

    Raises:
        RuntimeError: the worker context is not configured.
        sqlalchemy.exc.SQLAlchemyError: the database is unreachable (the job fails; the next
            scheduled run tries again).
    """
    from rq import get_current_job

    job = get_current_job()
    job_id = job_id or (job.id if job is not None else None)
    started = datetime.now(UTC)
    factory = context.current().session_factory
    with factory() as session, session.begin():
        last = last_finetune_run(session)
        after = last.watermark if last is not None else None
        count, oldest, newest = results_since(session, after=after)
        waited = oldest is not None and started - oldest >= timedelta(hours=max_age_h)
        due = force or count >= min_results or (count > 0 and waited)
        detail: dict[str, Any] = {
            "min_results": min_results,
            "max_age_h": max_age_h,
            "force": force,
        }
        watermark = after
        version = None
        if not due:
            outcome = "no_new_results" if count == 0 else "waiting"
        elif (loop := _learning_loop()) is None:
            outcome = "learning_unavailable"
            detail["note"] = "no learning loop installed; results stay counted"
        else:
            result = loop(session=session, since=after, progress=progress)
            outcome, version = result["outcome"], result.get("checkpoint_version")
            detail.update(result.get("detail", {}))
            watermark = newest
        run = record_finetune_run(
            session,
            trigger=trigger,
            outcome=outcome,
            new_results=count,
            watermark=watermark,
            started_at=started,
            checkpoint_version=version,
            job_id=job_id,
            detail=detail,
        )
        run_id = run.id
    FINETUNE_RUNS.labels(outcome).inc()
    if outcome == "rejected":
        GUARD_REJECTIONS.inc()
    log.info("finetune check (%s): %d new result(s), %s", trigger, count, outcome)
    return {
        "run_id": run_id,
        "outcome": outcome,
        "new_results": count,
        "checkpoint_version": version,
        "line": detail.get("line"),
    }
