"""Streaming dataset (a torch IterableDataset) over a LeRobot v3.0 dataset at any fsspec URL.

The episodes read are cut into virtual shards, dealt to ranks and DataLoader workers each epoch, and each read as a
seeded stream of events; a worker interleaves a few of its shards at once (`loader.partition` has the pure logic and
its reasoning). One epoch yields every frame exactly once over all ranks and workers; whenever there are at least
ranks x workers episodes (fetch groups, when fetching), every worker of every rank has some.

Shuffling: a virtual shard's stream visits its episodes in a seeded random order, keeping some live at once; it
repeatedly picks a random live episode and takes its next block (`read_ahead` rows `block_stride` apart), decoded with
one sorted request per video file by a decoder kept for that episode's place in the worker's pool (so decoding moves
forward through each episode's GOPs and never seeks back when the reader switches between episodes of one file, and
an episode that starts reuses the decoder of the one it replaces instead of opening a new one); these items go into
a shuffle buffer, from which a random one is yielded. Items decoded together share one block of frames, and at most
`buffer_mb` of such blocks stay alive per DataLoader worker (over it, the oldest block's items leave first), so
memory stays bounded however large the frames and windows are.

Resuming: what an epoch has delivered is, for each virtual shard, a prefix of its stream: the state is one count per
virtual shard (`state_dict`; the ranks' counts are gathered under torch.distributed, or combined with
`merge_states`). `load_state_dict` resumes it with any ranks and workers: each worker replays the delivered prefix
of its virtual shards without decoding and yields the rest, so the epoch ends with every frame delivered exactly once
(`loader.resume` keeps the counts and checks a state against the stream).

What depends on W: the consumer's sequence of items. The DataLoader takes batches from its workers in turn, and a
worker interleaves its own shards, so which virtual shards are read at the same time, and which batch comes from
which, follows R and W. A consumer order independent of W would fix, batch by batch, the virtual shard each batch
comes from and deal batches, not virtual shards, to workers: each worker would then read all its virtual shards at
once (memory and open decoders times its shards), or W workers would decode the same GOPs.
"""

from __future__ import annotations

import math
import zlib
from collections import deque
from collections.abc import Callable, Iterator
from functools import partial

import numpy as np
import torch

from ..decode.decoder import RANDOM_ACCESS_BLOCK, SEQUENTIAL_BLOCK, FrameDecoder
from ..errors import UserError
from ..format import paths
from ..format.meta import TOLERANCE_S
from .columns import HeldTables, data_columns, read_columns
from .dataset_meta import DatasetMeta, episode_rows, open_meta, resolve_windows, window_span
from .items import BuilderViews, ItemBuilder
from .lerobot_args import check_lerobot_args
from .partition import (
    MIN_PIECE_S,
    Lanes,
    auto_pieces,
    auto_virtual_shards,
    block_frames,
    busy_workers,
    cut_pieces,
    emit_units,
    entry_groups,
    interleave,
    rank_shards,
    shard_order,
    split_episodes,
    stripe_pieces,
    window_stride,
    worker_shards,
)
from .resume import Delivered, merge_states
from .world import rank_and_world

SHARD_KEY = "_shard"  # the item's virtual shard
POS_KEY = "_pos"  # its place in that virtual shard's stream of the epoch
EPOCH_KEY = "_epoch"  # the epoch it belongs to (persistent DataLoader workers advance their own)
# the data files' tables a process keeps across epochs (each worker is dealt other episodes each epoch): a dataset
# whose tables fit is read once per process, not once per epoch
HELD_DATA_MB = 32
EPISODE_ORDERS = ("random", "forward")  # a live episode's blocks: at random, or in reading order (`shard_order`)
# the most rows a block takes by default (`auto_read_ahead`): a block's rows are consecutive frames, alike on a still
# scene, and an item waits in the buffer about as many draws as the buffer holds items, which at real frame sizes
# is fewer than ten batches draw; so ten batches hold up to all of a block's rows. With 2 they hold a block at most
# twice: even where its rows are copies, ten batches keep half their nominal size (the floor), whatever the content
# or batch size. 3 cameras of 240x320 HEVC, 2 workers: 8 rows 0.85 / 0.49 over one / ten batches, 2 rows 0.83 / 0.81
AUTO_READ_AHEAD = 2
# GOP runs by default only where a worker's buffer keeps at least this many runs decoded (`_eligible`): fewer, and
# ten batches' items come from a few seconds of a few episodes. 2 workers: 23 runs held (3 cameras of 240x320 HEVC,
# buffer_mb 512) gave 0.41 of the nominal batch over ten batches, 60 (96x128 H.264) 0.64
GOP_RUNS_HELD = 32
# on a GOP longer than STRIPE_MIN_GOP that GOP runs cannot take (the buffer keeps fewer than GOP_RUNS_HELD), a block
# by default is about STRIPE_ROWS rows spread over one GOP, `GOP // rows` apart (`_stripes`): one decode of a GOP for
# several frames of it, where 2 consecutive rows at a random moment cost the decode of half a GOP each. 16 episodes of
# 720p H.264 g=30, 1 / 2 workers (effective / nominal over one batch / ten, against the dataset): 6 rows 5 apart 50 /
# 99 frames/s at 1.00 / 0.58 and 0.88 / 0.77; 2 consecutive rows 33 / 63 at 0.98 / 1.32 and 0.90 / 0.82; 10 rows 3
# apart 69 / 119 at 0.88 / 0.42 and 0.77 / 0.64; map 17 / 36
STRIPE_ROWS = 6
STRIPE_MIN_GOP = 16
STRIPE_MIN_GAP = 3  # frames between a block's rows at least: nearer, they are as alike as consecutive ones
FORWARD_DECODERS_MB = 1024  # the most a worker's decoders may hold for GOP runs by default (`_slot_decoders_fit`)
# blocks of a virtual shard decoded together by default on long GOPs (`decode_ahead`): 8 rows at random moments of
# one 720p episode (sarm, GOP 30) decode in 0.58x the time one by one at 4, 0.46x at 8; 3 cameras of 240x320 HEVC
# in 0.29x at 8
DECODE_AHEAD = 4
FORWARD_POOL = 32  # live episodes a worker reads forward by default: each holds a decoder per camera and file
# an unset episode_order reads windows forward where a worker keeps this many episodes live (`_forward_by_default`).
# 100 episodes of 2-5 s, 2 x 240x320 AV1 g=2, sarm (effective / nominal over one batch / ten, against the dataset):
# forward, 100 live, 1 / 2 workers 2,259 / 3,975 frames/s at 1.01 / 1.11 and 0.98 / 1.04; 64 live 0.95 / 0.67 and
# 0.96 / 0.83; 32 live 0.82 / 0.28; random order 1,347 / 2,501; map 1,374 / 2,677. 16 episodes of 480x640: forward
# 950 frames/s at 0.65 / 0.25, random 489, map 509 (2 workers)
FORWARD_MIN_LIVE = 96
# the default buffer_mb keeps this many blocks (a lane each), within these MB a worker: 500 episodes of 2 x 240x320
# AV1, sarm, 2 workers: 128 MB (34 lanes) 0.74 / 0.41 of the nominal batch against the dataset, 512 MB 0.97 / 0.81
LANES_HELD = 128
BUFFER_MB_RANGE = (128, 512)


