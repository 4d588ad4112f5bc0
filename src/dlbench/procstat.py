"""Peak resident memory of a process tree, sampled in a background thread."""

from __future__ import annotations

import threading

import psutil


class RssSampler(threading.Thread):
    """Samples the RSS of `pid` (default: this process) plus all its descendants every `every_s` seconds.

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
                total += p.memory_info().rss
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

    def __enter__(self) -> "RssSampler":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
