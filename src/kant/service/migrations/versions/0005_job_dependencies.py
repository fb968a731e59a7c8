"""Job dependencies (Slurm's --dependency and --kill-on-invalid-dep), holds (kant hold / release) and job
arrays (kant submit --array).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add the columns (nullable: the jobs before have no dependency)."""
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("dependency", sa.Text(), nullable=True))
        batch.add_column(sa.Column("kill_on_invalid_dep", sa.Boolean(), nullable=True))
        batch.add_column(sa.Column("held", sa.Text(), nullable=True))
        batch.add_column(sa.Column("array_task_id", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("array_position", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("array_throttle", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        for column in ("array_throttle", "array_position", "array_task_id", "held"):
            batch.drop_column(column)
        batch.drop_column("kill_on_invalid_dep")
        batch.drop_column("dependency")
