"""Admin API: bearer-token auth (401/403), checkpoint list/register/promote/rollback with
the audit log, phase, finetune trigger; the service refuses a deployment without a token."""

from __future__ import annotations

import time

import pytest

from service.core.config import Settings
from service.main import create_app

pytestmark = pytest.mark.usefixtures("clean_registry")

REASON = {"reason": "integration test"}


def _wait_for(predicate, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


@pytest.mark.parametrize(
    "method,path",
    [
        ("get", "/admin/checkpoints"),
        ("post", "/admin/checkpoints/v1/promote"),
        ("post", "/admin/rollback"),
        ("get", "/admin/phase"),
        ("post", "/admin/finetune"),
        ("get", "/admin/actions"),
        ("post", "/admin/checkpoints"),
    ],
)
def test_auth_401_without_or_with_a_malformed_header_403_with_a_wrong_token(client, method, path):
    call = getattr(client, method)
    kw = {"json": REASON} if method == "post" else {}
    r = call(path, **kw)
    assert r.status_code == 401 and r.json()["code"] == "unauthorized"
    assert r.headers["www-authenticate"] == "Bearer"
    r = call(path, headers={"Authorization": "Basic dXNlcjpwdw=="}, **kw)
    assert r.status_code == 401
    r = call(path, headers={"Authorization": "Bearer"}, **kw)
    assert r.status_code == 401
    r = call(path, headers={"Authorization": "Bearer wrong-token-of-some-length"}, **kw)
    assert r.status_code == 403 and r.json()["code"] == "forbidden"


def test_admin_disabled_without_a_token_in_the_embedded_mode(make_client, tmp_path):
    c = make_client(database_url=f"sqlite:///{tmp_path}/embedded.db", admin_token=None)
    r = c.get("/admin/checkpoints", headers={"Authorization": "Bearer whatever-whatever-1"})
    assert r.status_code == 403 and "ADMIN_TOKEN" in r.json()["message"]


def test_deployment_refuses_to_start_without_a_token(pg_url, redis_url, tmp_path):
    with pytest.raises(ValueError, match="ADMIN_TOKEN is required"):
        create_app(Settings(database_url=pg_url))
    with pytest.raises(ValueError, match="ADMIN_TOKEN is required"):
        create_app(Settings(database_url=f"sqlite:///{tmp_path}/x.db", redis_url=redis_url))
    assert Settings(database_url=f"sqlite:///{tmp_path}/x.db").embedded
    create_app(Settings(database_url=f"sqlite:///{tmp_path}/x.db"))  # embedded: fine


def test_register_promote_rollback_with_audit(
    make_client, make_checkpoint, tmp_path, auth, fake_loader
):
    store = tmp_path / "model_store"
    for v, validity in (("v1", 0.7), ("v2", 0.9)):
        make_checkpoint(v, metrics={"holdout_validity": validity})
    c = make_client(model_loader=fake_loader, model_store=store, admin_name="ops-alice")

    r = c.post(
        "/admin/checkpoints",
        json={"path": "v1", "reason": "first model", "promote": True},
        headers=auth,
    )
    assert r.status_code == 201, r.text
    assert r.json()["version"] == "v1" and r.json()["status"] == "production"
    assert r.json()["path"] == "v1" and len(r.json()["sha256"]) == 64
    r = c.post("/admin/checkpoints", json={"path": "v2", "reason": "stage 2"}, headers=auth)
    assert r.status_code == 201 and r.json()["status"] == "candidate"
    assert c.app.state.watcher.version == "v1"

    r = c.post("/admin/checkpoints/v2/promote", json={"reason": "better holdout"}, headers=auth)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["production"]["version"] == "v2" and body["previous"]["version"] == "v1"
    assert body["previous"]["status"] == "archived"
    assert c.app.state.watcher.version == "v2"  # no restart
    listed = c.get("/admin/checkpoints", headers=auth).json()
    assert {x["version"]: x["status"] for x in listed} == {"v1": "archived", "v2": "production"}
    assert [
        x["version"] for x in c.get("/admin/checkpoints?status=archived", headers=auth).json()
    ] == ["v1"]

    r = c.post("/admin/rollback", json={"reason": "v2 regressed online"}, headers=auth)
    assert r.status_code == 200
    assert r.json()["production"]["version"] == "v1"
    assert r.json()["previous"] == {**r.json()["previous"], "version": "v2", "status": "rejected"}
    assert c.app.state.watcher.version == "v1"
    assert fake_loader.loaded == ["v1", "v2", "v1"]

    actions = c.get("/admin/actions", headers=auth).json()
    assert [(a["action"], a["target"], a["reason"]) for a in actions] == [
        ("rollback", "v1", "v2 regressed online"),
        ("promote", "v2", "better holdout"),
        ("register", "v2", "stage 2"),
        ("promote", "v1", "first model"),
        ("register", "v1", "first model"),
    ]
    assert {a["actor"] for a in actions} == {"ops-alice"}
    assert actions[0]["detail"] == {"rolled_back": "v2"}
    assert actions[1]["detail"] == {"previous": "v1"}


def test_admin_errors_are_4xx(client, auth, make_checkpoint, tmp_path):
    r = client.post("/admin/checkpoints/nope/promote", json=REASON, headers=auth)
    assert r.status_code == 404 and r.json()["code"] == "not_found"
    r = client.post("/admin/rollback", json=REASON, headers=auth)
    assert r.status_code == 409 and r.json()["code"] == "conflict"
    r = client.post("/admin/checkpoints/v1/promote", json={}, headers=auth)
    assert r.status_code == 422 and "reason" in r.json()["message"]
    r = client.post(
        "/admin/checkpoints", json={"path": "../../etc", "reason": "x" * 5}, headers=auth
    )
    assert r.status_code == 422 and "outside MODEL_STORE" in r.json()["message"]
    r = client.post("/admin/checkpoints", json={"path": "missing", "reason": "x" * 5}, headers=auth)
    assert r.status_code == 422 and r.json()["code"] == "invalid_checkpoint"


def test_promotion_by_another_process_is_picked_up_by_polling(
    make_client, make_checkpoint, tmp_path, pg_engine, fake_loader
):
    from tasmopt.store import (
        describe_checkpoint,
        make_sessionmaker,
        promote_checkpoint,
        register_checkpoint,
    )

    store = tmp_path / "model_store"
    c = make_client(model_loader=fake_loader, model_store=store, model_poll_s=0.1)
    assert c.app.state.watcher.version is None
    with make_sessionmaker(pg_engine)() as s, s.begin():  # e.g. `tasmopt checkpoint register`
        register_checkpoint(s, info=describe_checkpoint(make_checkpoint("v9"), store=store))
        promote_checkpoint(s, version="v9")
    assert _wait_for(lambda: c.app.state.watcher.version == "v9")
    metrics = c.get("/metrics").text
    assert 'tasmopt_model_info{version="v9"} 1.0' in metrics


def test_phase(make_client, auth, make_checkpoint, fake_loader, tmp_path):
    make_checkpoint("v1", metrics={"holdout_validity": 0.85, "holdout_validity_ci_low": 0.75})
    c = make_client(model_loader=fake_loader)
    out = c.get("/admin/phase", headers=auth).json()
    assert out["phase"] == "A" and out["production"] is None and out["model_loaded"] is None
    assert set(out["buffer"]) >= {"rows", "blocks", "online", "by_source"}
    r = c.post(
        "/admin/checkpoints",
        json={"path": "v1", "reason": "go live", "promote": True},
        headers=auth,
    )
    assert r.status_code == 201, r.text
    out = c.get("/admin/phase", headers=auth).json()
    assert out["production"]["version"] == "v1" and out["model_loaded"] == "v1"
    assert out["detail"]["phase_a_exit_met"]
    assert out["phase"] == ("B" if out["buffer"]["online"] >= 100 else "A")


def test_finetune_trigger_in_process(client, auth):
    r = client.post("/admin/finetune", json={"reason": "new corpus"}, headers=auth)
    assert r.status_code == 202 and r.json()["backend"] == "thread"
    job_id = r.json()["job_id"]

    def recorded():
        last = client.get("/admin/phase", headers=auth).json()["last_finetune"]
        return last is not None and last["job_id"] == job_id and last

    assert _wait_for(recorded)
    last = recorded()
    assert last["trigger"] == "admin" and last["detail"]["force"] is True
    # the service's learning loop ran: this app has no production checkpoint to finetune
    assert last["outcome"] == "no_new_results"
    assert last["detail"]["note"] == "no production checkpoint"
    action = client.get("/admin/actions", headers=auth).json()[0]
    assert (action["action"], action["target"], action["reason"]) == (
        "finetune",
        job_id,
        "new corpus",
    )


def test_finetune_trigger_on_rq(make_client, auth, redis_url, redis_conn, pg_url):
    from rq import SimpleWorker

    from worker import context
    from worker.queue import LEARN_QUEUE, SERIALIZER, named_queue

    c = make_client(redis_url=redis_url)
    r = c.post("/admin/finetune", json={"reason": "nightly"}, headers=auth)
    assert r.status_code == 202 and r.json()["backend"] == "rq"
    queue = named_queue(redis_conn, LEARN_QUEUE)
    assert queue.count == 1
    context.configure(database_url=pg_url)
    SimpleWorker([queue], connection=redis_conn, serializer=SERIALIZER).work(
        burst=True, logging_level="WARNING"
    )
    last = c.get("/admin/phase", headers=auth).json()["last_finetune"]
    assert last["job_id"] == r.json()["job_id"] and last["trigger"] == "admin"


@pytest.mark.parametrize(
    "token", ["changeme", "short-token", "a" * 16, "x" * 64, "ab" * 12, "0123" * 6]
)
def test_weak_admin_tokens_are_refused(token, tmp_path):
    from pydantic import ValidationError

    from service.core.config import Settings

    with pytest.raises(ValidationError, match="ADMIN_TOKEN"):
        Settings(spool_dir=tmp_path, admin_token=token)


def test_a_generated_admin_token_is_accepted(tmp_path):
    import secrets

    from service.core.config import Settings, token_bits

    token = secrets.token_urlsafe(32)
    assert token_bits(token) > 150
    assert Settings(spool_dir=tmp_path, admin_token=token).admin_token is not None
