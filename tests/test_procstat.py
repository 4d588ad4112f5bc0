import subprocess
import sys
import time

import pytest

from dlbench import procstat

pytestmark = pytest.mark.unit


def test_peak_pss_counts_a_child_and_reads_pss_only_when_rss_grows(monkeypatch):
    """The sampler sees a child's memory, and on a plateau it reads the costly PSS only every `pss_every_s`."""
    reads = []
    real_pss = procstat._pss_uss
    monkeypatch.setattr(procstat, "_pss_uss", lambda p: reads.append(p.pid) or real_pss(p))
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; b = bytearray(300 * 2**20); "
            "b[::4096] = b'x' * len(b[::4096]); print(flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
    )
    try:
        child.stdout.readline()  # the child's 300 MB are touched
        sampler = procstat.MemorySampler(every_s=0.05, pss_every_s=60)
        with sampler:
            time.sleep(1.5)
            ticks = 1.5 / 0.05
        rounds = reads.count(child.pid)  # each PSS round reads every process of the tree once
        assert sampler.peak >= 300 * 2**20
        # the child's 300 MB are its own pages: in its USS as in its PSS (what one more such process adds)
        assert 300 * 2**20 <= sampler.peak_children_uss <= sampler.peak_children
        # the first tick and the final sample read PSS (a third if this process's RSS grew); the plateau does not
        assert 2 <= rounds <= 3 < ticks
    finally:
        child.kill()
        child.wait()


BURN = "import time\nwhile time.process_time() < {s}: pass\ntime.sleep({then})"
# a parent that starts a busy child, says its pid, waits for it, then idles
PARENT = (
    "import subprocess, sys, time\ntime.sleep({delay})\n"
    "child = subprocess.Popen([sys.executable, '-c', {burn!r}])\nprint(child.pid, flush=True)\nchild.wait()\n"
    "time.sleep(30)"
)


def _cpu(pid: int) -> float:
    return procstat.cpu_by_pid([pid]).get(pid, (0.0, 0))[0]


def _until(condition, timeout: float = 30.0) -> None:
    deadline = time.time() + timeout
    while not condition() and time.time() < deadline:
        time.sleep(0.05)


def test_worker_cpu_counts_a_reaped_child_and_never_subtracts_one_that_ended():
    """A window's worker CPU: a raylet's worker that started and ended in the window counts through its parent,
    which waited for it; a process that ended in the window is not taken away from the rest (Ray ends idle workers
    mid-window); one counted at the window's start whose counted parent waited for it counts its time in the window
    only, not its whole life."""
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT.format(delay=0.3, burn=BURN.format(s=0.6, then=0))], stdout=subprocess.PIPE
    )
    ended = subprocess.Popen([sys.executable, "-c", BURN.format(s=0.3, then=0.5)])
    try:
        time.sleep(0.25)
        before = procstat.cpu_by_pid([parent.pid, ended.pid])
        ended.wait(timeout=30)
        _until(lambda: _cpu(parent.pid) - before[parent.pid][0] >= 0.4)
        spent = procstat.cpu_since(before)
        assert 0.4 <= spent < 2.0, spent  # the child's 0.6 s, started in the window
        assert list(procstat.cpu_by_pid([parent.pid, ended.pid])) == [parent.pid]
    finally:
        parent.kill()
        parent.wait()
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT.format(delay=0, burn=BURN.format(s=0.8, then=0))], stdout=subprocess.PIPE
    )
    try:
        child = int(parent.stdout.readline())
        _until(lambda: _cpu(child) >= 0.4)
        before = procstat.cpu_by_pid([parent.pid, child])
        _until(lambda: child not in procstat.cpu_by_pid([child]))  # ended, and waited for
        spent = procstat.cpu_since(before)
        assert 0.1 < spent < 0.6, spent  # the 0.4 s or so it had left, not its whole 0.8 s
    finally:
        parent.kill()
        parent.wait()
