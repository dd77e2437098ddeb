"""trajectories: every judged candidate (the replay buffer's steps), and block contexts

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-26
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _json() -> sa.types.TypeEngine:
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.add_column("build_results", sa.Column("context", _json(), nullable=True))
    op.create_table(
        "trajectories",
        sa.Column("id", sa.Uuid(), primary_key=True),
        sa.Column("build_result_id", sa.Uuid(), nullable=False),
        sa.Column("tir_hash", sa.String(64), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("tasm", sa.Text(), nullable=False),
        sa.Column("accepted", sa.Boolean(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("reason_class", sa.String(32), nullable=True),
        sa.Column("cycles", sa.Integer(), nullable=False),
        sa.Column("baseline_cycles", sa.Integer(), nullable=False),
        sa.Column("heights", _json(), nullable=False),
        sa.Column("logprob", sa.Float(), nullable=True),
        sa.Column("model_version", sa.String(128), nullable=True),
        sa.Column("reward", sa.Float(), nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
    )
    op.create_index("ix_trajectories_build_result_id", "trajectories", ["build_result_id"])
    op.create_index("ix_trajectories_tir_hash", "trajectories", ["tir_hash"])
    op.create_index("ix_trajectories_created_at", "trajectories", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_trajectories_created_at", table_name="trajectories")
    op.drop_index("ix_trajectories_tir_hash", table_name="trajectories")
    op.drop_index("ix_trajectories_build_result_id", table_name="trajectories")
    op.drop_table("trajectories")
    op.drop_column("build_results", "context")
