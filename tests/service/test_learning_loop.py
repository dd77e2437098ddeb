"""The learning loop end to end, on real PostgreSQL and Redis: the service serves requests
with the production model and stores every judged candidate; the RQ cron scheduler enqueues
the finetune job; a metered RQ worker runs it: a few micro-finetune steps from the replay
buffer, the regression guard on the corpus holdout, a candidate registered; the admin
endpoint promotes it and the service then answers with the new model version. And a
deliberately damaged checkpoint is rejected by the guard."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from tasmopt.store import (
    Trajectory,
    describe_checkpoint,
    get_checkpoint,
    list_finetune_runs,
    make_sessionmaker,
    promote_checkpoint,
    register_checkpoint,
)
from tasmopt.train import online
from worker import context
from worker.cron import build_scheduler
from worker.metrics import MeteredSimpleWorker
from worker.queue import LEARN_QUEUE, SERIALIZER, named_queue

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "model_store" / "s1-corpus-v1"
EXAMPLES = ROOT / "examples"


@pytest.fixture(scope="module")
def guard_cache(tmp_path_factory) -> Path:
    """The guard's holdout rows, compiled once for the module's tests."""
    return tmp_path_factory.mktemp("guard")


@pytest.fixture()
def learning_service(make_client, pg_engine, redis_url, tmp_path, clean_registry, guard_cache):
    """A service with the shipped checkpoint in production, Redis, and a learning loop of 3
    steps whose guard decodes 12 holdout blocks."""
    store = tmp_path / "model_store"
    shutil.copytree(SHIPPED, store / SHIPPED.name)
    factory = make_sessionmaker(pg_engine)
    with factory() as s, s.begin():
        register_checkpoint(s, info=describe_checkpoint(store / SHIPPED.name, store=store))
        promote_checkpoint(s, version=SHIPPED.name)
    client = make_client(
        model_loader=None,  # the real one: tasmopt.model.source.load_model_source
        redis_url=redis_url,
        model_store=store,
        model_poll_s=0.1,
        finetune_steps=3,
        guard_blocks=12,
        corpus_dir=ROOT / "corpus",
        tasmopt_home=tmp_path,
    )
    learning = context.learning_from(client.app.state.settings)
    context.configure(
        session_factory=factory,
        learning=type(learning)(**{**vars(learning), "guard_cache": guard_cache}),
    )
    yield client, factory
    context.reset()


def _compile(client, name: str) -> dict:
    req = json.loads((EXAMPLES / f"{name}.json").read_text())
    body = {"tir": req["tir"], "options": {"sources": ["rules", "model"], "deadline_ms": 30000}}
    r = client.post("/compile", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def _run_scheduled_finetune(redis_conn) -> None:
    scheduler = build_scheduler(redis_conn, interval_s=3600, min_results=1, max_age_h=24)
    scheduler.enqueue_jobs()
    queue = named_queue(redis_conn, LEARN_QUEUE)
    assert len(queue.get_jobs()) == 1
    MeteredSimpleWorker([queue], connection=redis_conn, serializer=SERIALIZER).work(
        burst=True, logging_level="WARNING"
    )


def test_serve_finetune_guard_promote_and_serve_the_new_model(learning_service, redis_conn, auth):
    client, factory = learning_service
    for name in ("u32_ops", "std_math_fibonacci", "lock_timelock"):
        assert _compile(client, name)["model_version"] == SHIPPED.name
    with factory() as s:
        steps = list(s.scalars(select(Trajectory)))
    assert steps and any(t.source == "model" and t.logprob is not None for t in steps)

    _run_scheduled_finetune(redis_conn)
    with factory() as s:
        [run] = list_finetune_runs(s)
        assert run.outcome == "candidate", run.detail
        version = run.checkpoint_version
        assert get_checkpoint(s, version=version).status == "candidate"
    assert run.detail["guard_before"]["blocks"] > 0 and run.detail["line"].startswith(
        "finetune: outcome=candidate steps=3"
    )

    r = client.post(
        f"/admin/checkpoints/{version}/promote", json={"reason": "guard passed"}, headers=auth
    )
    assert r.status_code == 200, r.text
    deadline = time.monotonic() + 30
    while _compile(client, "u32_ops")["model_version"] != version:
        assert time.monotonic() < deadline, "the promoted checkpoint was never served"
        time.sleep(0.2)


def test_the_guard_rejects_a_damaged_checkpoint(learning_service, redis_conn, monkeypatch):
    client, factory = learning_service
    for name in ("u32_ops", "lock_timelock"):
        _compile(client, name)
    trained = online._train

    def damaging(model, *args, **kwargs):
        losses = trained(model, *args, **kwargs)
        for p in model.parameters():  # a deliberately damaged checkpoint
            p.data.zero_()
        return losses

    monkeypatch.setattr(online, "_train", damaging)
    _run_scheduled_finetune(redis_conn)
    with factory() as s:
        [run] = list_finetune_runs(s)
        assert run.outcome == "rejected", run.detail
        assert get_checkpoint(s, version=run.checkpoint_version).status == "rejected"
        assert get_checkpoint(s, version=SHIPPED.name).status == "production"
    assert "guard" in run.detail
    assert _compile(client, "u32_ops")["model_version"] == SHIPPED.name
