"""The benchmark harness: a dummy consumer pulls batches from a real DataLoader over a fixed steady window.

Timeline of one run: build the loader; the first batch (its latency is reported); warm-up for `warmup_s`; then
`repeats` steady windows of `duration_s` seconds (or `num_batches`, whichever comes first), back to back, during
which every batch is moved to the GPU where torch sees one (from pinned memory, as training does) and counted. The
headline rate is the median window's where the windows agree, else every window's samples over their seconds
(`rates.run_rate`); the record keeps every window. After the DataLoader pass, a single-process
probe splits the time per sample into fetch (parquet, indexing, collation) and decode; with `resume_check`
(dlbench_stream only), one more epoch of the rank, interrupted and resumed with one worker more, checks that
`state_dict` / `load_state_dict` deliver every frame exactly once.

This module holds a run's order of steps (the run is a `dlbench.run.spec.RunSpec`); each step is a module of its
own: `measure` (the DataLoader pass), `gpu` (batches to the device, the training step), `metrics` (the record),
`probe`, `resume_check`.
"""

from __future__ import annotations

import sys

import torch

from ..errors import UserError
from ..loader.dataset_meta import DatasetMeta, resolve_windows
from ..run.spec import RunSpec
from .adapters import make_adapter
from .checks import reference
from .checks.effective import BatchMeans, anchors
from .checks.resume import resume_check
from .measure import busy_workers, measure_pass, work_note
from .metrics import frame_checks, rank_record, run_metrics


def measure_rank(run: RunSpec, samples_out: list | None = None, barrier=None, meter=None) -> dict:
    """Run rank `run.rank` of a run (checked already: `run.spec.make_run`, or the workflow) and return its record
    (see `record.py`).

    `samples_out`, if given, receives the `index` of every sample consumed in the steady window. `barrier`, if
    given, is called after warm-up and returns when every rank is ready, so that all ranks measure at once.
    `meter`, a metering proxy the rank reads through (`remote.metered`), gives the remote-cost figures.
    """
    samples_out = [] if samples_out is None else samples_out
    torch.manual_seed(run.seed)
    device = torch.device("cuda" if run.decode_device.startswith("cuda") else "cpu")
    dmeta = DatasetMeta.load(run.root, data_files_root=run.data_files_root)
    adapter = make_adapter(run, dmeta)
    note = work_note(adapter, run.num_workers)
    if busy_workers(adapter, run.num_workers) == 0:
        raise UserError(note)
    if note:
        print(f"note: {note}", file=sys.stderr)
    barcodes, decoded = frame_checks(run, dmeta, device)
    checks = [c for c in (barcodes and barcodes.check, decoded and decoded.offer) if c]
    # what the batches are judged against, read before the loader starts (cached: once per dataset)
    judged = BatchMeans(reference.reference(dmeta), anchors(resolve_windows(run.mode, run.delta_timestamps, dmeta)))
    measured = measure_pass(run, adapter, device, checks, samples_out, barrier, meter, judged)
    if sum(w["samples"] for w in measured.seen.windows) == 0:
        raise UserError(
            f"no samples arrived in the {run.duration_s} s window (loader {run.loader}, {run.num_workers} workers); "
            f"rerun with --num-workers 0 to see the loader's own error in this process, and check the job's log"
        )
    resume, resume_problem = resume_check(run, dmeta) if run.resume_check else ({}, "")
    if decoded is not None:
        decoded.finish()
    metrics = {**run_metrics(run, measured, dmeta, adapter, barcodes, decoded, samples_out), **resume}
    metrics["busy_workers"] = busy_workers(adapter, run.num_workers)
    metrics["work_note"] = note
    return rank_record(run, metrics, decoded, resume_problem)
