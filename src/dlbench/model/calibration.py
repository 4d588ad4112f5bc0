"""A calibration record: what one dataset costs to load from one source on one host, per loader and frame mode
(`dlbench calibrate` measures it; `equations.predict` reads it). Torch-free; JSON on disk.

Every figure is measured, none assumed: a loader's costs come from short DataLoader passes with the run's frame
checks, one with one worker (so that the worker, not the main process, sets the pace), one with a worker per core
(what a sample costs with every core busy) and, where the matrix has runs without workers, one in a single process.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from .. import atomic
from ..errors import UserError

VERSION = 11


def host_cores() -> int:
    """The cores this job may use (SLURM's allocation where there is one)."""
    return int(os.environ.get("SLURM_CPUS_PER_TASK", 0)) or len(os.sched_getaffinity(0))


@dataclass(frozen=True)
class LoaderCost:
    """One loader in one frame mode, per sample delivered (seconds)."""

    loader: str
    mode: str
    batch_size: int
    frames_per_sample: int
    # wall time per sample with no workers, checks included (the process builds and takes every batch); None: not
    # measured (no run of the calibrated matrix has 0 workers)
    solo_s: float | None
    worker_s: float  # a worker's wall time per sample (building, collating, waiting on storage)
    worker_cpu_s: float  # the CPU part of it
    handover_s: float  # the main process's CPU per sample, less the checks (receiving batches, the consumer)
    check_s: float  # the frame checks' time per sample in the main process, on handed-over frames (0: no checks)
    solo_check_s: float | None  # the checks' part of solo_s (on frames the process decoded itself)
    start_s: float  # from building the DataLoader to its first batch, less building that batch
    main_pss_mb: float  # the main process's memory with one worker beside it
    worker_pss_mb: float  # one worker's
    # remote sources: requests and MB read per 1,000 frames delivered once reading is under way (the steady window),
    # and opening reads on top: each reading process's (MP4 indexes, data files) and the main process's, once a rank
    # (metadata; LeRobot's map-style loader downloads the dataset there)
    requests_per_kframe: float | None = None
    mb_per_kframe: float | None = None
    open_requests: float | None = None
    open_mb: float | None = None
    rank_open_requests: float | None = None
    rank_open_mb: float | None = None
    other_cpu_s: float = 0.0  # the host's other processes' CPU per sample (a loopback storage server, its proxies)
    worker_uss_mb: float | None = None  # one worker's own pages (USS): what each worker past the first adds
    worker_bound: bool = True  # False: the main process set the pace, so worker_s is the CPU part only
    # the CPU per sample of every process of the host in a pass with a worker per core (`full_cores` of them), where
    # samples cost more than one worker's pass says (shared caches, memory bandwidth, clocks); None: a 1-core host
    full_cpu_s: float | None = None
    full_cores: int = 0
    # how far apart the one-worker passes' times per sample were (largest less smallest, a share of their mean; the
    # costs above pool them: two averaged, three by the median): this host's noise for this loader. None: one pass
    repeat_diff: float | None = None
    # the one process's memory with no workers (its own pass's peak): it holds what a worker and the main process
    # hold apart, and more (a stream of windows' decoded blocks beside the batches); None: not measured
    solo_pss_mb: float | None = None
    note: str = ""

    @property
    def main_s(self) -> float:
        return self.handover_s + self.check_s

    def cpu_s(self, cores: int) -> float:
        """The CPU per sample of all the host's processes with `cores` cores busy: the one-worker pass's, plus what
        the full-width pass measured on top of it, in proportion to the cores busy beside the first; past the width
        measured, held at it (no measurement says how it grows there)."""
        alone = self.worker_cpu_s + self.main_s + self.other_cpu_s
        if self.full_cpu_s is None or self.full_cores < 2:
            return alone
        return alone + (self.full_cpu_s - alone) * (min(cores, self.full_cores) - 1) / (self.full_cores - 1)

    def lighter(self, cpu_s: float) -> LoaderCost:
        """The costs with `cpu_s` less of a worker's CPU per sample (a cheaper decode)."""
        full = None if self.full_cpu_s is None else self.full_cpu_s - cpu_s
        solo = None if self.solo_s is None else self.solo_s - cpu_s
        return replace(
            self, worker_s=self.worker_s - cpu_s, worker_cpu_s=self.worker_cpu_s - cpu_s, solo_s=solo, full_cpu_s=full
        )

    def unchecked(self) -> LoaderCost:
        """The costs of a run that checks no frames."""
        solo = None if self.solo_s is None else self.solo_s - (self.solo_check_s or 0.0)
        full = None if self.full_cpu_s is None else self.full_cpu_s - self.check_s
        return replace(self, solo_s=solo, check_s=0.0, solo_check_s=0.0, full_cpu_s=full)


@dataclass
class Calibration:
    dataset: str
    source: str
    host: str
    cores: int
    episodes: int
    data_files: int  # data parquet files (LeRobot's streaming loader reads one per worker)
    ttfb_ms: float | None  # the source's median time to the first byte of a small ranged read (None: local disk)
    seconds: float  # how long calibrating took
    costs: list[LoaderCost] = field(default_factory=list)
    note: str = ""  # why loaders are missing (not reachable from here, no peer environment)
    samples: int = 0  # the dataset's samples (frames of a camera): how long a stream's workers take to go through it
    version: int = VERSION

    def cost(self, loader: str, mode: str) -> LoaderCost | None:
        return next((c for c in self.costs if c.loader == loader and c.mode == mode), None)

    def write(self, path: str | Path) -> None:
        atomic.write_json(path, asdict(self))

    @classmethod
    def read(cls, path: str | Path) -> Calibration:
        try:
            values = json.loads(Path(path).read_text())
        except FileNotFoundError:
            raise UserError(
                f"{path}: calibration not found; make it with `dlbench calibrate` (or snakemake {path})"
            ) from None
        except ValueError as e:
            raise UserError(f"{path}: not a calibration record ({e}); delete it and calibrate again") from None
        if values.get("version") != VERSION:
            raise UserError(f"{path}: a calibration of another version of dlbench; delete it and calibrate again")
        costs = [LoaderCost(**c) for c in values.pop("costs")]
        return cls(**values, costs=costs)
