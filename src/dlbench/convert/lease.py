"""Leases on a shared filesystem: exclusive-create files with an owner and a heartbeat.

A lease is the file `<dir>/<name>.lease`, created with O_CREAT | O_EXCL (atomic on local filesystems and on NFSv3+),
holding the owner's host and pid. Its owner refreshes the file's mtime every `heartbeat_s` seconds. A lease is
stale when its mtime is older than `timeout_s`, or at once when its owner is a process on this host that no longer
exists. A stale lease is broken by renaming it to a unique name (only one contender's rename can succeed) and
then taking it with an exclusive create. No database and no lock server are involved.

Leases keep workers from doing the same work twice; correctness does not depend on them, because every output is
written under a temporary name and renamed into place, and the same unit always produces the same bytes.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path

HOST = os.environ.get("DLBENCH_HOST") or socket.gethostname()  # override: tests simulate several hosts


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Lease:
    """A held lease; `release()` removes it. A heartbeat thread keeps it fresh while held."""

    def __init__(self, path: Path, heartbeat_s: float):
        self.path = path
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, args=(heartbeat_s,), daemon=True)
        self._thread.start()

    def _beat(self, every: float) -> None:
        while not self._stop.wait(every):
            try:
                os.utime(self.path)
            except FileNotFoundError:
                return  # broken by someone else: our output is still valid, just possibly duplicated

    def release(self) -> None:
        self._stop.set()
        self._thread.join()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


class LeaseDir:
    def __init__(self, directory: str | Path, timeout_s: float = 60.0, heartbeat_s: float | None = None):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.timeout_s = timeout_s
        self.heartbeat_s = heartbeat_s if heartbeat_s is not None else max(timeout_s / 6, 0.05)

    def path(self, name: str) -> Path:
        return self.dir / f"{name}.lease"

    def owner(self, name: str) -> dict | None:
        try:
            return json.loads(self.path(name).read_text() or "{}")
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def is_stale(self, name: str) -> bool:
        path = self.path(name)
        try:
            age = time.time() - path.stat().st_mtime
        except FileNotFoundError:
            return False
        if age > self.timeout_s:
            return True
        owner = self.owner(name)
        if owner and owner.get("host") == HOST and not _pid_alive(int(owner.get("pid", -1))):
            return True
        # an owner that died between create and writing its record leaves an empty file: wait for the timeout
        return False

    def try_acquire(self, name: str) -> Lease | None:
        """Take the lease `name` if it is free or stale; None if another live owner holds it."""
        path = self.path(name)
        if path.exists() and self.is_stale(name):
            broken = self.dir / f"{name}.broken.{HOST}.{os.getpid()}.{time.time_ns()}"
            try:
                os.rename(path, broken)
                os.unlink(broken)
            except FileNotFoundError:
                pass  # another contender broke it first
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return None
        with os.fdopen(fd, "w") as f:
            json.dump({"host": HOST, "pid": os.getpid(), "since": time.time()}, f)
        return Lease(path, self.heartbeat_s)
