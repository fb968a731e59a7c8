"""The service database's schema: the SQLAlchemy tables, their metadata, and the constants every
repository shares (states, lock keys, the leader epoch's key, :data:`UNSET`).

A new column is added here, in a new migration (``kant/service/migrations/versions``), and in the row
type of its table's repository; ``tests/service/test_db.py`` checks that the migrations and this
metadata agree.
"""

from __future__ import annotations

import enum
from typing import Final

import sqlalchemy as sa

__all__ = [
    "ACTIVE_STATES",
    "EPOCH_KEY",
    "JOB_STATES",
    "LEADER_LOCK_KEY",
    "MIGRATION_LOCK_KEY",
    "NODE_STATES",
    "UNSET",
    "WRITER_LOCK_KEY",
    "Unset",
    "events",
    "job_runs",
    "jobs",
    "meta",
    "metadata",
    "nodes",
    "services",
    "tenants",
    "tokens",
]

# Fixed 64-bit PostgreSQL advisory lock keys (ASCII "kant_mig", "kant_ldr", "kant_wrt").
MIGRATION_LOCK_KEY: Final = 0x6B616E745F6D6967
LEADER_LOCK_KEY: Final = 0x6B616E745F6C6472
WRITER_LOCK_KEY: Final = 0x6B616E745F777274

JOB_STATES: Final = ("pending", "running", "finished", "failed", "cancelled", "timeout", "unschedulable")
NODE_STATES: Final = ("up", "cordoned", "draining", "down", "removed")
ACTIVE_STATES: Final = ("pending", "running")
EPOCH_KEY: Final = "leader_epoch"


class Unset(enum.Enum):
    """The type of :data:`UNSET`."""

    UNSET = "UNSET"


UNSET: Final = Unset.UNSET
"""Default of update fields: leave the stored value as it is (``None`` sets SQL NULL)."""


metadata: Final = sa.MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

# BIGINT on PostgreSQL; INTEGER on SQLite, where only "INTEGER PRIMARY KEY" is the rowid.
BigId: Final = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

tenants: Final = sa.Table(
    "tenants",
    metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("guaranteed_gpus", sa.Integer, nullable=True),
    sa.Column("max_gpus", sa.Integer, nullable=True),
    sa.Column("created_wall", sa.Double, nullable=False),
    sa.Column("default_time_limit_s", sa.Double, nullable=True),  # (0002)
    sa.Column("max_time_limit_s", sa.Double, nullable=True),  # (0002)
)

tokens: Final = sa.Table(
    "tokens",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
    sa.Column("name", sa.String(128), nullable=False),
    sa.Column("role", sa.String(16), nullable=False),
    sa.Column("tenant", sa.String(64), sa.ForeignKey("tenants.name"), nullable=True),
    sa.Column("created_wall", sa.Double, nullable=False),
    sa.Column("expires_wall", sa.Double, nullable=True),
    sa.Column("revoked_wall", sa.Double, nullable=True),
)

