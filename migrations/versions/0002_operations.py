"""operations: checkpoint registry, admin audit log, async compile jobs, finetune runs

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _json() -> sa.types.TypeEngine:
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "checkpoints",
        sa.Column("version", sa.String(128), primary_key=True),
        sa.Column("parent", sa.String(128), nullable=True),
        sa.Column("stage", sa.String(32), nullable=False),
        sa.Column("metrics", _json(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        sa.Column("promoted_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index(
        "uq_checkpoints_one_production",
        "checkpoints",
        ["status"],
        unique=True,
        postgresql_where=sa.text("status = 'production'"),
        sqlite_where=sa.text("status = 'production'"),
    )

    op.create_table(
        "admin_actions",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("actor", sa.String(64), nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("target", sa.String(128), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("detail", _json(), nullable=False),
    )
    op.create_index("ix_admin_actions_at", "admin_actions", ["at"])

    op.create_table(
        "compile_jobs",
        sa.Column("id", sa.Uuid(), primary_key=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("backend", sa.String(16), nullable=False),
        sa.Column("request", _json(), nullable=False),
        sa.Column("response", _json(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_compile_jobs_created_at", "compile_jobs", ["created_at"])

    op.create_table(
        "finetune_runs",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column(
            "started_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("trigger", sa.String(16), nullable=False),
        sa.Column("outcome", sa.String(32), nullable=False),
        sa.Column("new_results", sa.Integer(), nullable=False),
        sa.Column("watermark", sa.DateTime(timezone=True), nullable=True),
        sa.Column("checkpoint_version", sa.String(128), nullable=True),
        sa.Column("job_id", sa.String(64), nullable=True),
        sa.Column("detail", _json(), nullable=False),
    )
    op.create_index("ix_finetune_runs_started_at", "finetune_runs", ["started_at"])


def downgrade() -> None:
    op.drop_index("ix_finetune_runs_started_at", table_name="finetune_runs")
    op.drop_table("finetune_runs")
    op.drop_index("ix_compile_jobs_created_at", table_name="compile_jobs")
    op.drop_table("compile_jobs")
    op.drop_index("ix_admin_actions_at", table_name="admin_actions")
    op.drop_table("admin_actions")
    op.drop_index("uq_checkpoints_one_production", table_name="checkpoints")
    op.drop_table("checkpoints")
