"""The resume check of a streaming run: an epoch interrupted at a random batch and finished by a fresh dataset
with one DataLoader worker more, from the first one's saved state."""

from __future__ import annotations

import collections
import json
from dataclasses import replace

import numpy as np

from ...loader.dataset_meta import DatasetMeta
from ...run.spec import RunSpec
from ...validate import is_synthetic
from ..adapters import make_adapter
from ..measure import make_dataloader, split_info
from .frames import BarcodeCheck


def rank_rows(ds, epoch: int) -> np.ndarray:
    """The rows a streaming dataset's rank yields in `epoch`: every row its virtual shards' event streams decode
    (pieces of episodes, as the workers' plan cuts them), read off the order without decoding."""
    rows = [r for v in ds.rank_shards(epoch) for kind, value in ds.shard_events(int(v), epoch) if kind == "decode"
            for r in value[0]]  # fmt: skip
    return np.asarray(rows, np.int64)


def few(rows: list[int], most: int = 8) -> str:
    return ", ".join(map(str, rows[:most])) + (", ..." if len(rows) > most else "")


def resume_check(run: RunSpec, dmeta: DatasetMeta) -> tuple[dict, str]:
    """One epoch of the rank's stream, interrupted after a seeded random batch: its `state_dict` (through JSON, as a
    checkpoint keeps it) is loaded by a fresh dataset read by one DataLoader worker more, which finishes the epoch.
    Every frame of the rank's epoch must arrive exactly once over both parts, with the right barcodes on synthetic
    data. Returns the metrics (resume_exact, resume_checked_samples) and what went wrong ('' when nothing did)."""
    barcodes = BarcodeCheck(dmeta, run.mode, run.delta_timestamps) if is_synthetic(dmeta.info) else None
    got: list[int] = []

    def consume(adapter, workers: int, stop: int | None = None) -> None:
        loader = make_dataloader(replace(run, num_workers=workers), adapter, pin=False)
        for k, batch in enumerate(loader):
            batch, _ = split_info(batch)
            adapter.dataset.observe(batch)
            got.extend(batch["index"].tolist())
            if barcodes is not None:
                barcodes.check(batch)
            if stop is not None and k + 1 >= stop:
                break
        # returning drops the DataLoader: its workers stop, and the batches they had made undelivered are lost

    first = make_adapter(run, dmeta, tag_items=True)
    first.dataset.use_workers(run.num_workers)  # the plan the DataLoader makes: its pieces are the rank's rows
    expected = rank_rows(first.dataset, first.dataset.epoch)
    batches = -(-len(first.dataset) // run.batch_size)
    stop = int(np.random.default_rng([run.seed, run.rank]).integers(1, max(2, batches)))
    consume(first, run.num_workers, stop)
    state = json.loads(json.dumps(first.dataset.state_dict()))
    del first
    second = make_adapter(run, dmeta, tag_items=True)
    second.dataset.load_state_dict(state)
    consume(second, run.num_workers + 1)
    counts = collections.Counter(got)
    missing = sorted(set(expected.tolist()) - counts.keys())
    repeated = sorted(r for r, n in counts.items() if n > 1)
    foreign = sorted(counts.keys() - set(expected.tolist()))
    problems = [
        f"{len(missing)} frame(s) never arrived (rows {few(missing)})" if missing else "",
        f"{len(repeated)} arrived more than once (rows {few(repeated)})" if repeated else "",
        f"{len(foreign)} are not this rank's (rows {few(foreign)})" if foreign else "",
        f"{barcodes.wrong} frame(s) with a wrong barcode" if barcodes is not None and barcodes.wrong else "",
    ]
    problem = "; ".join(p for p in problems if p)
    if problem:
        problem = (
            f"resume check (stopped after batch {stop} of {batches} with {run.num_workers} workers, resumed with "
            f"{run.num_workers + 1}): {problem}"
        )
    return {"resume_exact": not problem, "resume_checked_samples": len(got)}, problem
