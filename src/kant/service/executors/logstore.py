"""Where the output of a real executor's workers is kept: one file per job, run and worker under a
root folder (``ROOT/job-42/run-1/worker-0.log``, stdout and stderr together, as the worker wrote
them). The executor appends as output arrives; the API reads any byte range from any thread.
"""

from __future__ import annotations

import codecs
import re
import threading
from collections import deque
from pathlib import Path

from kant.service.executors.base import LogChunk

__all__ = ["LogStore"]

_RUN = re.compile(r"run-(\d+)$")
_WORKER = re.compile(r"worker-(\d+)\.log$")


class LogStore:
    """Workers' output on the service's disk, with the last lines of each worker kept in memory
    (what a failed job's reason quotes)."""

    def __init__(self, root: Path, tail_lines: int = 20) -> None:
        self.root = Path(root)
        self.tail_lines = tail_lines
        self._tails: dict[tuple[int, int, int], deque[str]] = {}
        self._partial: dict[tuple[int, int, int], str] = {}
        self._lock = threading.Lock()

    def path(self, job_id: int, run: int, worker: int) -> Path:
        return self.root / f"job-{job_id}" / f"run-{run}" / f"worker-{worker}.log"

    def size(self, job_id: int, run: int, worker: int) -> int:
        """Bytes of the worker's output kept so far (where collecting it goes on after a restart)."""
        try:
            return self.path(job_id, run, worker).stat().st_size
        except FileNotFoundError:
            return 0

    def append(self, job_id: int, run: int, worker: int, data: bytes) -> None:
        if not data:
            return
        path = self.path(job_id, run, worker)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("ab") as f:
            f.write(data)
        key = (job_id, run, worker)
        with self._lock:
            tail = self._tails.setdefault(key, deque(maxlen=self.tail_lines))
            lines = (self._partial.pop(key, "") + data.decode("utf-8", "replace")).split("\n")
            self._partial[key] = lines.pop()
            tail.extend(lines)

    def tail(self, job_id: int, run: int, worker: int, lines: int = 5) -> str:
        """The last ``lines`` lines this worker wrote (its unfinished last line included)."""
        key = (job_id, run, worker)
        with self._lock:
            kept = list(self._tails.get(key, ()))
            rest = self._partial.get(key, "")
        if rest:
            kept.append(rest)
        return "\n".join(kept[-lines:])

    def forget(self, job_id: int, run: int) -> None:
        """Drop the in-memory tails of a run that ended (its files stay)."""
        with self._lock:
            for key in [k for k in self._tails if k[:2] == (job_id, run)]:
                del self._tails[key]
                self._partial.pop(key, None)

    def runs(self, job_id: int) -> list[int]:
        folder = self.root / f"job-{job_id}"
        if not folder.is_dir():
            return []
        return sorted(int(m.group(1)) for p in folder.iterdir() if (m := _RUN.match(p.name)))

    def workers(self, job_id: int, run: int) -> int:
        folder = self.root / f"job-{job_id}" / f"run-{run}"
        if not folder.is_dir():
            return 0
        found = [int(m.group(1)) for p in folder.iterdir() if (m := _WORKER.match(p.name))]
        return max(found) + 1 if found else 0

    def read(self, job_id: int, worker: int = 0, *, run: int | None = None, offset: int = 0,
             limit: int = 1 << 20) -> LogChunk:
        """Bytes from ``offset`` (at most ``limit``) of a worker's output, cut at a whole UTF-8
        character so that the next read from ``next_offset`` continues the text exactly."""
        if run is None:
            runs = self.runs(job_id)
            run = runs[-1] if runs else 0
        path = self.path(job_id, run, worker)
        try:
            with path.open("rb") as f:
                size = f.seek(0, 2)
                start = min(max(offset, 0), size)
                f.seek(start)
                data = f.read(max(limit, 4))
        except FileNotFoundError:
            size, start, data = 0, 0, b""
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        text = decoder.decode(data, final=False)
        used = len(data) - len(decoder.getstate()[0])
        if used == 0 and data:  # nothing but a cut character (or bytes that are no UTF-8): take them
            text, used = data.decode("utf-8", "replace"), len(data)
        return LogChunk(job_id, run, worker, self.workers(job_id, run), start, start + used, size, text)
