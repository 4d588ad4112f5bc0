"""daft_data: Daft's LeRobot reader (`daft.datasets.lerobot.read`, Daft 0.7.26), in the peer environment.

Daft's reader is a lazy DataFrame with one row a frame: the data files joined to meta/episodes, each camera decoded
by a batched function (PyAV, as LeRobot's PyAV path: rows grouped by video file, a seek to the keyframe before
each cluster of nearby timestamps and a forward decode). Its users take rows from the DataFrame itself
(`iter_rows`, `to_torch_iter_dataset`), Daft's native runner doing the reading and decoding on its own threads; so,
as for Ray, this adapter brings its own batch source (`DaftBatches`) in place of the DataLoader, and the harness
measures the batches the consumer receives, every frame checked, memory with Daft's threads (they are this
process's).

What a run sets, in Daft's terms: `daft_shuffle` (none: Daft's default, rows in reading order; rows: the frame rows
shuffled before the decode, as a Daft user shuffles a table (Daft's decode then goes forward through every gap under
10 s between a decode batch's timestamps: slow on v3.0 files that hold many episodes); global: `DataFrame.shuffle`
after the decode, a sort of every decoded frame). The pipeline is `read`'s own steps
(`read_episodes`, `load_episode_frames`, its batched PyAV decode function), with the shuffle or the windows put in
before the decode. Windows (`delta_timestamps`) are columns, one an offset: the step's frame found by a join on
(episode, frame), clamped to the episode as LeRobot clamps it, the camera decoded at its timestamp, `<key>_is_pad`
where the step falls outside the episode; stacked into LeRobot's (steps, ...) shape as the batch is made.
`num_workers` means nothing to Daft (its runner sizes its own thread pool from the cores).
"""

from __future__ import annotations

import os
import time

import numpy as np
import torch

from ...errors import UserError
from ...loader.dataset_meta import DatasetMeta
from ..interface import Adapter, lerobot_delta_timestamps, not_importable
from ..measure import SAMPLE_INFO
from ..remote import S3_ENDPOINT_ENV
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
    fpi = sum(len(batches.windows.get(c, [0])) for c in dmeta.cameras)
    return Adapter(batches, True, fpi, None, None, batches=batches.for_run)


