"""The production checkpoint is loaded through the loader hook without a restart, checked
against its sha256, and its absence or failure never breaks the service; the embedded mode
registers and promotes the shipped checkpoint; the phase follows design §4."""

from __future__ import annotations

import sys

import pytest

from service.core.metrics import MODEL_LOAD_FAILURES
from service.core.model_watcher import ModelWatcher, compute_phase, default_loader
from tasmopt.store import (
    describe_checkpoint,
    list_admin_actions,
    list_checkpoints,
    make_engine,
    make_sessionmaker,
    promote_checkpoint,
    register_checkpoint,
)

pytestmark = pytest.mark.usefixtures("clean_registry")


def _promote(pg_engine, directory, store):
    with make_sessionmaker(pg_engine)() as s, s.begin():
        info = describe_checkpoint(directory, store=store)
        register_checkpoint(s, info=info)
        promote_checkpoint(s, version=info.version)


def test_missing_model_package_degrades_to_no_model_source(
    pg_engine, make_checkpoint, tmp_path, monkeypatch, caplog
):
    monkeypatch.setitem(sys.modules, "tasmopt.model.source", None)  # import fails
    store = tmp_path / "model_store"
    _promote(pg_engine, make_checkpoint("v1"), store)
    w = ModelWatcher(session_factory=make_sessionmaker(pg_engine), model_store=store)
    before = MODEL_LOAD_FAILURES._value.get()
    assert w.refresh() is False
    assert w.version is None and w.sources.get("model") is None
    assert "serving without the model source" in caplog.text
    assert MODEL_LOAD_FAILURES._value.get() == before + 1
    assert w.refresh() is False  # not retried (nor logged) at every poll
    assert MODEL_LOAD_FAILURES._value.get() == before + 1


def test_unloadable_checkpoint_never_crashes(
    make_client, pg_engine, make_checkpoint, tmp_path, add_mul_tir
):
    store = tmp_path / "model_store"
    _promote(pg_engine, make_checkpoint("broken"), store)  # random bytes: not a model
    c = make_client(model_store=store, model_loader=default_loader)
    assert c.app.state.watcher.version is None
    assert 'tasmopt_model_info{version="none"} 1.0' in c.get("/metrics").text
    r = c.post("/compile", json={"tir": add_mul_tir})
    assert r.status_code == 200


def test_checksum_mismatch_is_not_loaded(pg_engine, make_checkpoint, tmp_path, fake_loader):
    store = tmp_path / "model_store"
    d = make_checkpoint("v1")
    _promote(pg_engine, d, store)
    (d / "model.safetensors").write_bytes(b"tampered")
    w = ModelWatcher(
        session_factory=make_sessionmaker(pg_engine), model_store=store, loader=fake_loader
    )
    assert w.refresh() is False and w.version is None and fake_loader.loaded == []


def test_load_and_unload_follow_the_pointer(pg_engine, make_checkpoint, tmp_path, fake_loader):
    from sqlalchemy import update

    from tasmopt.store import Checkpoint

    store = tmp_path / "model_store"
    _promote(pg_engine, make_checkpoint("v1"), store)
    w = ModelWatcher(
        session_factory=make_sessionmaker(pg_engine),
        model_store=store,
        loader=fake_loader,
        device="cpu",
    )
    assert w.refresh() is True and w.version == "v1"
    src = w.sources.get("model")
    assert src.version == "v1" and src.directory == store / "v1"
    assert w.refresh() is False  # unchanged
    with make_sessionmaker(pg_engine)() as s, s.begin():
        s.execute(update(Checkpoint).values(status="archived"))
    assert w.refresh() is True and w.version is None and w.sources.get("model") is None


def test_embedded_default_registers_and_promotes_the_shipped_checkpoint(
    make_client, tmp_path, make_checkpoint, fake_loader, auth
):
    store = tmp_path / "shipped"
    make_checkpoint("v2", store=store)
    make_checkpoint("v10", store=store)  # natural order: v10 is the newest
    url = f"sqlite:///{tmp_path}/embedded.db"
    c = make_client(database_url=url, model_store=store, model_loader=fake_loader)
    assert c.app.state.watcher.version == "v10"
    factory = make_sessionmaker(make_engine(url))
    with factory() as s:
        assert [(x.version, x.status, x.path) for x in list_checkpoints(s)] == [
            ("v10", "production", "v10")
        ]
        assert [(a.actor, a.action) for a in list_admin_actions(s)] == [
            ("system", "promote"),
            ("system", "register"),
        ]
    assert c.get("/admin/phase", headers=auth).json()["model_loaded"] == "v10"


def test_embedded_default_with_an_empty_store(make_client, tmp_path):
    c = make_client(
        database_url=f"sqlite:///{tmp_path}/e.db",
        admin_token=None,
        model_store=tmp_path / "nothing",
    )
    assert c.app.state.watcher.version is None
    assert c.get("/healthz").status_code == 200


@pytest.mark.parametrize(
    "metrics,online,phase,a_done",
    [
        (None, 500, "A", False),
        ({"holdout_validity": 0.85, "holdout_validity_ci_low": 0.72}, 99, "A", True),
        ({"holdout_validity": 0.85, "holdout_validity_ci_low": 0.72}, 100, "B", True),
        ({"holdout_validity": 0.85, "holdout_validity_ci_low": 0.65}, 1000, "A", False),
        ({"holdout_validity": 0.79, "holdout_validity_ci_low": 0.75}, 1000, "A", False),
    ],
)
def test_phase_rules(metrics, online, phase, a_done):
    got, detail = compute_phase({"online": online}, metrics)
    assert got == phase and detail["phase_a_exit_met"] is a_done
    assert detail["online_results"] == online


def test_sampling_settings_reach_the_model_source(pg_engine, tmp_path, monkeypatch):
    from service.core.config import Settings
    from tasmopt.model import source

    seen = []
    monkeypatch.setattr(
        source, "load_model_source", lambda path, **kw: seen.append((path, kw)) or "src"
    )
    settings = Settings(
        model_store=tmp_path,
        model_beams=8,
        model_samples=16,
        model_temperature=1.5,
        model_min_instrs=7,
        model_device="cpu",
    )
    w = ModelWatcher.from_settings(settings, make_sessionmaker(pg_engine))
    assert w.loader(tmp_path / "v1", "cpu") == "src"
    assert seen == [
        (
            tmp_path / "v1",
            {
                "device": "cpu",
                "k": 8,
                "samples": 16,
                "temperature": 1.5,
                "min_instrs": 7,
                "precision": "float32",
            },
        )
    ]
    with pytest.raises(ValueError, match="model_samples"):
        Settings(model_samples=-1)
    with pytest.raises(ValueError, match="model_beams"):
        Settings(model_beams=0)
    with pytest.raises(ValueError, match="model_min_instrs"):
        Settings(model_min_instrs=-1)
