"""Streaming dataset (a torch IterableDataset) over a LeRobot v3.0 dataset at any fsspec URL.

Sharding: the episodes are cut into `world_size * num_workers` contiguous ranges of about equal frame count (so
episodes that share a data or video file mostly stay together), one per (rank, DataLoader worker); one epoch yields
every frame of the dataset exactly once across all shards. The range a rank reads rotates with the epoch.

Shuffling: each shard visits its episodes in a seeded random order, keeping `pool_size` episodes live at once. It
repeatedly picks a random live episode and takes its next `read_ahead` consecutive frames, which are decoded with
one sorted request per video file by a decoder kept for that episode's place in the pool (so decoding moves forward
through each episode's GOPs and never seeks back when the reader switches between episodes of one file, and an
episode that starts reuses the decoder of the one it replaces instead of opening a new one); these items go into a
buffer of `buffer_size`, from which a random one is yielded (from the start of a pass once the buffer holds
`pool_size * read_ahead` items, while it grows to full). Items decoded together share one block of frames, and
at most `buffer_mb` of such blocks stay alive per rank (over it, the oldest block's items leave first), so memory stays
bounded however large the frames and windows are. Everything random is drawn from a generator seeded by
(seed, epoch, shard), so an epoch's order is reproducible and can be resumed: `state_dict()` records how many items
each shard has yielded and `load_state_dict()` makes each shard skip exactly those (by replaying the order without
decoding).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import numpy as np
import torch

from ..errors import UserError
from ..video import DEFAULT_TOLERANCE_S
from .dataset_meta import DatasetMeta, check_readable, dataset_root, episode_rows, resolve_windows
from .items import BuilderViews, ItemBuilder, data_columns, read_columns
from .lerobot_args import check_lerobot_args

SHARD_KEY = "_shard"
POS_KEY = "_pos"
SHARDS_KEY = "_shards"  # ranks x DataLoader workers: a resumed run must split the same way


def rank_and_world(rank: int | None = None, world_size: int | None = None) -> tuple[int, int]:
    """Explicit arguments, else RANK/WORLD_SIZE, else SLURM_PROCID/SLURM_NTASKS, else (0, 1)."""
    if rank is None or world_size is None:
        env = os.environ
        if "RANK" in env and "WORLD_SIZE" in env:
            rank, world_size = int(env["RANK"]), int(env["WORLD_SIZE"])
        elif "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
            rank, world_size = int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"])
        else:
            rank, world_size = 0, 1
    if not 0 <= rank < world_size:
        raise UserError(f"rank {rank} is outside world size {world_size}")
    return rank, world_size


def split_episodes(lengths: np.ndarray, parts: int) -> list[range]:
    """Cut episodes 0..N-1 into `parts` contiguous ranges of about equal total length (some may be empty)."""
    cum = np.concatenate([[0], np.cumsum(lengths)])
    total = cum[-1]
    cuts = [0] + [int(np.searchsorted(cum, total * k / parts, side="left")) for k in range(1, parts)] + [len(lengths)]
    cuts = np.maximum.accumulate(np.clip(cuts, 0, len(lengths)))
    return [range(int(cuts[k]), int(cuts[k + 1])) for k in range(parts)]


def shard_order(
    ep_from: np.ndarray,
    ep_to: np.ndarray,
    episodes: range,
    seed: int,
    epoch: int,
    shard: int,
    pool_size: int,
    buffer_size: int,
    read_ahead: int,
    shuffle: bool = True,
    max_blocks: int | None = None,
) -> Iterator[tuple[str, tuple[list[int], int] | int]]:
    """The deterministic event stream of one shard: ("decode", (rows, slot)) and ("emit", row), no I/O.

    Every row of the shard's episodes is decoded once and emitted once. `slot` (0..pool_size-1) is the place in the
    pool of live episodes the rows' episode holds; an episode that finishes hands its slot to the next one, so a
    reader with one decoder per (file, slot) reuses it (a seek to the new episode's first keyframe) instead of
    opening a decoder per episode. The rows of one decode event share one block of decoded frames, which lives until
    the last of them is emitted; `max_blocks` bounds how many blocks the buffer keeps alive (over it, the oldest
    block's rows are emitted, in random order, until it is gone).
    """
    if not shuffle:
        for ep in episodes:
            for start in range(int(ep_from[ep]), int(ep_to[ep]), read_ahead):
                rows = list(range(start, min(start + read_ahead, int(ep_to[ep]))))
                yield "decode", (rows, 0)
                for r in rows:
                    yield "emit", r
        return
    rng = np.random.default_rng([seed, epoch, shard])
    pending = list(rng.permutation(np.asarray(episodes, dtype=np.int64)))
    live: list[list[int]] = []  # [next_row, end_row, slot] per live episode
    free_slots = list(range(pool_size - 1, -1, -1))
    buffer: list[int] = []
    block_of: dict[int, int] = {}  # row in the buffer -> its decode event
    left: dict[int, int] = {}  # decode event -> its rows still in the buffer (oldest first)

    def take(j: int) -> int:
        buffer[j], buffer[-1] = buffer[-1], buffer[j]
        row = buffer.pop()
        its_block = block_of.pop(row)
        left[its_block] -= 1
        if not left[its_block]:
            del left[its_block]
        return row

    # with a block bound, the buffer holds half the items its blocks could: emitted at random, blocks drain unevenly,
    # and the other half absorbs partly drained ones before the oldest must be emptied in a row
    cap = buffer_size if max_blocks is None else max(1, min(buffer_size, max_blocks * read_ahead // 2))
    # items start to leave once every live episode has a block in the buffer, not once it is full: the first batch
    # comes after pool_size decodes instead of buffer_size / read_ahead; then the buffer grows to `cap`, one item
    # for every two decoded
    fill = min(cap, pool_size * read_ahead)
    block = 0
    while pending or live:
        while len(live) < pool_size and pending:
            ep = int(pending.pop())
            live.append([int(ep_from[ep]), int(ep_to[ep]), free_slots.pop()])
        k = int(rng.integers(len(live)))
        nxt, end, slot = live[k]
        rows = list(range(nxt, min(nxt + read_ahead, end)))
        live[k][0] = rows[-1] + 1
        if live[k][0] >= end:
            free_slots.append(live.pop(k)[2])
        yield "decode", (rows, slot)
        left[block] = len(rows)
        for r in rows:
            buffer.append(r)
            block_of[r] = block
            if len(buffer) >= fill:
                yield "emit", take(int(rng.integers(len(buffer))))
                fill = min(cap, fill + 1)
        block += 1
        while max_blocks is not None and len(left) > max_blocks:
            oldest = next(iter(left))
            members = [j for j, r in enumerate(buffer) if block_of[r] == oldest]
            yield "emit", take(members[int(rng.integers(len(members)))])
    rng.shuffle(buffer)
    for r in buffer:
        yield "emit", r


class LeRobotStreamingDataset(BuilderViews, torch.utils.data.IterableDataset):
    """Stream a v3.0 dataset, split by rank and DataLoader worker, shuffled through an episode pool and a buffer.

    The arguments up to `token` are StreamingLeRobotDataset's (LeRobot 0.6.1), in its order, so the class stands in
    for it in LeRobot's training (docs/library.md). A `UserError` names a value that cannot be honoured.

    Args:
        repo_id, root, episodes, image_transforms, delta_timestamps, tolerance_s, revision, force_cache_sync,
            return_uint8, depth_output_unit, token, repo_type, episode_filter, mode, cameras, decode_device,
            data_files_root: as for `LeRobotMapDataset` (root: a local path or an fsspec URL, s3://, http(s)://,
            hf://...).
        streaming: ignored: files are always streamed (False asks LeRobot to download them first).
        buffer_size: items in the shuffle buffer.
        max_num_shards: ignored: the episodes are split by rank and DataLoader worker when an epoch starts.
        seed: with the epoch, decides every random choice. Call `set_epoch(e)` before each epoch.
        rng: refused (a `UserError`): the order is drawn from `seed`, so it can be reproduced and resumed.
        shuffle: False streams every shard's episodes in order (still disjoint across shards).
        rank, world_size: this process's place among the ranks; default from RANK/WORLD_SIZE, then
            SLURM_PROCID/SLURM_NTASKS, then a single rank.
        pool_size: live episodes interleaved per shard.
        buffer_mb: the most decoded frame data the shuffle buffers of this rank keep alive (MB), split evenly among
            its DataLoader workers, for large items (a sarm item of two 480x640 cameras is 15 MB). Items decoded
            together (`read_ahead` of them) share one block, so this bounds the blocks a worker's buffer holds items
            of: `max_blocks(num_workers)`.
        read_ahead: consecutive frames taken from an episode and decoded together.
        decoder_cache_size: open decoders per worker (on the CPU one per pool slot, camera and file); the default,
            cameras x (pool_size + 2), keeps every live episode's decoders open plus a few of another file.
        tag_items: add `_shard`, `_pos` and `_shards` to each item, for `observe` (resumable state under
            DataLoader workers); off by default, so items hold LeRobot's keys only.
    """

    def __init__(
        self,
        repo_id: str | None = None,
        root: str | None = None,
        episodes: list[int] | None = None,
        image_transforms=None,
        delta_timestamps: dict | None = None,
        tolerance_s: float = DEFAULT_TOLERANCE_S,
        revision: str | None = None,
        force_cache_sync: bool = False,
        streaming: bool = True,
        buffer_size: int = 256,
        max_num_shards: int = 16,
        seed: int = 0,
        rng=None,
        shuffle: bool = True,
        return_uint8: bool = False,
        depth_output_unit: str = "mm",
        *,
        repo_type: str = "dataset",
        token: str | bool | None = None,
        episode_filter: Callable[[dict], bool] | None = None,
        mode: str = "single",
        cameras: list[str] | None = None,
        decode_device: str = "cpu",
        decoder_cache_size: int | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        pool_size: int = 8,
        read_ahead: int = 8,
        buffer_mb: float = 256.0,
        tag_items: bool = False,
        data_files_root: str | None = None,
    ):
        if pool_size < 1 or buffer_size < 1 or read_ahead < 1:
            raise UserError("pool_size, buffer_size and read_ahead must be >= 1")
        check_lerobot_args(token=token, depth_output_unit=depth_output_unit, rng=rng)
        self.meta = DatasetMeta.load(dataset_root(repo_id, root, revision, repo_type), cameras, data_files_root)
        check_readable(self.meta, cameras)
        self.episodes, _ = episode_rows(self.meta, episodes, episode_filter)
        self.rank, self.world_size = rank_and_world(rank, world_size)
        windows = resolve_windows(mode, delta_timestamps, self.meta)
        cache = decoder_cache_size or len(self.meta.cameras) * (pool_size + 2)
        self._columns_spec = data_columns(self.meta)
        # live episodes are read in turn: on the CPU each pool slot gets its own decoder per file (a seek back to a
        # keyframe costs more than decoding on); NVDEC decoders cost 50-70 ms and GPU memory to create, so there one
        # per file seeks
        self.builder = ItemBuilder(
            self.meta, windows, {}, decode_device, cache, not return_uint8, tolerance_s, image_transforms
        )
        self._slot_cursors = decode_device == "cpu"
        self.seed, self.epoch = seed, 0
        self._iters = 0  # __iter__ calls since set_epoch: persistent DataLoader workers advance their own epoch
        self.buffer_mb = buffer_mb
        self.pool_size, self.buffer_size, self.read_ahead, self.shuffle = pool_size, buffer_size, read_ahead, shuffle
        self.tag_items = tag_items
        self._consumed: dict[int, int] = {}
        self._loaded: tuple[int, int] | None = None  # rows whose parquet columns are in memory
        self._skip: dict[int, int] = {}  # items each shard skips on the first pass after load_state_dict
        self._num_shards: int | None = None  # as seen by observe() or a worker-less iteration
        self._resume_shards: int | None = None

    # ------------------------------------------------------------------------------------------------ state
    def set_epoch(self, epoch: int) -> None:
        self.epoch, self._iters = epoch, 0
        self._consumed, self._skip = {}, {}

    def observe(self, batch: dict) -> None:
        """Record a batch the consumer has taken (needed for `state_dict()` when num_workers > 0)."""
        for shard, pos in zip(torch.as_tensor(batch[SHARD_KEY]).tolist(), torch.as_tensor(batch[POS_KEY]).tolist()):
            self._consumed[shard] = max(self._consumed.get(shard, 0), pos + 1)
        if SHARDS_KEY in batch:
            self._num_shards = int(torch.as_tensor(batch[SHARDS_KEY]).reshape(-1)[0])

    def state_dict(self) -> dict:
        return {
            "seed": self.seed,
            "epoch": self.epoch,
            "world_size": self.world_size,
            "num_shards": self._num_shards,
            "consumed": {int(k): int(v) for k, v in self._consumed.items()},
        }

    def load_state_dict(self, state: dict) -> None:
        if state["world_size"] != self.world_size:
            raise UserError(
                f"cannot resume: the state was saved with world size {state['world_size']}, "
                f"this run has {self.world_size}"
            )
        self.seed, self.epoch, self._iters = state["seed"], state["epoch"], 0
        self._resume_shards = state.get("num_shards")
        self._skip = {int(k): int(v) for k, v in state["consumed"].items()}
        self._consumed = dict(self._skip)

    def max_blocks(self, num_workers: int = 1) -> int:
        """Decoded blocks one worker's buffer keeps alive: its share of `buffer_mb`."""
        block_bytes = max(self.builder.frame_bytes_per_item() * self.read_ahead, 1)
        return max(1, int(self.buffer_mb * 2**20 / max(num_workers, 1) // block_bytes))

    # ---------------------------------------------------------------------------------------------- sharding
    def _split(self, parts: int) -> tuple[np.ndarray, list[np.ndarray]]:
        """The episodes read (all, or `episodes=`), cut into `parts` runs of about equal frames: (lengths, runs)."""
        chosen = (
            np.arange(self.meta.num_episodes)
            if self.episodes is None
            else np.unique(np.asarray(self.episodes, np.int64))
        )
        lengths = self.meta.ep_to - self.meta.ep_from
        return lengths, [chosen[list(r)] for r in split_episodes(lengths[chosen], parts)]

    def shard_episodes(self, shard: int, num_shards: int, epoch: int) -> np.ndarray:
        _, parts = self._split(num_shards)
        per_rank = num_shards // max(1, self.world_size)
        # rotate whole ranks with the epoch, so a rank does not read the same episodes every epoch
        rotated = (shard + per_rank * epoch) % num_shards
        return parts[rotated]

    @property
    def num_frames(self) -> int:
        """Frames of the episodes read, over all ranks (LeRobot's `StreamingLeRobotDataset.num_frames`)."""
        lengths, parts = self._split(1)
        return int(lengths[parts[0]].sum())

    def __len__(self) -> int:
        """Frames this rank yields in one epoch (all its workers together)."""
        lengths, parts = self._split(self.world_size)
        return int(lengths[parts[(self.rank + self.epoch) % self.world_size]].sum())

    # --------------------------------------------------------------------------------------------- iteration
    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        num_workers, worker = (info.num_workers, info.id) if info else (1, 0)
        shard = self.rank * num_workers + worker
        num_shards = self.world_size * num_workers
        if self._iters == 0 and self._skip and self._resume_shards not in (None, num_shards):
            raise UserError(
                f"cannot resume: the state was saved with {self._resume_shards} shards (ranks x DataLoader "
                f"workers), this run has {num_shards}; resume with the same num_workers"
            )
        epoch = self.epoch + self._iters
        # only the first pass after load_state_dict resumes; later epochs (persistent workers) start from the top
        skip = self._skip.get(shard, 0) if self._iters == 0 else 0
        self._iters += 1
        if info is None:
            self._num_shards = num_shards
        episodes = self.shard_episodes(shard, num_shards, epoch)
        if not len(episodes):
            return
        rows = slice(int(self.meta.ep_from[episodes[0]]), int(self.meta.ep_to[episodes[-1]]))
        if self._loaded != (rows.start, rows.stop):
            self._load_rows(rows)
        events = shard_order(
            self.meta.ep_from,
            self.meta.ep_to,
            episodes,
            self.seed,
            epoch,
            shard,
            self.pool_size,
            self.buffer_size,
            self.read_ahead,
            self.shuffle,
            self.max_blocks(num_workers),
        )
        ready: dict[int, dict] = {}
        pending: set[int] = set()
        pos = 0
        for kind, value in events:
            if kind == "decode":
                rows, slot = value
                if pos < skip:
                    pending.update(rows)  # replaying: decode only what is still in the buffer after the skip
                else:
                    ready.update(zip(rows, self.builder.build_many(rows, slot if self._slot_cursors else None)))
                continue
            if pos < skip:
                pending.discard(value)
                pos += 1
                if pos == skip and pending:
                    ready.update(zip(sorted(pending), self.builder.build_many(sorted(pending))))
                    pending.clear()
                continue
            item = ready.pop(value)
            if self.tag_items:
                item[SHARD_KEY], item[POS_KEY], item[SHARDS_KEY] = shard, pos, num_shards
            pos += 1
            if info is None:
                self._consumed[shard] = pos
            yield item

    def _load_rows(self, rows: slice) -> None:
        """Read the parquet columns of this shard's rows only (files outside the shard's range are not read)."""
        cols = read_columns(self.meta, self.meta.data_files_for_rows(rows.start, rows.stop), self._columns_spec)
        self.builder.cols = cols
        self.builder.row_offset = int(cols["index"][0])  # files are contiguous in index
        self._loaded = (rows.start, rows.stop)
