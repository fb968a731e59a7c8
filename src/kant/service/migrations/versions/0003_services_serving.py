"""Services that serve: a replica's command, port, readiness probe, load signal, SLO, autoscaler, and
why the service is degraded.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add the serving columns to ``services`` (existing services get no command: they hold GPUs only)."""
    with op.batch_alter_table("services") as batch:
        batch.add_column(sa.Column("command", sa.Text(), nullable=True))
        batch.add_column(sa.Column("port", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("ready_path", sa.String(256), nullable=False, server_default="/health"))
        batch.add_column(sa.Column("ready_timeout_s", sa.Double(), nullable=False, server_default="30"))
        batch.add_column(sa.Column("slo_ms", sa.Double(), nullable=True))
        batch.add_column(sa.Column("capacity_rps", sa.Double(), nullable=True))
        batch.add_column(sa.Column("concurrency", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("autoscaler", sa.Text(), nullable=True))
        batch.add_column(sa.Column("degraded", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("services") as batch:
        for name in ("degraded", "autoscaler", "concurrency", "capacity_rps", "slo_ms", "ready_timeout_s",
                     "ready_path", "port", "command"):
            batch.drop_column(name)
