"""``kant serve``: run the live scheduler (see docs/service.md).

The command is built from two lists of fixed options and, between them, ``--executor`` and the
options of every executor: its choices are :data:`kant.service.executors.EXECUTORS`, and each field
of an executor's settings model is one option (:func:`setting_option`), so a new executor brings
its options with its one registry line.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import click
from pydantic.fields import FieldInfo

from kant.cli._common import DEFAULT_CLUSTER, SEED, Duration, FiniteFloat, OneLineCommand, fail
from kant.config.validation import validate
from kant.errors import KantError
from kant.service.config import ServeConfig
from kant.service.executors import EXECUTORS, ExecutorEntry, ExecutorSettings, Option

__all__ = ["executor_options", "serve", "serve_command", "setting_option"]

Decorator = Callable[[Any], Any]  # a click.option(...)




#: the options before ``--executor``
_BEFORE: list[Decorator] = [
    click.option("--db", "db_url", default="sqlite:///kant.db", show_default=True, envvar="KANT_DB",
                 help="SQLAlchemy URL: sqlite:///PATH (embedded, one service) or postgresql+psycopg://... "
                      "(several services, leader election)."),
    click.option("--cluster", default=None,
                 help=f"Nodes to register on the first start (as in `kant simulate`; default {DEFAULT_CLUSTER}); later "
                      "starts use the database's nodes."),
    click.option("--policy", default="kant", show_default=True, help="Bundled policy name or policy YAML file."),
    click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on."),
    click.option("--port", default=8787, show_default=True, type=click.IntRange(0, 65535)),
]

#: the options after every executor's
_AFTER: list[Decorator] = [
    click.option("--clock", type=click.Choice(["wall", "accelerated", "manual"]), default=None,
                 help="Service time: wall (default), accelerated (--speed x wall time; default with --demo) or "
                      "manual (moved by POST /v1/clock; for tests and exact replays)."),
    click.option("--speed", type=FiniteFloat(min=0, min_open=True, max=1e9), default=1.0, show_default=True,
                 help="Seconds of service time per wall second with the accelerated clock."),
    click.option("--clock-start", type=FiniteFloat(), default=None,
                 help="Start time of an accelerated or manual clock (default: where the database left off)."),
    click.option("--demo", default=None, metavar="TRACE",
                 help="Replay a trace into the service (e.g. philly) at --speed; jobs run for their trace durations. "
                      "`unified`: training and inference on one cluster: a Philly slice, a service of example model "
                      "servers and its Azure traffic (default --policy unified, --cluster 2x8:V100, --speed 60)."),
    click.option("--demo-limit", type=click.IntRange(min=1), default=None,
                 help="Only the first N jobs of the demo trace."),
    click.option("--demo-start", type=Duration(), default=None,
                 help="Replay the demo trace from this far after its first submit (e.g. 42d)."),
    click.option("--estimate-noise", type=FiniteFloat(min=0, max=10), default=0.0, show_default=True,
                 metavar="SIGMA",
                 help="--demo: submit each job with its true run time x exp(N(0, SIGMA)) as its estimate (users' "
                      "estimates are off; 0: exact), drawn with --estimate-noise-seed."),
    click.option("--estimate-noise-seed", default=0, show_default=True, type=SEED,
                 help="--demo --estimate-noise: the seed of the estimates' errors."),
    click.option("--services", "services", default=None, metavar="FILE",
                 help="A services file (as `kant simulate --services`; with command, port, ready_path for the live "
                      "replicas): its services are created or updated when this service leads (docs/inference.md)."),
    click.option("--queues", "queues", default=None, metavar="FILE",
                 help="A queues file (as `kant simulate --queues`): a tree of queues with guarantees and "
                      "borrowing/lending limits that tenants map to, applied to the policy (docs/policy-quotas.md)."),
    click.option("--admin-token-file", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
                 help="A file holding an admin token to accept (or set KANT_ADMIN_TOKEN)."),
    click.option("--token-out", type=click.Path(dir_okay=False, path_type=Path), default=Path("kant-admin.token"),
                 show_default=True, help="Where a generated admin token is written when none is configured."),
    click.option("--advertise-url", default=None, help="URL other services and clients reach this one at."),
    click.option("--default-estimate", type=Duration(positive=True), default="24h", show_default=True,
                 help="Run time the scheduler plans with for a job submitted without estimate_s."),
    click.option("--seed", default=0, show_default=True, type=SEED),
    click.option("--predict/--no-predict", default=True, show_default=True,
                 help="Keep predicted start times of pending jobs fresh (the digital twin, in worker processes)."),
    click.option("--predict-runs", type=click.IntRange(1, 100), default=10, show_default=True,
                 help="Sampled runs behind each prediction's band."),
    click.option("--predict-every", type=FiniteFloat(min=0.1, max=86400), default=5.0, show_default=True,
                 help="At most one prediction per this many wall seconds (bounds the twin's CPU)."),
    click.option("--predict-workers", type=click.IntRange(1, 64), default=None, show_default="half the CPUs, 1-4",
                 help="Processes that make a prediction's runs side by side: the answers are the same for any "
                      "count, and fresher with more."),
    click.option("--whatif-budget", type=FiniteFloat(min=0, min_open=True, max=3600), default=30.0,
                 show_default=True,
                 help="Wall seconds of simulation one what-if request may use: runs stop before passing it (the "
                      "answer says so); a request without one run of each scenario by twice this is refused (422)."),
    click.option("--whatif-queue", type=click.IntRange(1, 64), default=4, show_default=True,
                 help="What-if requests running or waiting at most (one per tenant or admin token; more: 429)."),
    click.option("--db-wait", type=FiniteFloat(min=0, max=86400), default=30.0, show_default=True,
                 help="At start, seconds to keep trying a database that cannot be reached (a PostgreSQL server "
                      "restarting) before giving up; 0: give up at once."),
    click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info",
                 show_default=True),
    # the request route of inference services (docs/service.md, "Serving requests")
    click.option("--route-queue", type=click.IntRange(0, 1_000_000), default=1000, show_default=True,
                 help="Requests of one service that may wait for a replica (more: 503 at once; 0: no queue)."),
    click.option("--route-queue-timeout", type=FiniteFloat(min=0, min_open=True, max=3600), default=30.0,
                 show_default=True, help="Seconds a request waits for a ready, free replica before a 503."),
    click.option("--route-concurrency", type=click.IntRange(0, 1_000_000), default=64, show_default=True,
                 help="Requests at one replica at once at most (0: no limit); more wait in the service's queue."),
    click.option("--route-timeout", type=FiniteFloat(min=0, min_open=True, max=86400), default=300.0,
                 show_default=True, help="Seconds a replica has to answer a request (then 504)."),
]


#: pydantic's bound (annotated_types' attribute) -> click's range argument, and whether it is open
_BOUNDS = (("gt", "min", True), ("ge", "min", False), ("lt", "max", True), ("le", "max", False))


def _bounds(info: FieldInfo) -> dict[str, Any]:
    """A field's bounds (pydantic's gt, ge, lt, le) as click range arguments."""
    out: dict[str, Any] = {}
    for m in info.metadata:
        for attr, key, is_open in _BOUNDS:
            value = getattr(m, attr, None)
            if value is not None:
                out[key] = value
                out[f"{key}_open"] = is_open
    return out


def _click_type(info: FieldInfo, option: Option) -> click.ParamType[Any] | None:
    """The click type of a setting, with its bounds (None: click's default, a string)."""
    kind = info.annotation
    if kind is float:
        return FiniteFloat(**_bounds(info))
    if kind is int:
        bounds = _bounds(info)
        return click.IntRange(**bounds) if bounds else click.INT
    if kind is Path:
        return click.Path(file_okay=not option.folder, path_type=Path)
    if kind is str:
        return None
    raise TypeError(f"{option.flag}: a setting of type {kind} has no command-line form (str, int, float, Path)")


def setting_option(executor: str, info: FieldInfo) -> tuple[Decorator, str]:
    """The option of one setting of ``executor`` (its :class:`Option`, default, bounds and help), and
    the name click gives its value."""
    option = next((m for m in info.metadata if isinstance(m, Option)), None)
    if option is None:
        raise TypeError(f"a setting of executor {executor!r} has no Option in its Annotated metadata")
    attrs: dict[str, Any] = {"default": info.default, "show_default": True,
                             "help": f"With --executor {executor}: {info.description or ''}".rstrip()}
    kind = _click_type(info, option)
    if kind is not None:
        attrs["type"] = kind
    if option.metavar is not None:
        attrs["metavar"] = option.metavar
    return click.option(option.flag, **attrs), option.flag.lstrip("-").replace("-", "_")


def executor_options(executors: Mapping[str, ExecutorEntry]) -> tuple[list[Decorator], dict[str, tuple[str, str]]]:
    """``--executor`` (its choices and help from ``executors``; the first is the default) and every
    executor's options, in order; and which setting each option's value is: click's name ->
    (executor, field)."""
    about = [f"{name} ({entry.about})" for name, entry in executors.items()]
    listed = about[0] if len(about) == 1 else f"{', '.join(about[:-1])} or {about[-1]}"
    options: list[Decorator] = [click.option("--executor", type=click.Choice(list(executors)),
                                             default=next(iter(executors)), show_default=True,
                                             help=f"Where jobs run: {listed}.")]
    settings: dict[str, tuple[str, str]] = {}
    for name, entry in executors.items():
        for field, info in entry.load_settings().model_fields.items():
            option, dest = setting_option(name, info)
            if dest in settings:
                raise ValueError(f"executors {settings[dest][0]!r} and {name!r} both have the option {dest}")
            options.append(option)
            settings[dest] = (name, field)
    return options, settings


def serve_command(executors: Mapping[str, ExecutorEntry] = EXECUTORS) -> click.Command:
    """``kant serve``, offering ``executors`` (:data:`~kant.service.executors.EXECUTORS`)."""
    chosen, settings = executor_options(executors)

    def serve(executor: str, **options: Any) -> None:
        """Run the live scheduler: the REST API (/v1, /docs), /metrics, and the scheduling loop."""
        mine = {field: options.pop(dest) for dest, (name, field) in settings.items() if name == executor}
        for dest in settings:
            options.pop(dest, None)
        try:
            executor_settings = validate(executors[executor].load_settings(), mine, f"--executor {executor}")
        except KantError as exc:
            fail(str(exc))
        _run(executor=executor, executor_settings=executor_settings,
             discovers_nodes=executors[executor].load().discovers_nodes, **options)

    command: Callable[..., Any] = serve
    for option in reversed([*_BEFORE, *chosen, *_AFTER]):
        command = option(command)
    return click.command("serve", cls=OneLineCommand)(command)


def _run(db_url: str, cluster: str | None, policy: str, host: str, port: int, executor: str,
         executor_settings: ExecutorSettings, discovers_nodes: bool, clock: str | None,
         speed: float, clock_start: float | None, demo: str | None, demo_limit: int | None,
         demo_start: float | None, estimate_noise: float, estimate_noise_seed: int,
         admin_token_file: Path | None, token_out: Path, advertise_url: str | None, default_estimate: float,
         seed: int, predict: bool, predict_runs: int, predict_every: float, predict_workers: int | None,
         whatif_budget: float,
         whatif_queue: int, db_wait: float, log_level: str, services: str | None, route_queue: int,
         route_queue_timeout: float, route_concurrency: int, route_timeout: float, queues: str | None = None) -> None:
    from kant.service.serve import serve as run_service

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # (httpx logs every request at info: the replicas' readiness probes, twice a second each)
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLevelName(log_level.upper())))
    token = os.environ.get("KANT_ADMIN_TOKEN") or None
    if admin_token_file is not None:
        try:
            token = admin_token_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            fail(f"{admin_token_file}: {exc.strerror or exc}")
        if not token:
            fail(f"{admin_token_file}: the file is empty")
    if services is not None:
        from kant.inference.services import load_services

        try:
            load_services(services)  # (checked now: a wrong key is one line before anything starts)
        except KantError as exc:
            fail(str(exc))
    if queues is not None:
        from kant.plugins.queues import load_queues

        try:
            load_queues(queues)  # (checked now: a wrong key is one line before anything starts)
        except KantError as exc:
            fail(str(exc))
    if demo == "unified":  # (kant.service.demo: its cluster, policy and speed unless given)
        from kant.service.demo import UnifiedDemo

        given = click.get_current_context().get_parameter_source
        defaults = UnifiedDemo()
        if given("policy") == click.core.ParameterSource.DEFAULT:
            policy = defaults.policy
        if given("speed") == click.core.ParameterSource.DEFAULT:
            speed = defaults.speed
        if cluster is None and not discovers_nodes:
            cluster = defaults.cluster
        if port == 0:
            fail("--demo unified sends its traffic to --port: give one other than 0")
        from kant.traces.registry import load_load

        try:  # (its traffic's trace is checked now: a missing file is one line before anything starts)
            load_load(defaults.traffic)
        except KantError as exc:
            fail(f"--demo unified replays {defaults.traffic} as its service's traffic: {exc}")
    if demo is None and (demo_start is not None or estimate_noise):
        fail("--demo-start and --estimate-noise shape a --demo replay: give --demo TRACE")
    if demo == "unified" and (demo_start is not None or estimate_noise):
        fail("--demo unified replays its own slice with exact estimates: --demo-start and --estimate-noise are for "
             "a trace's replay")
    if demo is not None and clock == "manual":
        fail("--demo replays on a moving clock: use --clock accelerated (the default with --demo) or wall")
    if clock is None:
        clock = "accelerated" if demo is not None else "wall"
    if cluster is None and not discovers_nodes:  # (an executor with its own nodes: they are the cluster)
        cluster = DEFAULT_CLUSTER  # (kant simulate's: the demo replays Philly on the cluster a simulation uses)
    config = ServeConfig(db_url=db_url, cluster=cluster, policy=policy, host=host, port=port, executor=executor,
                         executor_settings=executor_settings,
                         clock=clock, speed=speed, clock_start=clock_start, admin_token=token, token_out=token_out,
                         advertise_url=advertise_url, default_estimate=default_estimate, seed=seed,
                         demo=demo, demo_limit=demo_limit, demo_start=demo_start or 0.0,
                         estimate_noise=estimate_noise, estimate_noise_seed=estimate_noise_seed,
                         log_level=log_level, predict=predict,
                         predict_runs=predict_runs, predict_every=predict_every, predict_workers=predict_workers,
                         whatif_budget=whatif_budget,
                         whatif_queue=whatif_queue, db_wait=db_wait, services=services, route_queue=route_queue,
                         route_queue_timeout=route_queue_timeout, route_concurrency=route_concurrency,
                         route_timeout=route_timeout, queues=queues)
    try:
        run_service(config)
    except KantError as exc:
        fail(str(exc))


serve = serve_command()
