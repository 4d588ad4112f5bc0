"""Peak memory of a process tree, sampled in a background thread, as PSS: each page counted once, split among the
processes sharing it (forked DataLoader workers share the batch ring and their copy-on-write pages, which a sum of
RSS would count once per process)."""

from __future__ import annotations

import os
import threading
import time

import psutil


def _pss_uss(p: psutil.Process) -> tuple[int, int]:
    """PSS, and USS (the pages this process alone maps: what one more worker like it adds)."""
    try:
        full = p.memory_full_info()  # /proc/PID/smaps_rollup
        return full.pss, full.uss
    except (AttributeError, psutil.AccessDenied):  # no PSS on this platform, or not ours to read
        rss = p.memory_info().rss
        return rss, rss


class MemorySampler(threading.Thread):
    """Samples the summed PSS of `pid` (default: this process) and all its descendants.

    `peak` is the largest total seen, in bytes. PSS costs tens of milliseconds of CPU per sample for a loader's
    process tree (the kernel walks every mapped page), taken from the cores being measured; RSS costs almost
    nothing. So RSS is read every `every_s` seconds and PSS only when the summed RSS reaches a new high (by 1%) or
    `pss_every_s` seconds have passed. Use it as a context manager (or call `start()` and `stop()`) so the thread
    ends even when the measured code raises.
    """

    def __init__(self, pid: int | None = None, every_s: float = 0.1, pss_every_s: float = 5.0, also=None):
        super().__init__(daemon=True)
        self.proc, self.every, self.pss_every, self.peak = psutil.Process(pid), every_s, pss_every_s, 0
        self.also = also  # () -> more processes whose trees count among the descendants (a Ray node's)
        self.peak_children = 0  # the descendants' part of `peak` (the DataLoader workers)
        self.peak_children_uss = 0  # their pages of their own, at that peak
        self._rss_high, self._pss_at = 0, float("-inf")
        self._halt = threading.Event()

    def _tree(self) -> list[psutil.Process]:
        try:
            tree = [self.proc, *self.proc.children(recursive=True)]
        except psutil.Error:
            return []
        for root in self.also() if self.also else ():
            try:
                tree += [root, *root.children(recursive=True)]
            except psutil.Error:
                pass
        return list({p.pid: p for p in tree}.values())

    def sample(self, force: bool = True) -> None:
        procs = self._tree()
        if not force:
            rss = 0
            for p in procs:
                try:
                    rss += p.memory_info().rss
                except psutil.Error:
                    pass
            if rss <= 1.01 * self._rss_high and time.monotonic() - self._pss_at < self.pss_every:
                return
            self._rss_high = max(self._rss_high, rss)
        parts = []
        for p in procs:
            try:
                parts.append(_pss_uss(p))
            except psutil.Error:
                parts.append((0, 0))
        self._pss_at = time.monotonic()
        total = sum(pss for pss, _ in parts)
        if total > self.peak:
            self.peak, self.peak_children = total, sum(pss for pss, _ in parts[1:])
            self.peak_children_uss = sum(uss for _, uss in parts[1:])

    def run(self):
        while not self._halt.wait(self.every):
            self.sample(force=False)

    def stop(self):
        self._halt.set()
        self.sample()
        if self.is_alive():
            self.join()

    def __enter__(self) -> MemorySampler:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def host_cpu_seconds() -> float:
    """CPU time (s) every process of this host has used so far, over all its cores (busy: not idle, not waiting on
    I/O)."""
    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


def cpu_by_pid(pids: list[int]) -> dict[int, tuple[float, int]]:
    """For each of the processes `pids` still running: the CPU time (s) it has used so far, with its children's
    that it has waited for (a raylet's workers that ended), and its parent's pid."""
    found = {}
    for pid in pids:
        try:
            p = psutil.Process(pid)
            t, parent = p.cpu_times(), p.ppid()
        except psutil.Error:
            continue
        found[pid] = (t.user + t.system + t.children_user + t.children_system, parent)
    return found


def cpu_since(before: dict[int, tuple[float, int]]) -> float:
    """CPU time (s) the processes counted in `before` (`cpu_by_pid`) have used since. One that ended meanwhile
    (Ray ends idle workers mid-window) is in its parent's children's time once waited for: where that parent is
    counted, the ended one's time before comes off it; where not (a DataLoader worker of this process), the ended
    one's time since is not known and is left out, never subtracted as if undone."""
    now = cpu_by_pid(list(before))
    total = sum(now[pid][0] - before[pid][0] for pid in now)
    total -= sum(cpu for pid, (cpu, parent) in before.items() if pid not in now and parent in now)
    return max(0.0, total)


def started_unix(pids: list[int]) -> float | None:
    """When the last of the processes `pids` started (Unix time; the kernel counts in ticks of 10 ms); None where
    none is running."""
    times = []
    for pid in pids:
        try:
            times.append(psutil.Process(pid).create_time())
        except psutil.Error:
            pass  # a process that ended
    return max(times) if times else None


def core_wait_seconds(pids: list[int]) -> float | None:
    """Seconds the threads of `pids` have spent ready to run but waiting for a core (the kernel's run delay,
    /proc/PID/task/TID/schedstat): time a host with more free cores would not have spent. None where the kernel
    does not keep it."""
    total, seen = 0.0, False
    for pid in pids:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    total += int(f.read().split()[1]) / 1e9
                    seen = True
            except (OSError, ValueError, IndexError):
                pass  # a thread that ended
    return total if seen else None
