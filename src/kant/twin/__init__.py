"""The digital twin of a live cluster: snapshot its state, run it forward with the simulator, predict
when each pending job starts, and compare what-if changes (docs/whatif.md)."""

from kant.twin.forward import run_forward
from kant.twin.predict import DEFAULT_RUNS, Prediction, predict, sample_durations
from kant.twin.snapshot import SNAPSHOT_VERSION, SnapshotError, TwinSnapshot

__all__ = [
    "DEFAULT_RUNS",
    "SNAPSHOT_VERSION",
    "Prediction",
    "SnapshotError",
    "TwinSnapshot",
    "predict",
    "run_forward",
    "sample_durations",
]
