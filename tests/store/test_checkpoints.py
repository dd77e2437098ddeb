"""The checkpoint registry and audit log: register (idempotent), promote, roll back, reject,
one production at a time; compile jobs and finetune runs; replay-buffer counts."""

from __future__ import annotations

import hashlib
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import delete
from sqlalchemy.exc import IntegrityError

from tasmopt.store import (
    AdminAction,
    BuildResult,
    Checkpoint,
    CompileJob,
    Conflict,
    FinetuneRun,
    InvalidCheckpoint,
    NotFound,
    buffer_counts,
    describe_checkpoint,
    get_compile_job,
    insert_build_results,
    last_finetune_run,
    list_admin_actions,
    list_checkpoints,
    production_checkpoint,
    promote_checkpoint,
    record_admin_action,
    record_finetune_run,
    register_checkpoint,
    reject_checkpoint,
    results_since,
    rollback_checkpoint,
    save_compile_job,
)
from tasmopt.store.models import Trajectory


@pytest.fixture()
def session(pg_session):
    """The session's database, emptied of the tables these tests write."""
    with pg_session.begin():
        for model in (Checkpoint, AdminAction, CompileJob, FinetuneRun, Trajectory, BuildResult):
            pg_session.execute(delete(model))
    yield pg_session
    pg_session.rollback()


def _register(session, make_checkpoint, version, **kw):
    info = describe_checkpoint(make_checkpoint(version, **kw))
    row, _created = register_checkpoint(session, info=info)
    session.commit()
    return row


def test_describe_reads_config_metrics_and_hashes_the_weights(make_checkpoint, tmp_path):
    d = make_checkpoint("v7", weights=b"weights", metrics={"holdout_validity": 0.9}, parent="v6")
    info = describe_checkpoint(d, store=tmp_path / "model_store")
    assert info.version == "v7" and info.parent == "v6" and info.stage == "supervised"
    assert info.sha256 == hashlib.sha256(b"weights").hexdigest()
    assert info.path == "v7"  # relative to the store it lives in
    assert info.metrics == {"holdout_validity": 0.9}
    assert describe_checkpoint(d).path == str(d.resolve())
    (d / "model.safetensors").unlink()
    with pytest.raises(InvalidCheckpoint, match="model.safetensors"):
        describe_checkpoint(d)


def test_register_is_idempotent_and_refuses_other_weights(session, make_checkpoint, tmp_path):
    row = _register(session, make_checkpoint, "v1", weights=b"a")
    assert row.status == "candidate"
    again, created = register_checkpoint(
        session, info=describe_checkpoint(tmp_path / "model_store" / "v1")
    )
    assert not created and again.sha256 == row.sha256
    other = make_checkpoint("v1", store=tmp_path / "elsewhere", weights=b"b")
    with pytest.raises(Conflict, match="other weights"):
        register_checkpoint(session, info=describe_checkpoint(other))


def test_promote_archives_the_previous_and_rollback_restores_it(session, make_checkpoint):
    for v in ("v1", "v2", "v3"):
        _register(session, make_checkpoint, v)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    _, prev = promote_checkpoint(session, version="v1", now=t0)
    assert prev is None
    _, prev = promote_checkpoint(session, version="v2", now=t0 + timedelta(hours=1))
    assert prev.version == "v1"
    promote_checkpoint(session, version="v3", now=t0 + timedelta(hours=2))
    session.commit()
    statuses = {c.version: c.status for c in list_checkpoints(session)}
    assert statuses == {"v1": "archived", "v2": "archived", "v3": "production"}

    restored, rolled_back = rollback_checkpoint(session)
    session.commit()
    assert (restored.version, rolled_back.version) == ("v2", "v3")
    assert production_checkpoint(session).version == "v2"
    assert rolled_back.status == "rejected"
    restored, _ = rollback_checkpoint(session)
    session.commit()
    assert restored.version == "v1"
    with pytest.raises(Conflict, match="no previous production"):
        rollback_checkpoint(session)
    with pytest.raises(Conflict, match="rejected"):
        promote_checkpoint(session, version="v3")
    with pytest.raises(Conflict, match="already production"):
        promote_checkpoint(session, version="v1")
    with pytest.raises(NotFound):
        promote_checkpoint(session, version="nope")


def test_only_one_production_row(session, make_checkpoint):
    _register(session, make_checkpoint, "v1")
    _register(session, make_checkpoint, "v2")
    promote_checkpoint(session, version="v1")
    session.commit()
    with pytest.raises(IntegrityError):  # the partial unique index
        session.get(Checkpoint, "v2").status = "production"
        session.flush()


