"""Leases on a shared filesystem: exclusive-create files with an owner and a heartbeat.

A lease on `name` is a sequence of generation files `<dir>/<name>.<gen>.lease`; the highest generation is the
current one. Each is created with O_CREAT | O_EXCL (atomic on local filesystems and on NFSv3+) and holds its owner's
host and pid; its owner refreshes the file's mtime every `heartbeat_s` seconds. Releasing renames the file to
`<name>.<gen>.released`. The lease is free when its highest generation is released, and stale when that file's
mtime is older than `timeout_s`, or at once when its owner is a process on this host that no longer exists.

Taking the lease, free or stale, means creating generation `highest + 1` with an exclusive create: of all
contenders that saw the same state exactly one succeeds, and no one ever deletes or touches a file it does not own,
so a slow former owner cannot remove or keep alive its successor's lease. No database and no lock server.

Leases keep workers from doing the same work twice; correctness does not depend on them, because every output is
written under a temporary name and renamed into place, and the same unit always produces the same bytes.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import threading
import time
from pathlib import Path

LEASE_TIMEOUT_S = 60.0  # a lease not renewed for this long is taken over by another worker
HOST = os.environ.get("DLBENCH_HOST") or socket.gethostname()  # override: tests simulate several hosts
_GEN_FILE = re.compile(r"^(?P<name>.+)\.(?P<gen>\d+)\.(?P<state>lease|released)$")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Lease:
    """A held lease (one generation file); `release()` marks it released. A heartbeat thread keeps it fresh."""

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
                return  # cleaned up after a takeover: our output is still valid, just possibly duplicated

    def release(self) -> None:
        self._stop.set()
        self._thread.join()
        with contextlib.suppress(FileNotFoundError):
            os.rename(self.path, self.path.with_suffix(".released"))


class LeaseDir:
    def __init__(self, directory: str | Path, timeout_s: float = 60.0, heartbeat_s: float | None = None):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.timeout_s = timeout_s
        self.heartbeat_s = heartbeat_s if heartbeat_s is not None else max(timeout_s / 6, 0.05)

    def generations(self, name: str) -> list[tuple[int, Path]]:
        """Every generation file of `name` (held or released), oldest first."""
        found = []
        for p in self.dir.glob(f"{name}.*.*"):
            m = _GEN_FILE.match(p.name)
            if m and m["name"] == name:
                found.append((int(m["gen"]), p))
        return sorted(found)

    def current(self, name: str) -> Path | None:
        """The highest generation file of `name`, or None if it was never leased."""
        gens = self.generations(name)
        return gens[-1][1] if gens else None

    def held(self) -> list[str]:
        """Names whose current generation is held (not released)."""
        names = {m["name"] for p in self.dir.glob("*.lease") if (m := _GEN_FILE.match(p.name))}
        return sorted(n for n in names if (cur := self.current(n)) is not None and cur.suffix == ".lease")

    def owner(self, name: str) -> dict | None:
        cur = self.current(name)
        if cur is None or cur.suffix != ".lease":
            return None
        try:
            return json.loads(cur.read_text() or "{}")
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def _free(self, path: Path | None) -> bool:
        """Whether the generation file `path` (the current one) may be superseded."""
        if path is None or path.suffix == ".released":
            return True
        try:
            age = time.time() - path.stat().st_mtime
            owner = json.loads(path.read_text() or "{}")
        except FileNotFoundError:
            return True  # released or cleaned up while we looked; the exclusive create decides
        except json.JSONDecodeError:
            owner = {}
        if age > self.timeout_s:
            return True
        # an owner that died between create and writing its record leaves an empty file: wait for the timeout
        return owner.get("host") == HOST and "pid" in owner and not _pid_alive(int(owner["pid"]))

    def is_stale(self, name: str) -> bool:
        cur = self.current(name)
        return cur is not None and cur.suffix == ".lease" and self._free(cur)

    def try_acquire(self, name: str) -> Lease | None:
        """Take the lease `name` if it is free or stale; None if another live owner holds it."""
        gens = self.generations(name)
        cur_gen, cur = gens[-1] if gens else (-1, None)
        if not self._free(cur):
            return None
        path = self.dir / f"{name}.{cur_gen + 1}.lease"
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return None  # another contender took this generation first
        with os.fdopen(fd, "w") as f:
            json.dump({"host": HOST, "pid": os.getpid(), "since": time.time(), "generation": cur_gen + 1}, f)
        for _, old in gens:  # superseded generations: nobody reads them again
            with contextlib.suppress(FileNotFoundError):
                os.unlink(old)
        return Lease(path, self.heartbeat_s)
