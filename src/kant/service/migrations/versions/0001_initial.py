"""Initial schema: tenants, tokens, services, jobs, nodes, events, meta.

Revision ID: 0001
Revises:
Create Date: 2025-01-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# BIGINT on PostgreSQL; INTEGER on SQLite, where only "INTEGER PRIMARY KEY" is the rowid.
BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


# One long function on purpose: a migration is frozen history (one create_table per table, never restructured).
def upgrade() -> None:
    """Create every table."""
    op.create_table(
        "tenants",
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("guaranteed_gpus", sa.Integer(), nullable=True),
        sa.Column("max_gpus", sa.Integer(), nullable=True),
        sa.Column("created_wall", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_tenants"),
    )
    op.create_table(
        "tokens",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("tenant", sa.String(64), nullable=True),
        sa.Column("created_wall", sa.Double(), nullable=False),
        sa.Column("expires_wall", sa.Double(), nullable=True),
        sa.Column("revoked_wall", sa.Double(), nullable=True),
        sa.ForeignKeyConstraint(["tenant"], ["tenants.name"], name="fk_tokens_tenant_tenants"),
        sa.PrimaryKeyConstraint("id", name="pk_tokens"),
        sa.UniqueConstraint("token_hash", name="uq_tokens_token_hash"),
    )
    op.create_table(
        "services",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("tenant", sa.String(64), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("gpus_per_replica", sa.Integer(), nullable=False),
        sa.Column("gpu_type", sa.String(64), nullable=True),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("replicas", sa.Integer(), nullable=False),
        sa.Column("min_replicas", sa.Integer(), nullable=False),
        sa.Column("max_replicas", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("created_wall", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(["tenant"], ["tenants.name"], name="fk_services_tenant_tenants"),
        sa.PrimaryKeyConstraint("id", name="pk_services"),
    )
    op.create_index(
        "uq_services_tenant_name_active", "services", ["tenant", "name"], unique=True,
        sqlite_where=sa.text("state = 'active'"), postgresql_where=sa.text("state = 'active'"),
    )
    op.create_table(
        "jobs",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("tenant", sa.String(64), nullable=False),
        sa.Column("user", sa.String(128), nullable=False),
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("kind", sa.SmallInteger(), nullable=False),
        sa.Column("service_id", sa.Integer(), nullable=True),
        sa.Column("workers", sa.Integer(), nullable=False),
        sa.Column("gpus_per_worker", sa.Integer(), nullable=False),
        sa.Column("gpu_milli", sa.Integer(), nullable=False),
        sa.Column("gpu_type", sa.String(64), nullable=True),
        sa.Column("cpu_milli", sa.Integer(), nullable=False),
        sa.Column("memory_mib", sa.Integer(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("estimate_s", sa.Double(), nullable=True),
        sa.Column("duration_s", sa.Double(), nullable=True),
        sa.Column("command", sa.Text(), nullable=True),
        sa.Column("labels", sa.Text(), nullable=False),
        sa.Column("idempotency_key", sa.String(128), nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("submit_time", sa.Double(), nullable=False),
        sa.Column("first_start_time", sa.Double(), nullable=True),
        sa.Column("start_time", sa.Double(), nullable=True),
        sa.Column("end_time", sa.Double(), nullable=True),
        sa.Column("placement", sa.Text(), nullable=True),
        sa.Column("runs", sa.Integer(), server_default="0", nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("created_wall", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(["service_id"], ["services.id"], name="fk_jobs_service_id_services"),
        sa.ForeignKeyConstraint(["tenant"], ["tenants.name"], name="fk_jobs_tenant_tenants"),
        sa.PrimaryKeyConstraint("id", name="pk_jobs"),
        sa.UniqueConstraint("tenant", "idempotency_key", name="uq_jobs_tenant_idempotency_key"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_jobs_state_id", "jobs", ["state", "id"])
    op.create_index("ix_jobs_tenant_state_id", "jobs", ["tenant", "state", "id"])
    op.create_table(
        "nodes",
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("gpu_type", sa.String(64), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("cpu_milli", sa.Integer(), nullable=False),
        sa.Column("memory_mib", sa.Integer(), nullable=False),
        sa.Column("leaf", sa.String(128), nullable=True),
        sa.Column("spine", sa.String(128), nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("updated_wall", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_nodes"),
        sa.UniqueConstraint("position", name="uq_nodes_position"),
    )
    op.create_table(
        "events",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("time", sa.Double(), nullable=False),
        sa.Column("wall", sa.Double(), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("job_id", sa.BigInteger(), nullable=True),
        sa.Column("node", sa.String(128), nullable=True),
        sa.Column("tenant", sa.String(64), nullable=True),
        sa.Column("message", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_events"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_events_job_id", "events", ["job_id"])
    op.create_index("ix_events_tenant_id", "events", ["tenant", "id"])
    op.create_table(
        "meta",
        sa.Column("key", sa.String(64), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("key", name="pk_meta"),
    )


def downgrade() -> None:
    """Drop every table."""
    for table in ("meta", "events", "nodes", "jobs", "services", "tokens", "tenants"):
        op.drop_table(table)
