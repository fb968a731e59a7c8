"""What ``kant serve`` is started with (:class:`ServeConfig`): the command line's options, typed.

The executor's own settings are not fields here: ``executor`` names a line of
:data:`kant.service.executors.EXECUTORS` and ``executor_settings`` is an instance of that line's
settings model (its fields are the executor's ``kant serve`` options; None: the model's defaults).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kant.service.executors.base import ExecutorSettings

__all__ = ["DEFAULT_PORT", "ServeConfig"]

DEFAULT_PORT = 8787


@dataclass
class ServeConfig:
    db_url: str = "sqlite:///kant.db"
    cluster: str | None = None
    policy: str = "kant"
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    executor: str = "simulated"  # a name in EXECUTORS
    executor_settings: ExecutorSettings | None = None  # an instance of EXECUTORS[executor]'s model (None: defaults)
    clock: str = "wall"  # wall | accelerated | manual
    speed: float = 1.0
    clock_start: float | None = None
    admin_token: str | None = None
    token_out: Path | None = None  # where a generated admin token is written
    advertise_url: str | None = None
    default_estimate: float = 86400.0
    seed: int = 0
    demo: str | None = None  # a trace to replay into the service
    demo_limit: int | None = None
    demo_start: float = 0.0  # replay the demo trace from this far after its first submit
    estimate_noise: float = 0.0  # demo: estimates = true run time x exp(N(0, sigma)) (0: exact)
    estimate_noise_seed: int = 0
    max_body: int = 1 << 20
    standby_poll_s: float = 0.5
    log_level: str = "info"
    predict: bool = True  # keep predicted start times fresh (the digital twin)
    predict_runs: int = 10  # sampled runs per prediction
    predict_every: float = 5.0  # at most one prediction per this many wall seconds
    predict_workers: int | None = None  # prediction processes (None: half the CPUs, 1 to 4)
    whatif_budget: float = 30.0  # wall seconds of simulation per what-if request (twice that: stopped)
    whatif_queue: int = 4  # what-if requests running or waiting at most (one per tenant or admin token)
    services: str | None = None  # a services file (kant.inference.services): created or updated when leading
    queues: str | None = None  # a queues file (kant.plugins.queues): the tree of queues applied to the policy
    db_wait: float = 30.0  # at start, seconds to keep trying a database that cannot be reached (0: none)
    # the request route of inference services (kant.service.api.serve)
    route_queue: int = 1000  # requests of one service waiting for a replica at most (more: 503)
    route_queue_timeout: float = 30.0  # seconds a request waits for a replica at most (then 503)
    route_concurrency: int = 64  # requests at one replica at once at most (0: no limit); more wait in the queue
    route_timeout: float = 300.0  # seconds a replica has to answer (then 504)