def _check_order_args(counts: dict, gop_run: int | None, episode_order: str, fetch_episodes: int) -> None:
    """One `UserError` for the first order argument out of range (None: the default; 0 is a mistake, not it)."""
    for name, value in counts.items():
        if value is not None and value < 1:
            raise UserError(f"{name} must be >= 1 (got {value}); leave it out for the default")
    if gop_run is not None and gop_run < 0:
        raise UserError(f"gop_run must be >= 0 (got {gop_run}); 0 reads each block at a jump, unset: the GOP")
    if episode_order is not None and episode_order not in EPISODE_ORDERS:
        raise UserError(f"episode_order must be one of {', '.join(EPISODE_ORDERS)} (got {episode_order!r})")
    if fetch_episodes < 0:
        raise UserError(f"fetch_episodes must be >= 0 (got {fetch_episodes})")


def _forward_by_default(meta: DatasetMeta, episodes, windows: dict, shuffle: bool, fetch: int, device: str) -> bool:
    """Whether an unset `episode_order` reads forward: rows with windows (sarm) whose consecutive blocks share
    frames (a block's rows a window's spacing apart, the next block the window's spacing later: 2 new frames a
    block, where a jump decodes the whole window), with at least FORWARD_MIN_LIVE episodes live a worker (each
    reader a piece of one: a batch holds few moments of each, so many are needed for ten batches to draw across the
    dataset) within the decoders FORWARD_DECODERS_MB holds (a decoder per camera and live episode: the pool is
    then every piece, or as many as fit), local video (4 MB reads a decoder from remote storage) and CPU decoding
    (NVDEC decoders are one per file)."""
    if not shuffle or fetch or device != "cpu" or paths.is_remote(meta.data_root):
        return False
    if not window_span(windows, meta.cameras):
        return False
    live = meta.num_episodes if episodes is None else len(np.unique(np.asarray(episodes)))
    return min(live, forward_slots(meta)) >= FORWARD_MIN_LIVE


