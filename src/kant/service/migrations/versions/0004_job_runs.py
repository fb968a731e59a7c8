"""Accounting: every run of a job that ended, with its start, end, nodes, GPUs and exit (``job_runs``).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    """Add ``job_runs``; the runs that ended before are kept as runs of one each: a job that ended
    after running gets its last run (the only one the jobs table kept)."""
    op.create_table(
        "job_runs",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("job_id", sa.BigInteger(), nullable=False),
        sa.Column("run", sa.Integer(), nullable=False),
        sa.Column("tenant", sa.String(64), nullable=False),
        sa.Column("user", sa.String(128), nullable=False),
        sa.Column("submit_time", sa.Double(), nullable=False),
        sa.Column("start_time", sa.Double(), nullable=False),
        sa.Column("end_time", sa.Double(), nullable=False),
        sa.Column("nodes", sa.Text(), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("gpu_milli", sa.Integer(), nullable=False),
        sa.Column("end", sa.String(32), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_job_runs"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_job_runs_end_time", "job_runs", ["end_time"])
    op.create_index("ix_job_runs_job_id_run", "job_runs", ["job_id", "run"])
    op.execute(
        'INSERT INTO job_runs (job_id, run, tenant, "user", submit_time, start_time, end_time, nodes, gpus, gpu_milli,'
        ' "end", reason, exit_code)'
        ' SELECT id, runs, tenant, "user", submit_time, start_time, end_time, placement, workers * gpus_per_worker,'
        " gpu_milli, state, reason, exit_code FROM jobs"
        " WHERE state NOT IN ('pending', 'running') AND start_time IS NOT NULL AND end_time IS NOT NULL"
        " AND placement IS NOT NULL AND runs > 0 ORDER BY id"
    )


def downgrade() -> None:
    op.drop_index("ix_job_runs_job_id_run", table_name="job_runs")
    op.drop_index("ix_job_runs_end_time", table_name="job_runs")
    op.drop_table("job_runs")
