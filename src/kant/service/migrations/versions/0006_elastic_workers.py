"""Elastic gangs: a job's min_workers and max_workers (docs/elastic.md).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add the columns (nullable: the jobs before are rigid)."""
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("min_workers", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("max_workers", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("max_workers")
        batch.drop_column("min_workers")