def forward_slots(meta: DatasetMeta) -> int:
    """The most pool slots a worker reading forward keeps within FORWARD_DECODERS_MB of decoders (2 held beside)."""
    return max(0, int(FORWARD_DECODERS_MB // max(slot_decoders_mb(meta), 1e-9)) - 2)


def _remote_block(episode_order: str) -> int:
    """The default size of a read of remote video: 4 MB reading forward, where the next block follows in the file;
    128 KB (the map-style loader's) in random order, where each block is a jump whose GOP is all it needs: 480x640
    AV1 from S3 on loopback at +20 ms, 4 workers, 298 frames/s at 76 MB per 1,000 frames against 107 at 1,505."""
    return SEQUENTIAL_BLOCK if episode_order == "forward" else RANDOM_ACCESS_BLOCK


def slot_decoders_mb(meta: DatasetMeta) -> float:
    """The estimated memory (MB) of one pool slot's decoders when a stream reads forward: one per camera, each
    holding the index of the longest video file (`decode.cache.decoder_bytes`)."""
    from ..decode.cache import decoder_bytes

    height, width = (tuple(meta.shapes.get(meta.cameras[0], ())) + (0, 0))[:2] if meta.cameras else (0, 0)
    per = decoder_bytes(int(width), int(height), meta.largest_video_file_frames())
    return len(meta.cameras) * per / 2**20


def _peek_decodes(events: Iterator, peeked: deque, blocks: int) -> list[int]:
    """The rows of the next `blocks` decode events of `events`, read ahead into `peeked` (every event stays there,
    in order, for the stream to take in its turn)."""
    rows: list[int] = []
    while blocks > 0 and (event := next(events, None)) is not None:
        peeked.append(event)
        if event[0] == "decode":
            rows += event[1][0]
            blocks -= 1
    return rows


class LeRobotStreamingDataset(BuilderViews, torch.utils.data.IterableDataset):
    """Stream a v3.0 dataset in virtual shards dealt to ranks and DataLoader workers, shuffled through an episode
    pool and a buffer; resumable mid-epoch with any ranks and workers (see the module docstring).

    The arguments up to `token` are StreamingLeRobotDataset's (LeRobot 0.6.1), in its order, so the class stands in
    for it in LeRobot's training (docs/library.md). A `UserError` names a value that cannot be honoured.

    Args:
        repo_id, root, episodes, image_transforms, delta_timestamps, tolerance_s, revision, force_cache_sync,
            return_uint8, depth_output_unit, token, repo_type, episode_filter, mode, cameras, decode_device,
            data_files_root, meta: as for `LeRobotMapDataset` (root: a local path or an fsspec URL, s3://, http(s)://,
            hf://...).
        streaming: ignored: files are always streamed (False asks LeRobot to download them first).
        buffer_size: items in each virtual shard's shuffle buffer.
        max_num_shards: ignored: the episodes are cut into `virtual_shards`.
        seed: with the epoch, decides every random choice. Call `set_epoch(e)` before each epoch.
        rng: refused (a `UserError`): the order is drawn from `seed`, so it can be reproduced and resumed.
        shuffle: False streams every virtual shard's episodes in order (still disjoint across ranks and workers).
        rank, world_size: this process's place among the ranks; default from torch.distributed once its process
            group is initialized, then RANK/WORLD_SIZE, then SLURM_PROCID/SLURM_NTASKS, then a single rank.
        pool_size: live episodes interleaved per DataLoader worker (over the virtual shards it reads at once), no
            more than the blocks `buffer_mb` keeps (`Lanes.plan`). None: in random order every piece of the dataset
            (so a worker holds every episode it reads live at once and ten batches draw across the dataset: each
            block is a jump, one decoder per file serves every episode of it), and where an unset `episode_order`
            reads forward; where `episode_order="forward"` is asked, FORWARD_POOL (each slot then has decoders of
            its own).
        episode_order: "random": a live episode's blocks are read in a seeded random order, so a batch holds its
            episodes at unrelated moments of their tasks; "forward": in reading order from a random block (fewer
            seeks on long GOPs, and windows' frames decoded once for all the rows that share them, but a batch
            holds few moments of each live episode: `partition.shard_order`). None: forward for windowed rows
            where a worker keeps FORWARD_MIN_LIVE episodes live (`_forward_by_default`), then every piece live;
            else random.
        pieces: each episode cut into this many pieces, the unit a pool keeps live and virtual shards are made
            of; the pieces of an episode are dealt to different workers (`partition.deal_order`). None: ranks x
            DataLoader workers (while that makes at most 512 pieces), once `use_workers` says how many (dlbench's
            DataLoader does), so each worker's pool holds a piece of every episode; 1 before that. In random
            episode order a piece is a stripe (every P-th block of the whole episode, `partition.stripe_pieces`),
            read forward a contiguous run of at least 2 s. More pieces than workers leave each worker's pool less
            of the dataset.
        buffer_mb: the most decoded frame data one DataLoader worker's shuffle buffer keeps alive (MB), for large
            items (a sarm item of two 480x640 cameras is 15 MB). Items decoded together (`read_ahead` of them) share
            one block, so this bounds the blocks the buffer holds items of: `max_blocks()`. Per worker, so that a
            virtual shard's order does not depend on the number of workers (a rank's bound is W x buffer_mb).
        read_ahead: rows taken from an episode and decoded together (one block of frames); None: 2 (ten batches
            then hold a block's alike rows at most twice: AUTO_READ_AHEAD), or 1 where 2 share a frame or where
            `buffer_mb` would not keep three quarters of the live episodes' blocks alive (`pool_size`, or the rank's
            episodes where fewer: `auto_read_ahead`), so that a batch mixes the live episodes even where items are
            large. More rows a block decode faster on long GOPs at the cost of ten batches' effective size:
            `dlbench tune` moves it where a user's floor allows.
        block_stride: how far apart a block's rows are (frames); None: the camera window's spacing
            (`partition.window_stride`: 30 for sarm at 30 fps, 1 for single frames). Rows that far apart share all
            but one of their window's frames, so a block decodes and holds read_ahead + window - 1 frames per camera
            instead of read_ahead x window, and items of one episode in a batch are that far apart in time.
        gop_run: random order, single rows: rows of an episode read forward, one seek, before its next random jump;
            0: each block a jump. None: with 2 DataLoader workers or more (`use_workers`), the first camera's
            keyframe interval where it is longer than `read_ahead` (read from the MP4's index); else 0.
        decode_ahead: in random order where each block is a jump, this many blocks of a virtual shard decoded
            together: on long GOPs faster at the same order, for the memory of the blocks decoded early (at most
            decode_ahead - 1 times what the buffer holds). None: 4 where a row's window reaches over several GOPs of
            8 frames or more (sarm on H.264's or HEVC's GOPs of 30), else 1.
        virtual_shards: how many runs of episodes to cut the dataset into (the unit of dealing and of resuming;
            at most the number of episodes); None: `partition.auto_virtual_shards`, one per episode (per fetch
            group when fetching) up to 512. Fewer than ranks x workers leaves workers without work.
        decoder_cache_size: open decoders per worker (on the CPU one per pool slot, camera and file); the default,
            cameras x (the worker's pool slots + 2), keeps every live episode's decoders open plus a few more.
        decoder_cache_mb: the most memory (MB) a worker's open decoders may hold, by their estimated size
            (`dlbench.decode.cache.decoder_bytes`); under it the least recently used close (a live episode's decoder may
            then reopen and seek). With `buffer_mb` it bounds a worker's decoded data and decoders in bytes.
        remote_block_kb: the size (KB) of each read of a remote video file; None: 4 MB in forward order, 128 KB in
            random order (`_remote_block`). A worker keeps up to `decoder_cache_size` reads, which its decoders of
            one file share (`decode.source.SharedReads`), so larger reads trade memory for fewer requests where
            reading forward (480x640 AV1 from the loopback Hub: 9.2 requests per 1,000 frames at 4 MB, 2.5 at
            16 MB) and read bytes no block uses in random order.
        fetch_episodes: remote video only (ignored for local files). 0: read it as the decoders ask
            (`remote_block_kb`). k >= 1: fetch the video of k consecutive episodes of a virtual shard with one request
            per file, ahead of use, into spill files on local disk (`decode.fetch`); those k episodes enter the pool
            one after another (k > 1 pairs neighbouring recordings in the shuffle). Disk per worker: up to
            (pool_size + 2) x k episodes' video (a group's files go when its last episode is read).
        spill_dir: where fetched episodes are spilled (a local disk, not a RAM-backed /tmp); None: TMPDIR.
        local_cache: for a Hub dataset, download meta/ and the files of `episodes` once into huggingface_hub's
            cache and stream them from there (`dataset_meta.local_snapshot`), instead of range reads every epoch.
        tag_items: add `_shard` (virtual shard), `_pos` (place in its stream) and `_epoch` to each item, for
            `observe` (resumable state under DataLoader workers); off by default, so items hold LeRobot's keys only.
    """

    def __init__(
        self,
        repo_id: str | None = None,
        root: str | None = None,
        episodes: list[int] | None = None,
        image_transforms=None,
        delta_timestamps: dict | None = None,
        tolerance_s: float = TOLERANCE_S,
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
        decoder_cache_mb: float | None = None,
        remote_block_kb: float | None = None,
        fetch_episodes: int = 0,
        spill_dir: str | None = None,
        local_cache: bool = False,
        rank: int | None = None,
        world_size: int | None = None,
        pool_size: int | None = None,
        episode_order: str | None = None,
        pieces: int | None = None,
        gop_run: int | None = None,
        read_ahead: int | None = None,
        block_stride: int | None = None,
        buffer_mb: float | None = None,
        decode_ahead: int | None = None,
        virtual_shards: int | None = None,
        tag_items: bool = False,
        data_files_root: str | None = None,
        meta: DatasetMeta | None = None,
    ):
        _check_order_args(
            dict(pool_size=pool_size, buffer_size=buffer_size, read_ahead=read_ahead, block_stride=block_stride,
                 virtual_shards=virtual_shards, pieces=pieces, decode_ahead=decode_ahead), gop_run, episode_order,
            fetch_episodes,
        )  # fmt: skip
        check_lerobot_args(token=token, depth_output_unit=depth_output_unit, rng=rng)
        self.meta = open_meta(repo_id, root, revision, repo_type, cameras, data_files_root, local_cache, episodes, meta)
        self.episodes, _ = episode_rows(self.meta, episodes, episode_filter)
        self.rank, self.world_size = rank_and_world(rank, world_size)
        windows = resolve_windows(mode, delta_timestamps, self.meta)
        self._auto_forward = episode_order is None and _forward_by_default(
            self.meta, self.episodes, windows, shuffle, fetch_episodes, decode_device
        )
        episode_order = episode_order or ("forward" if self._auto_forward else "random")
        self._columns_spec = data_columns(self.meta)
        # a cache size of 0 is set once the worker's pool slots are known (`_cut`)
        decoder = FrameDecoder(
            self.meta, decode_device, decoder_cache_size or 0, tolerance_s,
            decoder_cache_mb=decoder_cache_mb, fetch=fetch_episodes > 0, spill_dir=spill_dir,
            block_size=int(remote_block_kb * 1024) if remote_block_kb else _remote_block(episode_order),
        )  # fmt: skip
        self.builder = ItemBuilder(
            self.meta, windows, {}, decoder, not return_uint8, image_transforms, depth_output_unit
        )
        # episodes fetched together enter the pool together: groups change the order only where fetching is on
        self.group = fetch_episodes if self.builder.decoder.fetch else 1
        # read forward, each pool slot gets its own decoder per file (`_reads_forward`: a seek back to a keyframe
        # costs more than decoding on); NVDEC decoders cost 50-70 ms and GPU memory to create, so there one per file
        self._slot_cursors = decode_device == "cpu"
        # in random order a slot's last block's frames are not kept (its next is elsewhere; they'd be outside budgets)
        self.builder.decoder.keep_recent = episode_order == "forward"
        # _iters: __iter__ calls since set_epoch (persistent DataLoader workers advance their own epoch)
        self.seed, self.epoch, self._iters = seed, 0, 0
        self._pool_arg, self.buffer_size, self.shuffle = pool_size, buffer_size, shuffle
        self.pool_size = pool_size or FORWARD_POOL  # set from the pieces in `_cut` where None and in random order
        # the buffer keeps uint8 frames, a quarter of float32's bytes, made floats as they leave it (`_shard_stream`)
        self.builder.hold_uint8 = self._floats_on_yield = self.builder.return_float and image_transforms is None
        self.episode_order = episode_order
        offsets = [o for c in self.meta.frame_keys for o in windows.get(c, [0])]
        self.block_stride = block_stride or window_stride(offsets)
        self.buffer_mb = buffer_mb or self.auto_buffer_mb(read_ahead)
        self.tag_items, self._ahead_arg = tag_items, decode_ahead
        self._window_span = window_span(windows, self.meta.frame_keys)
        self.read_ahead = read_ahead or self.auto_read_ahead()
        self._gop: int | None = None  # the video's keyframe interval, read once (`_keyframe_interval`)
        if read_ahead is None and block_stride is None and gop_run is None:
            self._stripes_of_gops()
        self._plan(gop_run, pieces, virtual_shards, decoder_cache_size)
        self._loaded: tuple | None = None  # the runs of rows whose parquet columns are in memory
        self._tables = HeldTables(HELD_DATA_MB * 2**20)  # across epochs: a small dataset is read once a process
        self.delivered = Delivered()  # what this process delivered of the epoch; what a loaded state skips
        self._workers = 0  # the DataLoader workers `use_workers` was told of

    def _plan(self, gop_run: int | None, pieces: int | None, virtual_shards: int | None, cache: int | None) -> None:
        """GOP runs, pieces and virtual shards as asked, or (None) by default: `use_workers` moves them."""
        self._gop_fixed = gop_run is not None  # by the user, or by a loaded state
        self.gop_run = self._eligible(gop_run) if gop_run is not None else 0
        self._virtual_shards_arg, self._cache_arg = virtual_shards, cache
        self._pieces_fixed = pieces is not None  # by the user, or by a loaded state
        self._cut(virtual_shards, pieces)

    def _cut(self, virtual_shards: int | None, pieces: int | None) -> None:
        """The episodes read (all, or `episodes=`), each cut into pieces (`partition.cut_pieces`), and the pieces
        into virtual shards of about equal frames: a shard holds piece ids, contiguous in rows."""
        chosen = (
            np.arange(self.meta.num_episodes)
            if self.episodes is None
            else np.unique(np.asarray(self.episodes, np.int64))
        )
        fetching = self.builder.decoder.fetch
        if pieces is not None and pieces > 1 and fetching:
            raise UserError(f"pieces {pieces} with fetch_episodes: episodes are fetched whole; use pieces 1")
        per = pieces or 1
        ep_from, ep_to = self.meta.ep_from[chosen], self.meta.ep_to[chosen]
        self._stripes = None
        if per > 1 and self.shuffle and self.episode_order == "random":  # blocks are read in random order anyway
            cut = stripe_pieces(ep_from, ep_to, per, self.read_ahead, self.block_stride, self.gop_run)
            pf, pt, pe, phase, count, lengths = cut
            self._stripes = (phase, count)
        else:  # read forward, a piece costs one seek: contiguous, at least MIN_PIECE_S long
            pf, pt, pe = cut_pieces(ep_from, ep_to, per, math.ceil(MIN_PIECE_S * self.meta.fps))
            lengths = pt - pf
        self._piece_from, self._piece_to, self._piece_episode = pf, pt, chosen[pe]
        self.pieces = per
        count = auto_virtual_shards(len(pf), self.group) if virtual_shards is None else virtual_shards
        parts = split_episodes(lengths, count)
        self._shards = [np.arange(r.start, r.stop) for r in parts]
        self._shard_frames = np.array([int(lengths[list(r)].sum()) for r in parts], np.int64)
        # a shard made of pieces of one episode deals beside that episode's other pieces (`partition.deal_order`)
        eps = [np.unique(self._piece_episode[s]) for s in self._shards]
        self._shard_keys = np.array([int(e[0]) if len(e) == 1 else -1 - i for i, e in enumerate(eps)], np.int64)
        self._episodes_crc = zlib.crc32(chosen.astype("<i8").tobytes())
        if self._pool_arg is None and self.shuffle and self.episode_order == "random":
            self.pool_size = len(pf)
        elif self._pool_arg is None and self._auto_forward:  # every piece, or as many as their decoders allow
            self.pool_size = min(len(pf), forward_slots(self.meta))
        self.lanes = Lanes.plan(
            len(pf), len(self._shards), self.pool_size, self.buffer_size, self.max_blocks(), self.shuffle
        )
        if not self._cache_arg:
            # at least one: a dataset whose cameras are all stored as images opens no decoder, but the cache is made
            self.builder.decoder.cache_size = max(
                1, len(self.meta.cameras) * (self.lanes.at_once * self.lanes.pool + 2)
            )

    def _eligible(self, asked: int | None) -> int:
        """Rows of an episode read forward before the next random jump (`partition.gop_runs`): `asked`, or (None)
        the video's keyframe interval where it is longer than a block and `buffer_mb` keeps GOP_RUNS_HELD runs of
        it decoded; 0 outside random order of single rows. A block at random costs the decode of the GOP before
        it; read a GOP at a time the stream seeks once per GOP (docs/library.md), but a run's rows are a second of
        one episode: a buffer of a few runs hands out batches of a few moments. 2 workers, 16 episodes (`python -m
        benchmarks frontier`, effective / nominal over one batch / ten): 720p H.264 g=30 (1.6 runs held) 389
        frames/s at 0.72 / 0.46 with runs, 132 at 0.81 / 0.76 without, map 40; 3 cameras of 240x320 HEVC (5.6
        runs) 2,164 at 0.79 / 0.34 against 1,409 at 0.87 / 0.58, map 329; 96x128 H.264 (60 runs) 7,878 at 0.91 /
        0.64 with runs, 5,232 at 0.89 / 0.76 without."""
        if not self.shuffle or self.episode_order != "random" or self.block_stride > 1:
            return 0
        if asked is not None:
            return asked
        gop = self._keyframe_interval()
        held = self.max_blocks() * self.read_ahead / max(gop, 1)
        return gop if gop > self.read_ahead and held >= GOP_RUNS_HELD and self._slot_decoders_fit() else 0

    def _slot_decoders_fit(self) -> bool:
        """Whether a decoder per pool slot, camera and file (what reading forward takes: `_reads_forward`) stays
        within FORWARD_DECODERS_MB of a worker's memory. A decoder holds its file's index, and a v3.0 file may hold
        thousands of episodes: 10,000 episodes of 96x128 in two files, 2 workers of pool 165: 6.2 GB with GOP runs
        (2.9 GB a worker in decoders) at 2,705 frames/s, 1.3 GB without at 2,858."""
        return (self.lanes.at_once * self.lanes.pool + 2) * slot_decoders_mb(self.meta) <= FORWARD_DECODERS_MB

    def use_workers(self, num_workers: int) -> None:
        """Called by dlbench's `DataLoader` with its `num_workers` (call it yourself before iterating under another
        DataLoader). With `pieces` left to its default, each episode is cut into ranks x workers pieces dealt to
        different workers, so that every worker's pool holds a piece of every episode and each
        batch mixes the whole dataset; in whole episodes each worker's batches draw from its own 1/W of them (on
        16 episodes of 480x640, 2 workers: 0.52 of the nominal batch).

        With `gop_run` unset, long GOPs are read a GOP at a time where there are 2 workers or more: a run keeps a
        live episode's items within one GOP for several batches, and consecutive batches from other workers' pools
        dilute that (720p H.264, GOP 30: 2 workers 362 against 132 frames/s at the same effective batch size; one
        worker 241 against 72 but 0.20 over ten batches, under the default floor). A loaded state keeps its own."""
        self._workers = num_workers
        if self.builder.decoder.fetch or not self.shuffle:
            return
        pieces = self.pieces
        if not self._pieces_fixed:
            pieces = auto_pieces(len(np.unique(self._piece_episode)), self.world_size, num_workers)
        if pieces != self.pieces:  # the lanes of these pieces first: whether GOP runs' decoders fit depends on them
            self._cut(self._virtual_shards_arg, pieces)
        if not self._gop_fixed:
            gop = self._eligible(None) if num_workers >= 2 else 0
            if gop != self.gop_run:
                self.gop_run = gop
                self._cut(self._virtual_shards_arg, pieces)

    def plan_for(self, num_workers: int) -> None:
        """Plan pieces and GOP runs as `use_workers(num_workers)` does and keep that plan under any DataLoader: one
        worker then reads as each of `num_workers` does (a calibration's pass; with a plan of its own, one worker
        of 96x128 frames from a 20 ms bucket reads 128 KB blocks at random, 25 samples/s, where each of two reads
        GOP runs at 300)."""
        self.use_workers(num_workers)
        self._pieces_fixed = self._gop_fixed = True

    # ------------------------------------------------------------------------------------------------ state
    def set_epoch(self, epoch: int) -> None:
        """Start epoch `epoch` from its beginning (forgets what was delivered or loaded of another)."""
        self.epoch, self._iters = epoch, 0
        self.delivered.start(epoch)

    def observe(self, batch: dict) -> None:
        """Record a batch the consumer has taken (needed for `state_dict()` when num_workers > 0; items must carry
        `_shard`, `_pos` and `_epoch`: build with tag_items=True). A `UserError` if they do not."""
        if SHARD_KEY not in batch or POS_KEY not in batch or EPOCH_KEY not in batch:
            raise UserError("observe(batch) needs items tagged with their place: build the dataset with tag_items=True")
        shards, positions, epochs = (
            torch.as_tensor(batch[k]).reshape(-1).tolist() for k in (SHARD_KEY, POS_KEY, EPOCH_KEY)
        )
        for shard, pos, epoch in zip(shards, positions, epochs):
            self.delivered.note(epoch, shard, pos + 1)

    def _identity(self) -> dict:
        """What a state must match to be resumed here: every virtual shard's order depends on all of it."""
        return {
            "seed": self.seed,
            "virtual_shards": len(self._shards),
            "dataset": {
                "num_frames": self.num_frames,
                "episodes": len(np.unique(self._piece_episode)),
                "episodes_crc32": self._episodes_crc,
            },
            "order": {
                "pool_size": self.pool_size,
                "buffer_size": self.buffer_size,
                "read_ahead": self.read_ahead,
                **({"block_stride": self.block_stride} if self.block_stride > 1 else {}),
                "shuffle": self.shuffle,
                **({"episode_order": self.episode_order} if self.episode_order != "random" else {}),
                **({"pieces": self.pieces} if self.pieces > 1 else {}),
                **({"gop_run": self.gop_run} if self.gop_run else {}),
                "max_blocks": self.max_blocks(),
                "at_once": self.lanes.at_once,
                **({"groups": self.group} if self.group > 1 else {}),
            },
        }

    def state_dict(self) -> dict:
        """Where the epoch stands: {seed, epoch, virtual_shards, dataset, order, ranks: {world_size, counted: the
        ranks whose counts it holds}, delivered: {virtual shard: items of its stream delivered}} (numbers, strings
        and dicts: JSON-safe, though JSON turns the keys of `delivered` into strings).

        This rank's counts are what `observe` recorded (or, without DataLoader workers, what this process yielded).
        Where torch.distributed's process group is initialized and matches this dataset's rank and world size,
        every rank must call it at the same point (it gathers the ranks' counts) and each gets the global state;
        otherwise combine the ranks' states with `merge_states`."""
        if self._workers and not self.tag_items:
            # the workers yield in their own processes: only `observe` of tagged items tells this one what arrived
            raise UserError(
                f"state_dict() under {self._workers} DataLoader workers needs tag_items=True and observe(batch) "
                "for each batch taken; without them it would record nothing delivered"
            )
        state = self.delivered.state(self._identity(), self.rank, self.world_size)
        dist = torch.distributed
        if (
            self.world_size > 1
            and dist.is_available()
            and dist.is_initialized()
            and (dist.get_rank(), dist.get_world_size()) == (self.rank, self.world_size)
        ):
            states: list = [None] * self.world_size
            dist.all_gather_object(states, state)
            state = self.merge_states(states)
        return state

    @staticmethod
    def merge_states(states: list[dict]) -> dict:
        """One state from every rank's `state_dict()` of the same point of an epoch (each rank counts only the
        virtual shards its workers read). A `UserError` if they come from different streams or epochs."""
        return merge_states(states)

    def load_state_dict(self, state: dict) -> None:
        """Resume the epoch of `state` (from `state_dict`, merged over ranks): the next pass yields exactly what it
        had not delivered, with any ranks and DataLoader workers. A `UserError` if the state is not this stream's
        (another dataset, episodes, seed, virtual_shards or order arguments), is damaged, or lacks the counts of a
        rank that read some of the virtual shards this rank will read (merge the ranks' states first)."""
        # pieces and GOP runs by default follow the workers: a state resumes with the ones it was cut with
        order = state.get("order") if isinstance(state.get("order"), dict) else {}
        pieces = self.pieces if self._pieces_fixed else int(order.get("pieces", 1))
        gop = self.gop_run if self._gop_fixed else int(order.get("gop_run", 0))
        if (pieces, gop) != (self.pieces, self.gop_run) and not self.builder.decoder.fetch:
            self.gop_run = gop
            self._cut(self._virtual_shards_arg, pieces)
        self._pieces_fixed = self._gop_fixed = True
        self.epoch = self.delivered.load(state, self._identity(), self._shard_frames, self.rank_shards)
        self._iters = 0

    def auto_buffer_mb(self, read_ahead: int | None) -> float:
        """The default `buffer_mb`: room for LANES_HELD blocks (each lane of a worker holds one, and ten batches of
        a worker draw from its lanes), within BUFFER_MB_RANGE. Blocks of `read_ahead` rows, or of 2 where that is
        the default (`auto_read_ahead`; 1 where two rows share a frame)."""
        offsets = {c: self.builder.windows.get(c, [0]) for c in self.meta.frame_keys}
        ahead = read_ahead or AUTO_READ_AHEAD
        if read_ahead is None and any(
            block_frames(o, ahead, self.block_stride) < ahead * len(o) for o in offsets.values()
        ):
            ahead = 1
        low, high = BUFFER_MB_RANGE
        return float(min(high, max(low, math.ceil(LANES_HELD * self.block_bytes(ahead) / 2**20))))

    def _stripes_of_gops(self) -> None:
        """The default block on long GOPs (STRIPE_ROWS): in random order of single frames, where GOP runs would not
        be taken (the buffer keeps fewer than GOP_RUNS_HELD of them), the first episode's keyframes fall every GOP
        frames (`DatasetMeta.regular_gop`; x265's scene cuts do not) and the interval has a divisor near
        STRIPE_ROWS leaving rows STRIPE_MIN_GAP or more apart, a block is that many rows spread evenly over one GOP
        (an episode starts on a keyframe, so block k of a phase lies in GOP k). Left as it is elsewhere."""
        if not self.shuffle or self.episode_order != "random" or self._window_span or self.block_stride > 1:
            return
        if self.builder.decoder.fetch or self.read_ahead < AUTO_READ_AHEAD:
            return
        first = int(self.episodes[0]) if self.episodes is not None and len(self.episodes) else 0
        gop = self.meta.regular_gop(first)  # a stripe lies in one GOP only where keyframes fall every gop frames
        if gop < STRIPE_MIN_GOP or self.max_blocks() * self.read_ahead / gop >= GOP_RUNS_HELD:
            return
        rows = [k for k in range(2, gop) if gop % k == 0 and gop // k >= STRIPE_MIN_GAP]
        if not rows:
            return
        k = min(rows, key=lambda r: (abs(r - STRIPE_ROWS), r))
        old = (self.read_ahead, self.block_stride)
        self.read_ahead, self.block_stride = k, gop // k
        if self.max_blocks() < self._live_wanted():  # the buffer would keep too few of its live episodes' blocks
            self.read_ahead, self.block_stride = old

    def auto_read_ahead(self) -> int:
        """The default `read_ahead`: AUTO_READ_AHEAD (2), or 1 where two rows a block share a frame or where
        `buffer_mb` would not keep 3/4 of a worker's live episodes' blocks alive. Fewer live blocks than live
        episodes is what makes a stream's batches runs of one episode. A worker's live episodes: `pool_size`, or the
        rank's episodes where they are fewer (as many pieces when they follow the workers: `use_workers`); counting
        the pool there cut a 720p worker's blocks to single frames, each a seek in a GOP of 30 (41 against 72
        frames/s at pool 32). Rows whose windows share frames (a block of a multi-frame window) meet in one batch,
        which then holds those frames twice: on 16 episodes of 480x640 (sarm, 2 workers) read_ahead 2, 4 and 8 gave
        1.5x, 1.9x and 2.8x the frames/s of 1 at 0.72, 0.65 and 0.58 distinct frames a batch, against 0.95
        (docs/benchmarks.md); `tune` moves it where a user's floor allows."""
        want = self._live_wanted()
        offsets = {c: self.builder.windows.get(c, [0]) for c in self.meta.frame_keys}
        ahead = AUTO_READ_AHEAD
        shares = any(block_frames(o, ahead, self.block_stride) < ahead * len(o) for o in offsets.values())
        if not shares and self.buffer_mb * 2**20 // self.block_bytes(ahead) >= want:
            return ahead
        return 1

    def _live_wanted(self) -> int:
        """The blocks a worker's buffer should keep alive: 3/4 of its live episodes'. Unset, the pool is every
        piece, bounded by the blocks themselves (a lane holds one); the rule keeps a working set of FORWARD_POOL
        episodes' blocks: 500 episodes of 2 x 240x320, 2 workers, every piece live, read_ahead 2 gave 667 frames/s
        at 0.91 / 0.82 against the dataset, 1 gave 523 at 0.98 / 1.13 (map 516)."""
        episodes = self.meta.num_episodes if self.episodes is None else len(self.episodes)
        pool = self._pool_arg or FORWARD_POOL
        return math.ceil(0.75 * min(pool, math.ceil(episodes / max(1, self.world_size))))

    def block_bytes(self, read_ahead: int | None = None) -> int:
        """Bytes of decoded frames in one block: each camera's distinct frames of `read_ahead` rows `block_stride`
        apart (`partition.block_frames`)."""
        read_ahead = read_ahead or self.read_ahead
        windows, features = self.builder.windows, self.meta.info["features"]
        size = 4 if self.builder.return_float and not self.builder.hold_uint8 else 1
        depth = set(self.meta.depth_keys)  # float32 always
        return max(
            1,
            sum(
                int(np.prod(features[c]["shape"]))
                * (4 if c in depth else size)
                * block_frames(windows.get(c, [0]), read_ahead, self.block_stride)
                for c in self.meta.frame_keys
            ),
        )

    def max_blocks(self) -> int:
        """Decoded blocks one worker's buffer keeps alive: `buffer_mb` over one block's bytes (at least 1)."""
        return max(1, int(self.buffer_mb * 2**20 // self.block_bytes()))

    # ---------------------------------------------------------------------------------------------- sharding
    @property
    def num_virtual_shards(self) -> int:
        return len(self._shards)

    def virtual_shard_episodes(self, shard: int) -> np.ndarray:
        """The episodes of virtual shard `shard` (contiguous among the episodes read; its first and last may be
        read in part, by pieces)."""
        return np.unique(self._piece_episode[self._shards[shard]])

    def rank_shards(self, epoch: int, rank: int | None = None, world_size: int | None = None) -> np.ndarray:
        """The virtual shards rank `rank` of `world_size` (default: this one's) reads in `epoch`, in the order its
        workers take them (depends on seed, epoch and world size, not on DataLoader workers)."""
        rank = self.rank if rank is None else rank
        world = self.world_size if world_size is None else world_size
        return rank_shards(len(self._shards), self.seed, epoch, rank, world, self.shuffle, self._shard_keys)

    def worker_shards(self, epoch: int, num_workers: int = 1, worker: int = 0) -> np.ndarray:
        """The virtual shards DataLoader worker `worker` of `num_workers` of this rank reads in `epoch`, in order."""
        return worker_shards(self.rank_shards(epoch), num_workers, worker, self.shuffle)

    def busy_workers(self, num_workers: int) -> int:
        """How many of this rank's `num_workers` DataLoader workers have episodes to read (0 workers: 1 process), in
        the layout a DataLoader of that many workers reads (`use_workers`: pieces follow the workers)."""
        self.use_workers(num_workers)
        return busy_workers(len(self._shards), self.rank, self.world_size, num_workers)

    def work_note(self, num_workers: int) -> str:
        """One line when a rank or DataLoader worker of this stream has nothing to read, else ''."""
        workers, busy = max(num_workers, 1), self.busy_workers(num_workers)
        if busy == workers:
            return ""
        # with fetching, a fetch group of episodes is the unit dealt out
        unit = f", fetch_episodes {self.group}" if self.group > 1 else ""
        shards = f"{len(self._shards)} virtual shard(s){unit} for {self.world_size} rank(s)"
        if busy == 0:
            return (
                f"rank {self.rank} of {self.world_size} has no episode to read ({shards}); "
                f"use at most {len(self._shards)} ranks, or more episodes"
            )
        return (
            f"rank {self.rank} of {self.world_size}: {busy} of {workers} DataLoader workers have episodes to read "
            f"({shards} x {workers} workers); the others idle: use num_workers <= {busy}, or more episodes"
        )

    def shard_events(self, shard: int, epoch: int) -> Iterator[tuple[str, tuple[list[int], int] | int]]:
        """Virtual shard `shard`'s event stream in `epoch` (`shard_order`): a function of (seed, epoch, shard) and
        the constructor's arguments only."""
        return shard_order(
            self._piece_from,
            self._piece_to,
            self._shards[shard],
            self.seed,
            epoch,
            shard,
            self.lanes.pool,
            self.lanes.buffer,
            self.read_ahead,
            self.shuffle,
            self.lanes.blocks,
            self.group,
            self.block_stride,
            self.episode_order == "forward",
            self._stripes,
            self.gop_run,
        )

    def worker_decodes(self, epoch: int, num_workers: int = 1, worker: int = 0) -> Iterator[tuple[list[int], int]]:
        """The decode requests (rows, decoder slot) DataLoader worker `worker` of `num_workers` makes in `epoch`, in
        its order (its virtual shards interleaved in lanes, as `__iter__` reads them), without decoding anything."""

        def units(shard: int, lane: int):
            for decodes, _ in emit_units(self.shard_events(shard, epoch)):
                yield [(rows, lane * self.lanes.pool + slot) for rows, slot in decodes]

        mine = self.worker_shards(epoch, num_workers, worker)
        streams = [partial(units, int(v)) for v in mine]
        rng = np.random.default_rng([self.seed, epoch, self.rank, self.world_size, worker, num_workers])
        sizes = [int(self._shard_frames[v]) for v in mine]
        for decodes in interleave(streams, self.lanes.at_once, rng, sizes, [self._shard_key(v) for v in mine]):
            yield from decodes

    def shard_groups(self, shard: int, epoch: int) -> list[list[int]]:
        """The order in which virtual shard `shard`'s episodes enter its pool in `epoch`, in fetch groups (the
        `entry_groups` its `shard_events` use)."""
        rng = np.random.default_rng([self.seed, epoch, shard]) if self.shuffle else None
        return [[int(self._piece_episode[p]) for p in g] for g in entry_groups(self._shards[shard], self.group, rng)]

    @property
    def num_frames(self) -> int:
        """Frames of the episodes read, over all ranks (LeRobot's `StreamingLeRobotDataset.num_frames`)."""
        return int(self._shard_frames.sum())

    def __len__(self) -> int:
        """Frames this rank yields in epoch `epoch` (all its workers together); after `load_state_dict`, those it
        has still to yield in the loaded epoch (until `set_epoch`)."""
        shards = self.rank_shards(self.epoch)
        done = np.array([self.delivered.skip.get(int(v), 0) for v in shards], np.int64)
        return int((self._shard_frames[shards] - done).sum())

    # --------------------------------------------------------------------------------------------- iteration
    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        num_workers, worker = (info.num_workers, info.id) if info else (1, 0)
        epoch = self.epoch + self._iters
        # only the first pass after load_state_dict resumes; later epochs (persistent workers) start from the top
        skip = self.delivered.skip if self._iters == 0 else {}
        self._iters += 1
        todo = [
            (int(v), skip.get(int(v), 0))
            for v in self.worker_shards(epoch, num_workers, worker)
            if skip.get(int(v), 0) < self._shard_frames[v]
        ]
        if not todo:
            return
        self._load_shards([v for v, _ in todo])
        fetcher = self.builder.decoder.fetcher
        if fetcher is not None:  # one plan for the pass: each lane's next groups are fetched ahead as it reads
            fetcher.plan([g for v, _ in todo for g in self.shard_groups(v, epoch)])
        streams = [partial(self._shard_stream, v, epoch, done, info is None, fetcher) for v, done in todo]
        rng = np.random.default_rng([self.seed, epoch, self.rank, self.world_size, worker, num_workers])
        try:
            sizes = [int(self._shard_frames[v]) - done for v, done in todo]
            keys = [self._shard_key(v) for v, _ in todo]
            yield from interleave(streams, self.lanes.at_once, rng, sizes, keys)
        finally:  # also when the consumer stops early: the spill files go
            if fetcher is not None:
                fetcher.release_all()

    def _shard_stream(self, shard: int, epoch: int, skip: int, record: bool, fetcher, lane: int) -> Iterator:
        """The items of one virtual shard's stream after its first `skip` (replayed without decoding), read in
        `lane` of the worker (its decoders are the lane's pool slots); `record`: count them as delivered (no
        DataLoader workers: what this process yields is what the consumer takes)."""
        ready: dict[int, dict] = {}
        left = {}  # rows of an episode still to decode: strided blocks end an episode on any row
        pending: set[int] = set()
        replayed_ends: list[int] = []  # episodes whose last rows were decoded before the resumed position
        pos = 0
        events, peeked = self.shard_events(shard, epoch), deque()
        ahead = self.decode_ahead() if fetcher is None else 1
        early: set[int] = set()  # rows decoded with an earlier block (`decode_ahead`)
        while (event := peeked.popleft() if peeked else next(events, None)) is not None:
            kind, value = event
            if kind == "decode":
                rows, slot = value
                ep = self._episode_of(rows[0])
                left[ep] = left.get(ep, int(self.meta.ep_to[ep] - self.meta.ep_from[ep])) - len(rows)
                ends = left[ep] == 0
                if pos < skip:
                    pending.update(rows)  # replaying: decode only what is still in the buffer after the skip
                    if ends:
                        replayed_ends.append(ep)
                    continue
                if fetcher is not None:
                    fetcher.need(ep)
                if rows[0] in early:
                    early.difference_update(rows)
                else:
                    # the next blocks of this shard decoded with this one: one sorted request per episode and
                    # camera decodes each GOP they share once; they are yielded where the stream puts them
                    more = _peek_decodes(events, peeked, ahead - 1)
                    rows = rows + more
                    early.update(more)
                    cursor = lane * self.lanes.pool + slot if self._reads_forward() else None
                    ready.update(zip(rows, self.builder.build_many(rows, cursor)))
                if fetcher is not None and ends:
                    fetcher.done(ep)
                continue
            if pos < skip:
                pending.discard(value)
                pos += 1
                if pos == skip and pending:
                    rows = sorted(pending)
                    for ep in {self._episode_of(r) for r in rows} if fetcher is not None else ():
                        fetcher.need(ep)
                    ready.update(zip(rows, self.builder.build_many(rows)))
                    pending.clear()
                if pos == skip and fetcher is not None:
                    for ep in replayed_ends:
                        fetcher.done(ep)
                continue
            item = ready.pop(value)
            if self._floats_on_yield and isinstance(item, dict):  # not left to dlbench's collate: made here
                for cam in self.meta.rgb_keys:
                    item[cam] = item[cam].float() / 255.0
            if self.tag_items:
                item[SHARD_KEY], item[POS_KEY], item[EPOCH_KEY] = shard, pos, epoch
            pos += 1
            if record:
                self.delivered.note(epoch, shard, pos)
            yield item

    def decode_ahead(self) -> int:
        """Blocks of a virtual shard decoded together, in random order where each block is a jump: rows of one
        episode at unrelated moments share the GOPs they decode (a frame costs the decode of its GOP before it), and
        the order items are yielded in does not change. The blocks decoded early are held until their turn, beside
        the buffer: a worker's lanes hold a block each at most (`Lanes.plan`: within `buffer_mb`, or one block where it
        is larger), so those hold at most (decode_ahead - 1) times that. Unset: `DECODE_AHEAD` where a row's window
        reaches over several GOPs of 8 frames or more (sarm: 8 frames a second apart), so that rows of one episode
        share nearly every GOP they decode; else 1 (single frames share a GOP only where they land in one).
        `python -m benchmarks frontier`, 2 workers, 4 against 1: 720p H.264 g=30 sarm 116 frames/s at 3.1 GB
        against 56 at 2.2 GB (map 71 at 2.1 GB); single frames 149 at 2.4 GB against 132 at 1.2 GB."""
        if self._reads_forward() or self.gop_run or not self.shuffle:
            return 1
        if self._ahead_arg is not None:
            return self._ahead_arg
        gop = self._keyframe_interval()
        return DECODE_AHEAD if gop >= 8 and self._window_span >= gop else 1

    def _keyframe_interval(self) -> int:
        """The first camera's keyframe interval (frames), read once from an MP4 index (requests, when remote)."""
        if self._gop is None:
            first = int(self.episodes[0]) if self.episodes is not None and len(self.episodes) else 0
            self._gop = self.meta.keyframe_interval(first)
        return self._gop

    def _reads_forward(self) -> bool:
        """Whether a pool slot's next block follows its last one in the file (episodes in reading order, or GOP
        runs), so that a decoder of its own (`cursor`) decodes on instead of seeking. In random order each block is a
        jump whatever the decoder: one decoder per file and camera does the same work in less memory (3 cameras of
        240x320 HEVC, sarm, one worker: 48 decoders open, peak PSS 824 MB at 211 frames/s; 3, 700 MB at 218)."""
        return self._slot_cursors and (self.episode_order == "forward" or self.gop_run > 0)

    def _shard_key(self, shard: int) -> int:
        """The episode a virtual shard starts in: lanes prefer shards of episodes no other lane reads."""
        return int(self._piece_episode[self._shards[shard][0]])

    def _episode_of(self, row: int) -> int:
        return int(np.searchsorted(self.meta.ep_from, row, side="right")) - 1

    def _load_shards(self, shards: list[int]) -> None:
        """Read the parquet columns of these virtual shards' rows only (each data file once; files outside them are
        not read). All of a pass's shards at once: items of one shard may be batched with the next one's."""
        # whole episodes: a piece read forward is a contiguous part of its episode, and a row's window reaches into
        # the parts other workers read
        first, last = self.meta.ep_from, self.meta.ep_to
        spans = sorted(
            (int(first[self._piece_episode[self._shards[v][0]]]), int(last[self._piece_episode[self._shards[v][-1]]]))
            for v in shards
        )
        runs: list[list[int]] = []
        for a, b in spans:  # merge touching spans
            if runs and a <= runs[-1][1]:
                runs[-1][1] = max(runs[-1][1], b)
            else:
                runs.append([a, b])
        key = tuple(map(tuple, runs))
        if self._loaded == key:
            return
        files = list(dict.fromkeys(f for a, b in runs for f in self.meta.data_files_for_rows(a, b)))
        cols = read_columns(self.meta, files, self._columns_spec, self._tables)
        index = cols["index"]  # ascending: data files are contiguous in index and read in order
        cuts = [(int(np.searchsorted(index, a)), int(np.searchsorted(index, b))) for a, b in runs]
        if len(cuts) == 1:
            held = {name: col[cuts[0][0] : cuts[0][1]] for name, col in cols.items()}  # views
        else:
            held = {name: np.concatenate([col[i:j] for i, j in cuts]) for name, col in cols.items()}
        self.builder.hold(held, [(a, b) for a, b in runs])
        self._loaded = key
