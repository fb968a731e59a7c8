"""``kant serve --demo TRACE --estimate-noise SIGMA``: the replay's estimates are off by a lognormal
factor drawn once per job with a seed (docs/whatif.md), from ``--demo-start``; misuse is one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kant.service.demo import Demo


def test_noisy_estimates_are_lognormal_around_the_true_run_time_and_seeded() -> None:
    exact = Demo("philly", 2000, 42 * 86400.0)
    noisy = Demo("philly", 2000, 42 * 86400.0, estimate_noise=1.0, noise_seed=12)
    dur = np.asarray(exact.jobs().duration, dtype=np.float64)
    assert float(exact.jobs().submit[0]) >= 42 * 86400.0
    ok = dur > 0
    assert np.allclose(np.asarray(exact.estimates())[ok], dur[ok])
    log_factor = np.log(np.asarray(noisy.estimates())[ok] / dur[ok])
    assert abs(float(np.median(log_factor))) < 0.1 and 0.9 < float(np.std(log_factor)) < 1.1
    again = Demo("philly", 2000, 42 * 86400.0, estimate_noise=1.0, noise_seed=12).estimates()
    assert np.array_equal(np.asarray(again), np.asarray(noisy.estimates()), equal_nan=True)
    other = Demo("philly", 2000, 42 * 86400.0, estimate_noise=1.0, noise_seed=13).estimates()
    assert not np.array_equal(np.asarray(other), np.asarray(noisy.estimates()), equal_nan=True)


@pytest.mark.parametrize("args, message", [
    (["--estimate-noise", "1"], "error: --demo-start and --estimate-noise shape a --demo replay: give --demo TRACE"),
    (["--demo", "unified", "--port", "8999", "--estimate-noise", "1"],
     "error: --demo unified replays its own slice with exact estimates: --demo-start and --estimate-noise are for a "
     "trace's replay"),
])
def test_noise_without_a_trace_replay_is_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    r = subprocess.run([sys.executable, "-m", "kant.cli.main", "serve", *args, "--db",
                        f"sqlite:///{tmp_path / 'kant.db'}"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.strip() == message, r.stderr
