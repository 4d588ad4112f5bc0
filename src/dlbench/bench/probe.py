"""The single-process probe: samples/s of one loader in one process, split into fetch and decode."""

from __future__ import annotations

import time

import numpy as np

from ..run.spec import RunSpec
from .adapters import make_adapter

# the probe's most seconds. A stream's first items wait for its shuffle buffer to fill (720p windows: over 40 s in one
# process) and, on remote storage, for every episode of its pool to open (a 20 ms bucket: 10 s for 32 items of a
# 24-episode set, every bench job of it): a rate over its first 3 s says as much as over 10 of the same opening
PROBE_MAX_S = 3.0


def probe(run: RunSpec, dmeta=None) -> dict:
    """Single-process samples/s and (for dlbench loaders) the fetch vs decode split, on `probe_samples` items (fewer
    where they take over PROBE_MAX_S)."""
    none = {"samples_per_s": None, "fetch_ms": None, "decode_ms": None}
    if run.probe_samples <= 0:
        return none
    adapter = make_adapter(run, dmeta)
    if adapter.batches is not None:  # Ray reads in its own processes: one process's rate is not its own
        return none
    ds = adapter.dataset
    count = run.probe_samples
    if adapter.iterable:
        it = iter(ds)
        if next(it, None) is None:  # this rank has nothing to read (its run says so)
            return none
        take = lambda: next(it)  # noqa: E731
        count += adapter.buffered  # so that the timed items include decoding as much as yielding
    else:
        idx = iter(np.random.default_rng(run.seed).integers(0, len(ds), size=run.probe_samples + 1).tolist())
        take = lambda: ds[next(idx)]  # noqa: E731
        take()
    d0 = adapter.decode_seconds()[0] if adapter.decode_seconds else 0.0
    t0 = time.perf_counter()
    n = 0
    try:
        for _ in range(count):
            take()
            n += 1
            if time.perf_counter() - t0 > PROBE_MAX_S:
                break
    except StopIteration:
        pass
    total = time.perf_counter() - t0
    if n == 0:
        return none
    out = {"samples_per_s": n / total, "fetch_ms": None, "decode_ms": None}
    if adapter.decode_seconds:
        decode = adapter.decode_seconds()[0] - d0
        out.update(fetch_ms=(total - decode) / n * 1000, decode_ms=decode / n * 1000)
    return out
