"""function_results: the per-function result cache

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _json() -> sa.types.TypeEngine:
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "function_results",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("verifier_version", sa.String(32), nullable=False),
        sa.Column("lines", _json(), nullable=True),
        sa.Column("report", _json(), nullable=False),
        sa.Column("cycles", sa.Integer(), nullable=False),
        sa.Column("final", sa.Boolean(), nullable=False),
        sa.Column("budget_s", sa.Float(), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("hits", sa.Integer(), nullable=False),
        sa.Column("spot_checks", sa.Integer(), nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.Column(
            "updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
    )
    op.create_index(
        "ix_function_results_verifier_version", "function_results", ["verifier_version"]
    )
    op.create_index("ix_function_results_updated_at", "function_results", ["updated_at"])


def downgrade() -> None:
    op.drop_index("ix_function_results_updated_at", table_name="function_results")
    op.drop_index("ix_function_results_verifier_version", table_name="function_results")
    op.drop_table("function_results")