def test_reject_only_candidates(session, make_checkpoint):
    _register(session, make_checkpoint, "v1")
    assert reject_checkpoint(session, version="v1").status == "rejected"
    session.commit()
    with pytest.raises(Conflict):
        reject_checkpoint(session, version="v1")


def test_audit_log_newest_first(session):
    with session.begin():
        record_admin_action(
            session,
            actor="alice",
            action="promote",
            target="v1",
            reason="better holdout",
            detail={"previous": None},
        )
        record_admin_action(
            session, actor="bob", action="rollback", target="v0", reason="regression"
        )
    actions = list_admin_actions(session)
    assert [(a.actor, a.action, a.reason) for a in actions] == [
        ("bob", "rollback", "regression"),
        ("alice", "promote", "better holdout"),
    ]
    assert actions[0].at is not None and actions[1].detail == {"previous": None}


def test_compile_job_never_moves_backwards(session):
    jid = uuid.uuid4()
    with session.begin():
        save_compile_job(session, id=jid, status="queued", backend="rq", request={"tir": []})
        save_compile_job(
            session, id=jid, status="finished", backend="rq", response={"tasm": "halt"}
        )
        save_compile_job(session, id=jid, status="started", backend="rq")  # late: ignored
        save_compile_job(session, id=jid, status="failed", backend="rq", error="x")  # ignored
    row = get_compile_job(session, id=jid)
    assert row.status == "finished" and row.response == {"tasm": "halt"}
    assert row.request == {"tir": []} and row.error is None
    assert row.started_at is not None and row.finished_at is not None


def _rows(n: int, *, valid=True, fallback=False, when=None):
    when = when or datetime.now(UTC)
    return [
        {
            "id": uuid.uuid4(),
            "request_id": uuid.uuid4(),
            "tir_hash": "0" * 64,
            "function": "f",
            "block_index": i,
            "tasm": "push 1",
            "valid": valid,
            "clock_cycles": 1,
            "compiler_cycles": 2,
            "table_heights": {},
            "padded_height": None,
            "fallback_used": fallback,
            "source": "rules",
            "model_version": None,
            "created_at": when,
            "latency_ms": 1.0,
        }
        for i in range(n)
    ]


def test_buffer_counts_and_results_since(session):
    old = datetime.now(UTC) - timedelta(days=2)
    with session.begin():
        insert_build_results(session, rows=_rows(3, when=old))
        insert_build_results(session, rows=_rows(2, fallback=True))
        fn = _rows(1)[0] | {"block_index": None, "source": "compiler"}
        insert_build_results(session, rows=[fn])
    counts = buffer_counts(session)
    assert {k: counts[k] for k in ("rows", "functions", "blocks", "online", "by_source")} == {
        "rows": 6,
        "functions": 1,
        "blocks": 5,
        "online": 0,  # design §4 counts what the *model* proposed
        "by_source": {"rules": 5, "compiler": 1},
    }
    assert counts["fallback"] == 0 and counts["model"]["judged"] == 0
    session.rollback()  # end the read's transaction
    with session.begin():
        model = _rows(2) + _rows(1, fallback=True)
        for r in model:
            r["source"] = "model"
        model.append(_rows(1)[0] | {"source": "model", "clock_cycles": 2})  # a copy's cost
        insert_build_results(session, rows=model)
    assert buffer_counts(session)["online"] == 2  # valid, not fallback, cheaper
    session.rollback()
    with session.begin():
        session.execute(delete(BuildResult).where(BuildResult.source == "model"))
    n, oldest, newest = results_since(session, after=None)
    assert n == 5 and oldest < newest
    n, _, _ = results_since(session, after=old + timedelta(hours=1))
    assert n == 2


def test_finetune_runs(session):
    assert last_finetune_run(session) is None
    now = datetime.now(UTC)
    record_finetune_run(
        session,
        trigger="cron",
        outcome="no_new_results",
        new_results=0,
        watermark=None,
        started_at=now,
    )
    record_finetune_run(
        session,
        trigger="admin",
        outcome="learning_unavailable",
        new_results=4,
        watermark=now,
        started_at=now,
        job_id="j1",
    )
    session.commit()
    last = last_finetune_run(session)
    assert (last.trigger, last.outcome, last.job_id) == ("admin", "learning_unavailable", "j1")
    assert last_finetune_run(session, outcome="no_new_results").trigger == "cron"
