"""build_results: the replay buffer (one row per served function and block)

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "build_results",
        sa.Column("id", sa.Uuid(), primary_key=True),
        sa.Column("request_id", sa.Uuid(), nullable=False),
        sa.Column("tir_hash", sa.String(64), nullable=False),
        sa.Column("function", sa.String(256), nullable=False),
        sa.Column("block_index", sa.Integer(), nullable=True),
        sa.Column("tasm", sa.Text(), nullable=False),
        sa.Column("valid", sa.Boolean(), nullable=False),
        sa.Column("clock_cycles", sa.Integer(), nullable=True),
        sa.Column("compiler_cycles", sa.Integer(), nullable=True),
        sa.Column(
            "table_heights",
            sa.JSON().with_variant(postgresql.JSONB(), "postgresql"),
            nullable=False,
        ),
        sa.Column("padded_height", sa.Integer(), nullable=True),
        sa.Column("fallback_used", sa.Boolean(), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("model_version", sa.String(128), nullable=True),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        sa.Column("latency_ms", sa.Float(), nullable=False),
    )
    op.create_index("ix_build_results_tir_hash", "build_results", ["tir_hash"])
    op.create_index("ix_build_results_created_at", "build_results", ["created_at"])
    op.create_index("ix_build_results_source", "build_results", ["source"])
    op.create_index("ix_build_results_request_id", "build_results", ["request_id"])


def downgrade() -> None:
    op.drop_index("ix_build_results_request_id", table_name="build_results")
    op.drop_index("ix_build_results_source", table_name="build_results")
    op.drop_index("ix_build_results_created_at", table_name="build_results")
    op.drop_index("ix_build_results_tir_hash", table_name="build_results")
    op.drop_table("build_results")
