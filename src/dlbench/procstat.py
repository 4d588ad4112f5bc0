"""Peak memory of a process tree, sampled in a background thread, as PSS: each page counted once, split among the
processes sharing it (forked DataLoader workers share the batch ring and their copy-on-write pages, which a sum of
RSS would count once per process)."""

from __future__ import annotations

import threading

import psutil


def _pss(p: psutil.Process) -> int:
    try:
        return p.memory_full_info().pss  # /proc/PID/smaps_rollup
    except (AttributeError, psutil.AccessDenied):  # no PSS on this platform, or not ours to read
        return p.memory_info().rss


class MemorySampler(threading.Thread):
    """Samples the summed PSS of `pid` (default: this process) and all its descendants every `every_s` seconds.

    `peak` is the largest total seen, in bytes. Use it as a context manager (or call `start()` and `stop()`) so
    the thread ends even when the measured code raises.
    """

    def __init__(self, pid: int | None = None, every_s: float = 0.1):
        super().__init__(daemon=True)
        self.proc, self.every, self.peak = psutil.Process(pid), every_s, 0
        self._halt = threading.Event()

    def sample(self) -> None:
        total = 0
        try:
            procs = [self.proc, *self.proc.children(recursive=True)]
        except psutil.Error:
            return
        for p in procs:
            try:
                total += _pss(p)
            except psutil.Error:
                pass
        self.peak = max(self.peak, total)

    def run(self):
        while not self._halt.wait(self.every):
            self.sample()

    def stop(self):
        self._halt.set()
        self.sample()
        if self.is_alive():
            self.join()

    def __enter__(self) -> "MemorySampler":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
