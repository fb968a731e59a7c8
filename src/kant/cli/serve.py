"""``kant serve``: run the live scheduler (see docs/service.md)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import click

from kant.cli._common import SEED, Duration, FiniteFloat, OneLineCommand, fail
from kant.errors import KantError

__all__ = ["serve"]


@click.command(cls=OneLineCommand)
@click.option("--db", "db_url", default="sqlite:///kant.db", show_default=True, envvar="KANT_DB",
              help="SQLAlchemy URL: sqlite:///PATH (embedded, one service) or postgresql+psycopg://... "
                   "(several services, leader election).")
@click.option("--cluster", default=None,
              help="Nodes to register on the first start (as in `kant simulate`; default philly); later "
                   "starts use the database's nodes.")
@click.option("--policy", default="kant", show_default=True, help="Bundled policy name or policy YAML file.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8787, show_default=True, type=click.IntRange(0, 65535))
@click.option("--executor", type=click.Choice(["simulated", "ray"]), default="simulated", show_default=True,
              help="Where jobs run: simulated (a job runs for its duration_s) or ray (each worker a Ray task "
                   "on the node kant chose; docs/ray.md).")
@click.option("--ray-address", default="auto", show_default=True, metavar="auto|HOST:PORT",
              help="With --executor ray: the Ray cluster (its nodes are the cluster when --cluster is not given).")
@click.option("--log-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("kant-logs"),
              show_default=True, help="With --executor ray: where workers' output is kept (kant logs).")
@click.option("--checkpoint-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("kant-checkpoints"),
              show_default=True, help="With --executor ray: KANT_CHECKPOINT_DIR of job N is DIR/job-N (storage "
                                      "every node sees).")
@click.option("--ray-start-timeout", type=FiniteFloat(min=0, min_open=True, max=86400), default=60.0,
              show_default=True, help="With --executor ray: seconds a gang's workers have to start, or it goes "
                                      "back to the queue.")
@click.option("--clock", type=click.Choice(["wall", "accelerated", "manual"]), default=None,
              help="Service time: wall (default), accelerated (--speed x wall time; default with --demo) or "
                   "manual (moved by POST /v1/clock; for tests and exact replays).")
@click.option("--speed", type=FiniteFloat(min=0, min_open=True, max=1e9), default=1.0, show_default=True,
              help="Seconds of service time per wall second with the accelerated clock.")
@click.option("--clock-start", type=FiniteFloat(), default=None,
              help="Start time of an accelerated or manual clock (default: where the database left off).")
@click.option("--demo", default=None, metavar="TRACE",
              help="Replay a trace into the service (e.g. philly) at --speed; jobs run for their trace durations.")
@click.option("--demo-limit", type=click.IntRange(min=1), default=None, help="Only the first N jobs of the demo trace.")
@click.option("--admin-token-file", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="A file holding an admin token to accept (or set KANT_ADMIN_TOKEN).")
@click.option("--token-out", type=click.Path(dir_okay=False, path_type=Path), default=Path("kant-admin.token"),
              show_default=True, help="Where a generated admin token is written when none is configured.")
@click.option("--advertise-url", default=None, help="URL other services and clients reach this one at.")
@click.option("--default-estimate", type=Duration(positive=True), default="24h", show_default=True,
              help="Run time the scheduler plans with for a job submitted without estimate_s.")
@click.option("--seed", default=0, show_default=True, type=SEED)
@click.option("--predict/--no-predict", default=True, show_default=True,
              help="Keep predicted start times of pending jobs fresh (the digital twin, in a worker process).")
@click.option("--predict-runs", type=click.IntRange(1, 100), default=10, show_default=True,
              help="Sampled runs behind each prediction's band.")
@click.option("--predict-every", type=FiniteFloat(min=0.1, max=86400), default=5.0, show_default=True,
              help="At most one prediction per this many wall seconds (bounds the twin's CPU).")
@click.option("--whatif-budget", type=FiniteFloat(min=0, min_open=True, max=3600), default=30.0, show_default=True,
              help="Wall seconds of simulation one what-if request may use: runs stop before passing it (the "
                   "answer says so); a request without one run of each scenario by twice this is refused (422).")
@click.option("--whatif-queue", type=click.IntRange(1, 64), default=4, show_default=True,
              help="What-if requests running or waiting at most (one per tenant or admin token; more: 429).")
@click.option("--db-wait", type=FiniteFloat(min=0, max=86400), default=30.0, show_default=True,
              help="At start, seconds to keep trying a database that cannot be reached (a PostgreSQL server "
                   "restarting) before giving up; 0: give up at once.")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info",
              show_default=True)
def serve(db_url: str, cluster: str | None, policy: str, host: str, port: int, executor: str, ray_address: str,
          log_dir: Path, checkpoint_dir: Path, ray_start_timeout: float, clock: str | None,
          speed: float, clock_start: float | None, demo: str | None, demo_limit: int | None,
          admin_token_file: Path | None, token_out: Path, advertise_url: str | None, default_estimate: float,
          seed: int, predict: bool, predict_runs: int, predict_every: float, whatif_budget: float,
          whatif_queue: int, db_wait: float, log_level: str) -> None:
    """Run the live scheduler: the REST API (/v1, /docs), /metrics, and the scheduling loop."""
    from kant.service.server import ServeConfig, Service

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    token = os.environ.get("KANT_ADMIN_TOKEN") or None
    if admin_token_file is not None:
        try:
            token = admin_token_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            fail(f"{admin_token_file}: {exc.strerror or exc}")
        if not token:
            fail(f"{admin_token_file}: the file is empty")
    if demo is not None and clock == "manual":
        fail("--demo replays on a moving clock: use --clock accelerated (the default with --demo) or wall")
    if clock is None:
        clock = "accelerated" if demo is not None else "wall"
    if cluster is None and executor != "ray":  # (with ray, the nodes come from the Ray cluster)
        cluster = "philly"
    config = ServeConfig(db_url=db_url, cluster=cluster, policy=policy, host=host, port=port, executor=executor,
                         ray_address=ray_address, log_dir=log_dir, checkpoint_dir=checkpoint_dir,
                         start_timeout=ray_start_timeout,
                         clock=clock, speed=speed, clock_start=clock_start, admin_token=token, token_out=token_out,
                         advertise_url=advertise_url, default_estimate=default_estimate, seed=seed,
                         demo=demo, demo_limit=demo_limit, log_level=log_level, predict=predict,
                         predict_runs=predict_runs, predict_every=predict_every, whatif_budget=whatif_budget,
                         whatif_queue=whatif_queue, db_wait=db_wait)
    try:
        Service(config).run()
    except KantError as exc:
        fail(str(exc))
