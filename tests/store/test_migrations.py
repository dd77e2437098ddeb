"""Alembic owns the schema: up, down, up again, and the models match the migrations."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from service.core.db import downgrade, migrate, schema_status
from tasmopt.store import Base, make_engine

EXPECTED_INDEXES = {
    "ix_build_results_tir_hash",
    "ix_build_results_created_at",
    "ix_build_results_source",
    "ix_build_results_request_id",
}

OPERATIONS_TABLES = {
    "checkpoints",
    "admin_actions",
    "compile_jobs",
    "finetune_runs",
    "trajectories",
}


@pytest.fixture(params=["postgresql", "sqlite"])
def empty_engine(request, pg_database_factory, tmp_path):
    url = (
        pg_database_factory(migrate=False)
        if request.param == "postgresql"
        else f"sqlite:///{tmp_path}/sub/dir/tasmopt.db"
    )
    engine = make_engine(url)
    yield engine
    engine.dispose()


def test_upgrade_downgrade_upgrade(empty_engine):
    assert not schema_status(empty_engine).migrated
    migrate(empty_engine)
    status = schema_status(empty_engine)
    assert status.migrated and status.current == status.head == "0005"
    insp = inspect(empty_engine)
    assert set(insp.get_table_names()) >= {"build_results", *OPERATIONS_TABLES}
    assert EXPECTED_INDEXES <= {ix["name"] for ix in insp.get_indexes("build_results")}
    assert "uq_checkpoints_one_production" in {ix["name"] for ix in insp.get_indexes("checkpoints")}
    assert "context" in {c["name"] for c in insp.get_columns("build_results")}
    assert "ix_trajectories_created_at" in {ix["name"] for ix in insp.get_indexes("trajectories")}

    downgrade(empty_engine, "0004")
    assert "trajectories" not in inspect(empty_engine).get_table_names()
    assert "context" not in {c["name"] for c in inspect(empty_engine).get_columns("build_results")}

    downgrade(empty_engine, "0001")
    assert not set(inspect(empty_engine).get_table_names()) & OPERATIONS_TABLES
    downgrade(empty_engine, "base")
    assert "build_results" not in inspect(empty_engine).get_table_names()
    assert schema_status(empty_engine).current is None

    migrate(empty_engine)
    assert schema_status(empty_engine).migrated


def test_models_match_migrations(empty_engine):
    migrate(empty_engine)
    with empty_engine.connect() as conn:
        diff = compare_metadata(
            MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata
        )
    assert diff == []