def io_config(root: str):
    """Daft's object-store settings for an s3:// dataset: the endpoint this rank reads through (the metering proxy
    `remote.metered` set, else the source's), plain HTTP where it is one, and the credentials of the environment
    (`sources.apply_env` sets the loopback server's); None for a local dataset or AWS itself (Daft reads its
    environment as boto does)."""
    endpoint = os.environ.get(S3_ENDPOINT_ENV)
    if not root.startswith("s3://") or not endpoint:
        return None
    from daft.io import IOConfig, S3Config

    key, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
    s3 = S3Config(endpoint_url=endpoint, use_ssl=endpoint.startswith("https://"), key_id=key, access_key=secret,
                  anonymous=not key, region_name=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"))  # fmt: skip
    return IOConfig(s3=s3)


_ABANDONED: list = []  # a query left running in this process (`DaftBatches.close`)


def abandoned() -> bool:
    """Whether this process left a Daft query running: its exit would wait for the query's decodes."""
    return bool(_ABANDONED)


class DaftBatches:
    """Daft's batches for one rank, one pass at a time (`set_epoch` reshuffles the next): `iter_rows` over the
    DataFrame, `batch_size` rows stacked into tensors as a DataLoader's collate would (frames HWC -> CHW, as LeRobot's
    loaders hand them). Stands in for the DataLoader in `measure.make_dataloader`."""

    sampler = batch_sampler = None  # what `measure.Epochs` asks of a DataLoader
    start_method = None  # Daft runs threads of this process

    def __init__(self, run, dmeta: DatasetMeta):
        self.run, self.dmeta, self.epoch = run, dmeta, 0
        self.current = None  # this pass's rows (a generator)
        self.episodes = rank_episodes(dmeta, run.rank, run.world_size)
        if self.episodes == []:
            raise UserError(
                f"rank {run.rank} of {run.world_size}: daft_data has no episode to read ({dmeta.num_episodes} "
                f"episodes); use fewer ranks"
            )
        self.keys = [*dmeta.cameras, *(k for k in dmeta.features if dmeta.features[k]["dtype"] not in ("video",))]
        deltas = lerobot_delta_timestamps(dmeta, run.mode, run.delta_timestamps) or {}
        self.windows = {k: [round(d * dmeta.fps) for d in ds] for k, ds in deltas.items()}  # frame offsets

    def for_run(self, run, pin: bool) -> DaftBatches:
        return self

    def close(self) -> None:
        """Leave the pass's query behind. Daft cannot cancel one: closing `iter_rows`'s generator waits for every
        decode in flight (36 s of a 70 s run of the default set, shuffled), and so does the process's exit; the
        rank process ends at once instead (`abandoned`), once its record is written."""
        if self.current is not None:  # kept referenced: a generator's finalizer closes it, and waits
            _ABANDONED.append(self.current)
            self.current = None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def dataframe(self):
        """This pass's DataFrame: `read`'s steps for the run's cameras and this rank's episodes, its windows and its
        order."""
        import daft
        import daft.datasets.lerobot as lerobot
        from daft import col, lit

        root = str(self.run.root)
        io = io_config(root)
        episodes = lerobot.read_episodes(root, io_config=io, include_video_metadata=True)
        if self.episodes is not None:
            episodes = episodes.where(col("episode_index").is_in(self.episodes))
        df = lerobot.load_episode_frames(episodes, root, io_config=io)
        steps = {}  # offset -> the column of the step's frame in its episode, clamped to the episode
        for key, offsets in self.windows.items():
            for i, d in enumerate(offsets):
                at = col("frame_index") + lit(d)
                if d not in steps:
                    steps[d] = f"_step{len(steps)}"
                    df = df.with_column(steps[d], at.clip(lit(0), col("length") - 1))
                df = df.with_column(f"{key}_is_pad@{i}", (at < 0) | (at >= col("length")))
        frames = daft.read_parquet(f"{root}/data/**", io_config=io)  # lazy: read where a window of a feature joins it
        for key in (k for k in self.windows if k not in self.dmeta.cameras):
            for i, d in enumerate(self.windows[key]):
                step = frames.select(col("episode_index").alias("_ep"), col("frame_index").alias("_at"),
                                     col(key).alias(f"{key}@{i}"))  # fmt: skip
                df = df.join(step, left_on=["episode_index", steps[d]], right_on=["_ep", "_at"], how="left")
                df = df.exclude(*(c for c in ("_ep", "_at") if c in df.column_names))
            df = df.exclude(key)
        if self.run.daft_shuffle == "rows":
            df = df.shuffle(seed=self.run.seed + self.epoch)
        elif self.windows:
            df = df.sort("index")  # the joins do not keep the reading order
        decode = lerobot._decode_lerobot_video_timestamp  # `read`'s own decode (Daft keeps it private)
        df = df.into_batches(lerobot._DECODE_BATCH_SIZE)
        tolerance = 0.5 / self.dmeta.fps  # as `read`: half a frame
        for cam in self.dmeta.cameras:
            files, start = col(f"videos/{cam}/video"), col(f"videos/{cam}/from_timestamp")
            if cam not in self.windows:
                df = df.with_column(cam, decode(files, start, col("timestamp"), tolerance, 0, 0))
            for i, d in enumerate(self.windows.get(cam, [])):
                ts = col(steps[d]).cast(daft.DataType.float64()) / lit(float(self.dmeta.fps))
                df = df.with_column(f"{cam}@{i}", decode(files, start, ts, tolerance, 0, 0))
        if self.run.daft_shuffle == "global":
            df = df.shuffle(seed=self.run.seed + self.epoch)
        kept = [c for c in df.column_names if c.split("@")[0] in self.keys or "_is_pad@" in c]
        return df.select(*kept)

    def __iter__(self):
        self.current = self.dataframe().iter_rows()
        return _Batches(self.current, self.run.batch_size, set(self.dmeta.cameras))


class _Batches:
    """One pass's batches (the last partial one dropped, as `drop_last`), each with its items' infos (latency: each
    item's share of the wait)."""

    def __init__(self, rows, batch_size: int, cameras: set[str]):
        self.rows, self.batch_size, self.cameras = rows, batch_size, cameras

    def __iter__(self):
        return self

    def __next__(self) -> dict:
        t0 = time.perf_counter()
        rows = [_stack_steps(next(self.rows)) for _ in range(self.batch_size)]  # StopIteration ends the pass
        out = {key: self._column(key, [r[key] for r in rows]) for key in rows[0]}
        info = np.full((len(rows), INFO_WIDTH), -1.0)
        info[:, 0] = (time.perf_counter() - t0) * 1000.0 / len(rows)
        out[SAMPLE_INFO] = info
        return out

    def _column(self, key: str, values: list):
        if isinstance(values[0], str):
            return values
        if key in self.cameras:  # (H, W, C) or (steps, H, W, C) uint8 arrays
            return torch.from_numpy(np.stack(values)).movedim(-1, -3)
        arr = np.asarray(values)
        if arr.dtype == np.float64:
            arr = arr.astype(np.float32)  # LeRobot's float features are float32; Daft's python rows are floats
        return torch.from_numpy(arr)

    worker_pids: list[int] = []  # Daft's readers are threads of this process: its memory counts them


def _stack_steps(row: dict) -> dict:
    """A row's window columns (`key@i`, one a step) as one value of LeRobot's shape: (steps, ...)."""
    out, steps = {}, {}
    for key, value in row.items():
        name, at, _ = key.partition("@")
        if at:
            steps.setdefault(name, []).append(value)
        else:
            out[key] = value
    for name, values in steps.items():
        out[name] = np.stack([np.asarray(v) for v in values])
    return out
