"""The admin token file a ``kant serve`` writes when no token is configured (``--token-out``,
``kant-admin.token``): claimed when the service prepares (a lock file beside it, held while the
service runs, so a second service in the same folder refuses to start instead of overwriting it),
written only once the service is ready, atomically (a temporary file renamed over it), mode 600."""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from kant.errors import KantError

__all__ = ["TokenFile"]


class TokenFile:
    """The token file at ``path``, claimed by this process (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock_path = path.with_name(path.name + ".lock")
        self._fd: int | None = None

    def claim(self) -> None:
        """Hold the lock beside the file; :class:`KantError` naming the other service's pid when a
        running service holds it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            other = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise KantError(f"{self.path} belongs to another running kant serve (pid {other}): give this one "
                            "--token-out elsewhere, or a token (KANT_ADMIN_TOKEN, --admin-token-file)") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def write(self, token: str) -> None:
        """Write ``token`` (mode 600) through a temporary file renamed over the path."""
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(token + "\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