services: Final = sa.Table(
    "services",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("tenant", sa.String(64), sa.ForeignKey("tenants.name"), nullable=False),
    sa.Column("name", sa.String(128), nullable=False),
    sa.Column("gpus_per_replica", sa.Integer, nullable=False),
    sa.Column("gpu_type", sa.String(64), nullable=True),
    sa.Column("priority", sa.Integer, nullable=False),
    sa.Column("replicas", sa.Integer, nullable=False),
    sa.Column("min_replicas", sa.Integer, nullable=False),
    sa.Column("max_replicas", sa.Integer, nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("created_wall", sa.Double, nullable=False),
    # serving (migration 0003): what a replica runs and how kant knows it serves
    sa.Column("command", sa.Text, nullable=True),  # None: replicas hold GPUs and run nothing
    sa.Column("port", sa.Integer, nullable=False, server_default="0"),  # 0: kant picks one per replica
    sa.Column("ready_path", sa.String(256), nullable=False, server_default="/health"),
    sa.Column("ready_timeout_s", sa.Double, nullable=False, server_default="30"),
    sa.Column("slo_ms", sa.Double, nullable=True),
    sa.Column("capacity_rps", sa.Double, nullable=True),
    sa.Column("concurrency", sa.Integer, nullable=True),
    sa.Column("autoscaler", sa.Text, nullable=True),  # HpaConfig as JSON; None: no autoscaling
    sa.Column("degraded", sa.Text, nullable=True),  # why the service is degraded; None: it is not
    # One active service per (tenant, name); a deleted service's name can be used again.
    sa.Index(
        "uq_services_tenant_name_active",
        "tenant",
        "name",
        unique=True,
        sqlite_where=sa.text("state = 'active'"),
        postgresql_where=sa.text("state = 'active'"),
    ),
)

jobs: Final = sa.Table(
    "jobs",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("tenant", sa.String(64), sa.ForeignKey("tenants.name"), nullable=False),
    sa.Column("user", sa.String(128), nullable=False),
    sa.Column("name", sa.String(256), nullable=False),
    sa.Column("kind", sa.SmallInteger, nullable=False),
    sa.Column("service_id", sa.Integer, sa.ForeignKey("services.id"), nullable=True),
    sa.Column("workers", sa.Integer, nullable=False),
    sa.Column("gpus_per_worker", sa.Integer, nullable=False),
    sa.Column("gpu_milli", sa.Integer, nullable=False),
    sa.Column("gpu_type", sa.String(64), nullable=True),
    sa.Column("cpu_milli", sa.Integer, nullable=False),
    sa.Column("memory_mib", sa.Integer, nullable=False),
    sa.Column("priority", sa.Integer, nullable=False),
    sa.Column("estimate_s", sa.Double, nullable=True),
    sa.Column("duration_s", sa.Double, nullable=True),
    sa.Column("command", sa.Text, nullable=True),
    sa.Column("labels", sa.Text, nullable=False),
    sa.Column("idempotency_key", sa.String(128), nullable=True),
    sa.Column("chdir", sa.Text, nullable=True),  # (0002)
    sa.Column("environment", sa.Text, nullable=True),  # (0002) JSON object; NULL: the node's environment
    sa.Column("time_limit_s", sa.Double, nullable=True),  # (0002)
    sa.Column("dependency", sa.Text, nullable=True),  # (0005) Slurm's form with job ids: afterok:41:42
    sa.Column("kill_on_invalid_dep", sa.Boolean, nullable=True),  # (0005) NULL: false
    sa.Column("array_task_id", sa.Integer, nullable=True),  # (0005) a job array's task: its index
    sa.Column("array_position", sa.Integer, nullable=True),  # (0005) array id = id - array_position
    sa.Column("array_throttle", sa.Integer, nullable=True),  # (0005) the array's %N
    sa.Column("min_workers", sa.Integer, nullable=True),  # (0006) an elastic gang's bounds; NULL: rigid
    sa.Column("max_workers", sa.Integer, nullable=True),  # (0006)
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("reason", sa.Text, nullable=True),
    sa.Column("submit_time", sa.Double, nullable=False),
    sa.Column("first_start_time", sa.Double, nullable=True),
    sa.Column("start_time", sa.Double, nullable=True),
    sa.Column("end_time", sa.Double, nullable=True),
    sa.Column("placement", sa.Text, nullable=True),
    sa.Column("runs", sa.Integer, nullable=False, server_default="0"),
    sa.Column("exit_code", sa.Integer, nullable=True),
    sa.Column("created_wall", sa.Double, nullable=False),
    sa.Column("held", sa.Text, nullable=True),  # (0005) who holds the pending job (kant hold); NULL: not held
    sa.UniqueConstraint("tenant", "idempotency_key"),
    sa.Index("ix_jobs_state_id", "state", "id"),
    sa.Index("ix_jobs_tenant_state_id", "tenant", "state", "id"),
    sqlite_autoincrement=True,
)

nodes: Final = sa.Table(
    "nodes",
    metadata,
    sa.Column("name", sa.String(128), primary_key=True),
    sa.Column("position", sa.Integer, nullable=False, unique=True),
    sa.Column("gpu_type", sa.String(64), nullable=False),
    sa.Column("gpus", sa.Integer, nullable=False),
    sa.Column("cpu_milli", sa.Integer, nullable=False),
    sa.Column("memory_mib", sa.Integer, nullable=False),
    sa.Column("leaf", sa.String(128), nullable=True),
    sa.Column("spine", sa.String(128), nullable=True),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("reason", sa.Text, nullable=True),
    sa.Column("updated_wall", sa.Double, nullable=False),
)

events: Final = sa.Table(
    "events",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("time", sa.Double, nullable=False),
    sa.Column("wall", sa.Double, nullable=False),
    sa.Column("kind", sa.String(32), nullable=False),
    sa.Column("job_id", sa.BigInteger, nullable=True, index=True),
    sa.Column("node", sa.String(128), nullable=True),
    sa.Column("tenant", sa.String(64), nullable=True),
    sa.Column("message", sa.Text, nullable=False),
    sa.Index("ix_events_tenant_id", "tenant", "id"),
    sqlite_autoincrement=True,
)

#: every run of a job that ended (0004): a job's runs are its starts; one ends finished, failed,
#: cancelled or timed out, or goes back to the queue (requeued, preempted, lost, could not start).
#: Written in the turn that ends it, from the jobs row it ends (``kant.service.db.runs``).
job_runs: Final = sa.Table(
    "job_runs",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("job_id", sa.BigInteger, nullable=False),
    sa.Column("run", sa.Integer, nullable=False),
    sa.Column("tenant", sa.String(64), nullable=False),
    sa.Column("user", sa.String(128), nullable=False),
    sa.Column("submit_time", sa.Double, nullable=False),
    sa.Column("start_time", sa.Double, nullable=False),
    sa.Column("end_time", sa.Double, nullable=False),
    sa.Column("nodes", sa.Text, nullable=False),  # JSON list: one node name per worker
    sa.Column("gpus", sa.Integer, nullable=False),  # workers x gpus_per_worker
    sa.Column("gpu_milli", sa.Integer, nullable=False),  # a share of one GPU per worker (1000: whole GPUs)
    sa.Column("end", sa.String(32), nullable=False),  # the event that ended it: finished, failed, requeued, ...
    sa.Column("reason", sa.Text, nullable=True),
    sa.Column("exit_code", sa.Integer, nullable=True),
    sa.Index("ix_job_runs_end_time", "end_time"),
    sa.Index("ix_job_runs_job_id_run", "job_id", "run"),
    sqlite_autoincrement=True,
)

meta: Final = sa.Table(
    "meta",
    metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)
