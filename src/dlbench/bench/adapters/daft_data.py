"""daft_data: Daft's LeRobot reader (`daft.datasets.lerobot.read`, Daft 0.7.26), in the peer environment.

Daft's reader is a lazy DataFrame with one row a frame: the data files joined to meta/episodes, each camera decoded
by a batched function (PyAV, as LeRobot's PyAV path: rows grouped by video file, a seek to the keyframe before
each cluster of nearby timestamps and a forward decode). Its users take rows from the DataFrame itself
(`iter_rows`, `to_torch_iter_dataset`), Daft's native runner doing the reading and decoding on its own threads; so,
as for Ray, this adapter brings its own batch source (`DaftBatches`) in place of the DataLoader, and the harness
measures the batches the consumer receives, every frame checked, memory with Daft's threads (they are this
process's).

What a run sets, in Daft's terms: `daft_shuffle` (none: Daft's default, rows in reading order; global:
`DataFrame.shuffle` after `read`, Daft's one way to reorder rows). `num_workers` means nothing to Daft (its runner
sizes its own thread pool from the cores). Single frames only: the reader has no delta_timestamps.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from ...errors import UserError
from ...loader.dataset_meta import DatasetMeta
from ..interface import Adapter, not_importable
from ..measure import SAMPLE_INFO
from .ray_data import INFO_WIDTH, rank_episodes

LOADER = "daft_data"
PACKAGE = "Daft 0.7.26 (daft==0.7.26)"


def daft_adapter(run, dmeta: DatasetMeta) -> Adapter:
    """Daft over `run.root`, single frames, this rank's episodes, in the order `daft_shuffle` asks."""
    try:
        import daft.datasets.lerobot  # noqa: F401
    except ImportError:
        raise not_importable(LOADER, PACKAGE) from None
    if dmeta.image_cameras or dmeta.depth_cameras:
        raise UserError(
            f"loader daft_data decodes 8-bit video only (Daft's reader turns every frame into RGB); "
            f"{dmeta.root} has {dmeta.image_cameras + dmeta.depth_cameras} too: give cameras= its video cameras "
            f"or use another loader"
        )
    batches = DaftBatches(run, dmeta)
    return Adapter(batches, True, len(dmeta.cameras), None, None, batches=batches.for_run)


class DaftBatches:
    """Daft's batches for one rank, one pass at a time (`set_epoch` reshuffles the next): `iter_rows` over the
    DataFrame, `batch_size` rows stacked into tensors as a DataLoader's collate would (frames HWC -> CHW, as LeRobot's
    loaders hand them). Stands in for the DataLoader in `measure.make_dataloader`."""

    sampler = batch_sampler = None  # what `measure.Epochs` asks of a DataLoader
    start_method = None  # Daft runs threads of this process

    def __init__(self, run, dmeta: DatasetMeta):
        self.run, self.dmeta, self.epoch = run, dmeta, 0
        self.episodes = rank_episodes(dmeta, run.rank, run.world_size)
        if self.episodes == []:
            raise UserError(
                f"rank {run.rank} of {run.world_size}: daft_data has no episode to read ({dmeta.num_episodes} "
                f"episodes); use fewer ranks"
            )
        self.keys = [*dmeta.cameras, *(k for k in dmeta.features if dmeta.features[k]["dtype"] not in ("video",))]

    def for_run(self, run, pin: bool) -> DaftBatches:
        return self

    def close(self) -> None:
        pass

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def dataframe(self):
        """This pass's DataFrame: Daft's `read` with the run's cameras decoded, this rank's episodes, its order."""
        import daft.datasets.lerobot as lerobot
        from daft import col

        df = lerobot.read(str(self.run.root), load_video_frames=list(self.dmeta.cameras))
        if self.episodes is not None:
            df = df.where(col("episode_index").is_in(self.episodes))
        if self.run.daft_shuffle == "global":
            df = df.shuffle(seed=self.run.seed + self.epoch)
        return df.select(*(k for k in self.keys if k in df.column_names))

    def __iter__(self):
        return _Batches(iter(self.dataframe().iter_rows()), self.run.batch_size, set(self.dmeta.cameras))


class _Batches:
    """One pass's batches (the last partial one dropped, as `drop_last`), each with its items' infos (latency: each
    item's share of the wait)."""

    def __init__(self, rows, batch_size: int, cameras: set[str]):
        self.rows, self.batch_size, self.cameras = rows, batch_size, cameras

    def __iter__(self):
        return self

    def __next__(self) -> dict:
        t0 = time.perf_counter()
        rows = [next(self.rows) for _ in range(self.batch_size)]  # StopIteration ends the pass
        out = {key: self._column(key, [r[key] for r in rows]) for key in rows[0]}
        info = np.full((len(rows), INFO_WIDTH), -1.0)
        info[:, 0] = (time.perf_counter() - t0) * 1000.0 / len(rows)
        out[SAMPLE_INFO] = info
        return out

    def _column(self, key: str, values: list):
        if isinstance(values[0], str):
            return values
        if key in self.cameras:  # (H, W, C) uint8 arrays
            return torch.from_numpy(np.stack(values)).movedim(-1, -3)
        arr = np.asarray(values)
        if arr.dtype == np.float64:
            arr = arr.astype(np.float32)  # LeRobot's float features are float32; Daft's python rows are floats
        return torch.from_numpy(arr)

    worker_pids: list[int] = []  # Daft's readers are threads of this process: its memory counts them
