"""Jobs run like Slurm's: a job's working directory, environment and time limit; a tenant's default
and maximum time limit.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add the columns (all nullable: the jobs and tenants of 0001 have none of them)."""
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("chdir", sa.Text(), nullable=True))
        batch.add_column(sa.Column("environment", sa.Text(), nullable=True))
        batch.add_column(sa.Column("time_limit_s", sa.Double(), nullable=True))
    with op.batch_alter_table("tenants") as batch:
        batch.add_column(sa.Column("default_time_limit_s", sa.Double(), nullable=True))
        batch.add_column(sa.Column("max_time_limit_s", sa.Double(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tenants") as batch:
        batch.drop_column("max_time_limit_s")
        batch.drop_column("default_time_limit_s")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("time_limit_s")
        batch.drop_column("environment")
        batch.drop_column("chdir")
