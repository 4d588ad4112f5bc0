"""The benchmark harness: a dummy consumer pulls batches from a real DataLoader over a fixed steady window.

Timeline of one run: build the loader; the first batch (its latency is reported); warm-up for `warmup_s`; then
`repeats` steady windows of `duration_s` seconds (or `num_batches`, whichever comes first), back to back, during
which every batch is moved to the GPU where torch sees one (from pinned memory, as training does) and counted. The
headline rate is the median window's; the record keeps every window. After the DataLoader pass, a single-process
probe splits the time per sample into fetch (parquet, indexing, collation) and decode; with `resume_check`
(dlbench_stream only), one more epoch of the rank, interrupted and resumed with one worker more, checks that
`state_dict` / `load_state_dict` deliver every frame exactly once.

This module holds a run's configuration and its order of steps; each step is a module of its own: `harness` (the
DataLoader pass), `gpu` (batches to the device, the training step), `metrics` (the record), `probe`, `resume`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, fields

import torch

from ..config import defaults
from ..errors import UserError
from ..loader.dataset_meta import DatasetMeta
from .adapters import make_adapter
from .gpu import cuda_unavailable_reason
from .harness import busy_workers, measure_pass, work_note
from .metrics import frame_checks, rank_record, run_metrics
from .resume import resume_check

_RUN = defaults("bench", "defaults")  # the config schema's run defaults: one source for workflow, CLI and library


@dataclass
class BenchConfig:
    """One rank's run: the run spec's fields (`dlbench.spec`) plus the rank. Defaults are the config schema's."""

    root: str  # the v3.0 dataset: local path or fsspec URL
    dataset: str = "adhoc"  # its name in config.yaml's `datasets`
    loader: str = _RUN["loader"]
    mode: str = _RUN["mode"]
    delta_timestamps: dict | None = None  # a mode of config.yaml's `modes:` (seconds per key); overrides `mode`
    batch_size: int = _RUN["batch_size"]
    num_workers: int = _RUN["num_workers"]
    decode_device: str = _RUN["decode_device"]
    step_ms: int = _RUN["step_ms"]  # the consumer's training step: each batch is held this long
    duration_s: float = _RUN["duration_s"]
    warmup_s: float = _RUN["warmup_s"]
    num_batches: int | None = None
    repeats: int = _RUN["repeats"]  # steady windows, back to back
    decoder_cache_size: int | None = None  # None: the loader's own default
    decoder_cache_mb: float | None = None  # dlbench loaders: the decoders' memory budget per process
    remote_block_kb: float | None = None  # dlbench loaders: read size of remote video files
    fetch_episodes: int = _RUN["fetch_episodes"]  # dlbench_stream: episodes fetched per request (0: as decoders ask)
    pool_size: int = _RUN["pool_size"]  # streaming loaders: live episodes
    buffer_size: int = _RUN["buffer_size"]  # streaming loaders: shuffle buffer
    prefetch_factor: int = 2
    # batches are taken as workers finish them, as the decode ceiling's processes work (docs/benchmarks.md)
    in_order: bool = False
    seed: int = _RUN["seed"]
    verify: bool = _RUN["verify"]
    check_frames: int = _RUN["check_frames"]  # per camera: compared with an independent decode
    resume_check: bool = _RUN["resume_check"]  # dlbench_stream: an epoch interrupted and resumed (`_resume_check`)
    probe_samples: int = _RUN["probe_samples"]
    scenario: str = "adhoc"
    run_id: str = ""
    source: str = _RUN["source"]
    source_spec: dict | None = None
    nodes: int = _RUN["nodes"]  # nodes the ranks run on (summary.csv's per-node figures)
    data_files_root: str | None = None  # data/ and videos/ when not under `root` (which then holds meta/)
    on_unavailable: str = _RUN["on_unavailable"]
    on_unreachable: str = "error"
    require_warm: str | None = None
    on_cold: str = "error"
    num_workers_requested: int | str | None = None  # "auto" when the job sized the workers
    rank: int = 0
    world_size: int = 1
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_spec(cls, spec: dict, rank: int = 0) -> BenchConfig:
        """The config of `rank` for a run spec (its `ranks` is the world size)."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(spec) - names - {"ranks"})
        if unknown:
            raise UserError(f"run spec has unknown key(s) {unknown}; rebuild it with this version of dlbench")
        values = {k: v for k, v in spec.items() if k in names and k not in ("rank", "world_size")}
        return cls(**values, rank=rank, world_size=spec.get("ranks", spec.get("world_size", 1)))


def run(cfg: BenchConfig, samples_out: list | None = None, barrier=None, meter=None) -> dict:
    """Run one benchmark rank and return its record (see `record.py`).

    `samples_out`, if given, receives the `index` of every sample consumed in the steady window. `barrier`, if
    given, is called after warm-up and returns when every rank is ready, so that all ranks measure at once.
    `meter`, a metering proxy the rank reads through (`remote.metered`), gives the remote-cost figures.
    """
    samples_out = [] if samples_out is None else samples_out
    torch.manual_seed(cfg.seed)
    reason = cuda_unavailable_reason(cfg.decode_device)
    if reason:
        raise UserError(reason)
    if cfg.resume_check and cfg.loader != "dlbench_stream":
        raise UserError(
            f"resume_check applies to loader dlbench_stream only (this run's is {cfg.loader}); "
            f"turn it off for the others"
        )
    device = torch.device("cuda" if cfg.decode_device.startswith("cuda") else "cpu")
    dmeta = DatasetMeta.load(cfg.root, data_files_root=cfg.data_files_root)
    adapter = make_adapter(cfg)
    note = work_note(adapter, cfg.num_workers)
    if busy_workers(adapter, cfg.num_workers) == 0:
        raise UserError(note)
    if note:
        print(f"note: {note}", file=sys.stderr)
    barcodes, decoded = frame_checks(cfg, dmeta, device)
    checks = [c for c in (barcodes and barcodes.check, decoded and decoded.offer) if c]
    measured = measure_pass(cfg, adapter, device, checks, samples_out, barrier, meter)
    if sum(w["samples"] for w in measured.seen.windows) == 0:
        raise UserError(
            f"no samples arrived in the {cfg.duration_s} s window (loader {cfg.loader}, {cfg.num_workers} workers); "
            f"rerun with --num-workers 0 to see the loader's own error in this process, and check the job's log"
        )
    resume, resume_problem = resume_check(cfg, dmeta, device) if cfg.resume_check else ({}, "")
    if decoded is not None:
        decoded.finish()
    metrics = {**run_metrics(cfg, measured, dmeta, adapter, barcodes, decoded, samples_out), **resume}
    metrics["busy_workers"] = busy_workers(adapter, cfg.num_workers)
    metrics["work_note"] = note
    return rank_record(cfg, metrics, decoded, resume_problem)
