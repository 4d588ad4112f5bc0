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
