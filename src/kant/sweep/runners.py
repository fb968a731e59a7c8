"""Where a study's runs execute: local processes, or Ray tasks (one task per run, retried when a
worker dies). Both hand each :class:`~kant.sweep.runs.RunOutcome` to a callback as it finishes, in
completion order; a run that fails is an outcome with its error and the others go on.

Every run executes in a worker whose BLAS uses one thread (:data:`ONE_THREAD`, set before NumPy is
imported there): BLAS sums in an order that depends on its thread count, so a BLAS call on a metric
would give different last bits on machines with different core counts, or locally and on Ray (whose
workers get ``OMP_NUM_THREADS=1``). The metrics' weighted means no longer use BLAS (that was the case
found); the setting stays as a guard.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from typing import Any

from kant.errors import KantError
from kant.sweep.runs import InputFile, RunOutcome, RunTask, execute, materialise

__all__ = ["run_local", "run_ray"]

Done = Callable[[RunOutcome], None]

#: the environment of every run's worker: BLAS libraries on one thread
ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _execute_here(task: RunTask) -> RunOutcome:
    return execute(task)


@contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """``os.environ`` with ``values`` while processes are spawned, restored after."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_local(tasks: Sequence[RunTask], done: Done, workers: int = 1) -> None:
    """Run ``tasks`` in ``workers`` fresh (spawned) processes whose BLAS uses one thread."""
    spawn = multiprocessing.get_context("spawn")  # a forked child would keep this process's BLAS threads
    with _environment(ONE_THREAD), ProcessPoolExecutor(max_workers=max(1, min(workers, len(tasks))),
                                                       mp_context=spawn) as pool:
        pending: dict[Future[RunOutcome], RunTask] = {pool.submit(_execute_here, t): t for t in tasks}
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in finished:
                task = pending.pop(fut)
                try:
                    outcome = fut.result()
                except BrokenProcessPool:
                    outcome = RunOutcome(task.key, None, None, "a worker process died (killed or out of memory)")
                done(outcome)


def _ray_task(task: RunTask, digests: list[str], *data: bytes) -> RunOutcome:
    """The body of the Ray task: write the inputs this node lacks, then run (``data``: the bytes of the
    input files named by ``digests``; top-level arguments, so Ray hands over the values, not refs)."""
    blobs = dict(zip(digests, data, strict=True))

    def locate(file: InputFile) -> str:
        return materialise(file, blobs[file.digest])

    return execute(task, locate)


def run_ray(tasks: Sequence[RunTask], done: Done, address: str | None = None, *, max_retries: int = 3) -> None:
    """Run ``tasks`` on Ray, one task per run (``max_retries`` retries when its worker or node dies).

    ``address`` ``None`` starts a local Ray (or uses the one this process already joined); else
    ``ray.init(address=...)`` (``auto``, ``ray://host:10001``, ``host:6379``). Every input file goes
    to the object store once and is written on the nodes that run the study, so a remote cluster needs
    kant installed but not the study's files.
    """
    try:
        import ray
        from ray.exceptions import RayError
    except ImportError:
        raise KantError("--ray needs Ray: pip install 'kant[ray]'") from None
    started = False
    if not ray.is_initialized():
        try:
            ray.init(address=address, include_dashboard=False, log_to_driver=False,
                     configure_logging=False) if address is None else ray.init(address=address, log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise KantError(f"cannot start or join Ray at {address or 'a local cluster'}: {exc}") from None
        started = True
    try:
        remote = ray.remote(_ray_task).options(num_cpus=1, max_retries=max_retries, name="kant-sweep-run",
                                               runtime_env={"env_vars": ONE_THREAD})
        files: dict[str, InputFile] = {}
        for t in tasks:
            for f in (t.trace, t.cluster, t.services):
                if isinstance(f, InputFile):
                    files[f.digest] = f
        refs = {digest: ray.put(_read(f)) for digest, f in files.items()}
        pending: dict[Any, RunTask] = {}
        for t in tasks:
            digests = [f.digest for f in (t.trace, t.cluster, t.services) if isinstance(f, InputFile)]
            pending[remote.remote(t, digests, *(refs[d] for d in digests))] = t
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                task = pending.pop(ref)
                try:
                    outcome = ray.get(ref)
                except RayError as exc:
                    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                    outcome = RunOutcome(task.key, None, None, f"Ray: {first}")
                done(outcome)
    finally:
        if started:
            ray.shutdown()


def _read(file: InputFile) -> bytes:
    with open(file.path, "rb") as f:
        return f.read()
