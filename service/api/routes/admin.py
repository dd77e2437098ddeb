"""Admin endpoints (bearer token ADMIN_TOKEN): the checkpoint registry, the learning phase,
the finetune trigger and the audit log. Every change is recorded in `admin_actions` with who
(ADMIN_NAME), when and why (the required `reason`)."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path as FsPath
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query

from service.api.deps import AdminDep, RunnerDep, SessionDep, SettingsDep, WatcherDep
from service.core.schemas import (
    AdminActionPublic,
    CheckpointPublic,
    FinetuneAccepted,
    FinetuneRunPublic,
    PhaseOut,
    PromotionOut,
    ReasonIn,
    RegisterIn,
)
from service.errors import ADMIN_ERROR_RESPONSES, InvalidRequest
from service.runners import RqRunner
from tasmopt.store import (
    describe_checkpoint,
    last_finetune_run,
    list_admin_actions,
    list_checkpoints,
    production_checkpoint,
    promote_checkpoint,
    record_admin_action,
    register_checkpoint,
    rollback_checkpoint,
)
from tasmopt.store.runs import buffer_counts
from worker.queue import LEARN_QUEUE, named_queue

router = APIRouter(prefix="/admin", tags=["admin"], responses=ADMIN_ERROR_RESPONSES)

log = logging.getLogger(__name__)

Version = Annotated[str, Path(min_length=1, max_length=128, description="Checkpoint version.")]


def _try_refresh(watcher: WatcherDep) -> None:
    # Pick the change up now rather than at the next poll (which would do it anyway).
    try:
        watcher.refresh()
    except Exception as exc:
        log.warning("model refresh after an admin change failed (%s); the poll retries", exc)


@router.get("/checkpoints", response_model=list[CheckpointPublic])
def list_registered(
    actor: AdminDep,
    session: SessionDep,
    status: Literal["candidate", "production", "archived", "rejected"] | None = None,
) -> list[CheckpointPublic]:
    """Registered checkpoints, newest first (optionally one status)."""
    return [CheckpointPublic.model_validate(c) for c in list_checkpoints(session, status=status)]


@router.post("/checkpoints", status_code=201, response_model=CheckpointPublic)
def register(
    body: RegisterIn,
    actor: AdminDep,
    session: SessionDep,
    settings: SettingsDep,
    watcher: WatcherDep,
) -> CheckpointPublic:
    """Register a checkpoint directory of MODEL_STORE (sha256 of `model.safetensors`,
    `config.json`, `metrics.json`) as a candidate, and promote it if asked."""
    store = settings.model_store.resolve()
    try:
        directory = (store / body.path).resolve()
        inside = directory.is_relative_to(store)
        info = describe_checkpoint(FsPath(directory), store=store) if inside else None
    except (OSError, ValueError) as exc:  # NUL bytes, names too long, ...
        raise InvalidRequest(
            f"path: {body.path[:100]!r} is not a usable directory ({type(exc).__name__})"
        ) from None
    if info is None:
        raise InvalidRequest(f"path: {body.path[:100]!r} is outside MODEL_STORE")
    with session.begin():
        row, created = register_checkpoint(session, info=info)
        if created:
            record_admin_action(
                session,
                actor=actor,
                action="register",
                target=row.version,
                reason=body.reason,
                detail={"path": row.path, "sha256": row.sha256},
            )
        if body.promote and row.status != "production":
            _, previous = promote_checkpoint(session, version=row.version)
            record_admin_action(
                session,
                actor=actor,
                action="promote",
                target=row.version,
                reason=body.reason,
                detail={"previous": previous.version if previous else None},
            )
        out = CheckpointPublic.model_validate(row)
    if body.promote:
        _try_refresh(watcher)
    return out


@router.post("/checkpoints/{version}/promote", response_model=PromotionOut)
def promote(
    version: Version, body: ReasonIn, actor: AdminDep, session: SessionDep, watcher: WatcherDep
) -> PromotionOut:
    """Make a candidate (or archived) checkpoint production; the previous one is archived.
    Served without a restart (this process now, the others within MODEL_POLL_S)."""
    with session.begin():
        row, previous = promote_checkpoint(session, version=version)
        action = record_admin_action(
            session,
            actor=actor,
            action="promote",
            target=version,
            reason=body.reason,
            detail={"previous": previous.version if previous else None},
        )
        out = PromotionOut(
            production=CheckpointPublic.model_validate(row),
            previous=CheckpointPublic.model_validate(previous) if previous else None,
            action_id=action.id,
        )
    _try_refresh(watcher)
    return out


@router.post("/rollback", response_model=PromotionOut)
def rollback(
    body: ReasonIn, actor: AdminDep, session: SessionDep, watcher: WatcherDep
) -> PromotionOut:
    """Reject the production checkpoint and restore the one that served before it."""
    with session.begin():
        restored, rolled_back = rollback_checkpoint(session)
        action = record_admin_action(
            session,
            actor=actor,
            action="rollback",
            target=restored.version,
            reason=body.reason,
            detail={"rolled_back": rolled_back.version},
        )
        out = PromotionOut(
            production=CheckpointPublic.model_validate(restored),
            previous=CheckpointPublic.model_validate(rolled_back),
            action_id=action.id,
        )
    _try_refresh(watcher)
    return out


@router.get("/phase", response_model=PhaseOut)
def phase(actor: AdminDep, session: SessionDep, watcher: WatcherDep) -> PhaseOut:
    """Learning phase A/B (design §4) from the replay buffer and the production
    checkpoint's holdout metrics; the buffer's counts; the last finetune run."""
    from service.core.model_watcher import compute_phase

    counts = buffer_counts(session)
    prod = production_checkpoint(session)
    current, detail = compute_phase(counts, prod.metrics if prod else None)
    last = last_finetune_run(session)
    return PhaseOut(
        phase=current,
        detail=detail,
        buffer=counts,
        production=CheckpointPublic.model_validate(prod) if prod else None,
        model_loaded=watcher.version,
        last_finetune=FinetuneRunPublic.model_validate(last) if last else None,
    )


@router.post("/finetune", status_code=202, response_model=FinetuneAccepted)
def finetune(
    body: ReasonIn, actor: AdminDep, session: SessionDep, settings: SettingsDep, runner: RunnerDep
) -> FinetuneAccepted:
    """Enqueue the finetune job now (forced: it runs even below the 50-result trigger)."""
    from redis.exceptions import RedisError

    from worker.jobs import finetune_job

    job_id = str(uuid.uuid4())
    kwargs: dict[str, Any] = {
        "trigger": "admin",
        "min_results": settings.finetune_min_results,
        "max_age_h": settings.finetune_max_age_h,
        "force": True,
        "job_id": job_id,
    }
    backend = "thread"
    if isinstance(runner, RqRunner):
        try:
            named_queue(runner.connection, LEARN_QUEUE).enqueue(
                "worker.jobs.finetune_job",
                kwargs=kwargs,
                job_id=job_id,
                job_timeout=3600,
                result_ttl=86400,
                description="finetune (admin)",
            )
            backend = "rq"
        except RedisError as exc:
            log.warning("Redis unavailable (%s); finetune runs in the API process", exc)
    with session.begin():
        action = record_admin_action(
            session,
            actor=actor,
            action="finetune",
            target=job_id,
            reason=body.reason,
            detail={"backend": backend},
        )
        action_id = action.id
    if backend == "thread":
        thread = runner.fallback if isinstance(runner, RqRunner) else runner
        thread.submit(uuid.UUID(job_id), lambda: finetune_job(**kwargs))
    return FinetuneAccepted(job_id=job_id, backend=backend, action_id=action_id)


@router.get("/actions", response_model=list[AdminActionPublic])
def actions(
    actor: AdminDep, session: SessionDep, limit: Annotated[int, Query(ge=1, le=500)] = 50
) -> list[AdminActionPublic]:
    """The audit log, newest first."""
    return [AdminActionPublic.model_validate(a) for a in list_admin_actions(session, limit=limit)]
