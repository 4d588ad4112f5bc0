"""Properties of the streaming loader's partition and order (`dlbench.loader.partition`), over many dataset shapes:
every frame once per epoch across ranks and workers, no idle worker where the episodes allow, and exact resume
under other ranks and workers. Pure functions, no I/O: each example models what each rank's DataLoader delivers."""

from __future__ import annotations

import collections
from dataclasses import dataclass
from functools import partial

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlbench.loader.partition import (
    MAX_AUTO_SHARDS,
    Lanes,
    auto_virtual_shards,
    block_frames,
    busy_workers,
    cut_pieces,
    deal_order,
    episode_blocks,
    gop_runs,
    interleave,
    rank_shards,
    shard_order,
    split_episodes,
    stripe_pieces,
    window_stride,
    worker_shards,
)

pytestmark = pytest.mark.unit


@dataclass
class Stream:
    """A stream's layout as `LeRobotStreamingDataset` builds it, over episodes of `lengths` frames."""

    lengths: list[int]
    seed: int
    pool: int
    buffer: int
    read_ahead: int
    blocks: int | None
    group: int
    stride: int = 1
    pieces: int = 1  # each episode cut into pieces, the units shards are made of, as the stream does
    striped: bool = False  # pieces as stripes of blocks (`stripe_pieces`), else contiguous of >= 2 frames
    gop: int = 0  # blocks taken a GOP run at a time (`gop_runs`; the stream does so for single rows, stride 1)

    @property
    def run_rows(self) -> int:
        return self.gop if self.stride == 1 and self.striped else 0  # runs come with stripes (random order)

    def __post_init__(self):
        lengths = np.asarray(self.lengths, np.int64)
        ep_to = np.cumsum(lengths)
        self.stripes = None
        if self.striped:
            cut = stripe_pieces(ep_to - lengths, ep_to, self.pieces, self.read_ahead, self.stride, self.run_rows)
            self.ep_from, self.ep_to, episode, phase, count, rows = cut
            self.stripes = (phase, count)
        else:
            self.ep_from, self.ep_to, episode = cut_pieces(ep_to - lengths, ep_to, self.pieces, 2)
            rows = self.ep_to - self.ep_from
        self.total = int(lengths.sum())
        count = auto_virtual_shards(len(self.ep_from), self.group)
        self.shards = [np.arange(r.start, r.stop) for r in split_episodes(rows, count)]
        eps = [np.unique(episode[s]) for s in self.shards]
        self.keys = np.array([e[0] if len(e) == 1 else -1 - i for i, e in enumerate(eps)])
        self.lanes = Lanes.plan(len(self.ep_from), len(self.shards), self.pool, self.buffer, self.blocks)

    def rows(self, shard: int, epoch: int) -> list[int]:
        """The shard's stream of rows in `epoch`, as its events emit them."""
        events = shard_order(
            self.ep_from,
            self.ep_to,
            self.shards[shard],
            self.seed,
            epoch,
            shard,
            self.lanes.pool,
            self.lanes.buffer,
            self.read_ahead,
            True,
            self.lanes.blocks,
            self.group,
            self.stride,
            stripes=self.stripes,
            run_rows=self.run_rows,
        )
        return [value for kind, value in events if kind == "emit"]

    def worker_items(self, epoch: int, rank: int, world: int, workers: int, worker: int, skip: dict):
        """(shard, position, row) in the order a worker yields them, after `skip` items of each shard."""
        mine = rank_shards(len(self.shards), self.seed, epoch, rank, world, keys=self.keys)
        mine = worker_shards(mine, workers, worker)

        def stream(shard: int, lane: int):
            rows = self.rows(shard, epoch)
            for pos in range(skip.get(shard, 0), len(rows)):
                yield shard, pos, rows[pos]

        rng = np.random.default_rng([self.seed, epoch, rank, world, worker, workers])
        return interleave([partial(stream, int(v)) for v in mine], self.lanes.at_once, rng)

    def deliver(self, epoch: int, world: int, workers: int, batch: int, stop: int | None = None, skip=None):
        """What each rank's consumer receives, its DataLoader taking the workers' batches in turn (a worker that
        ends drops out), up to `stop` batches a rank: {rank: [[(shard, pos, row), ...] per worker]}."""
        out = {}
        for rank in range(world):
            procs = [self.worker_items(epoch, rank, world, workers, w, skip or {}) for w in range(max(workers, 1))]
            got: list[list] = [[] for _ in procs]
            live, taken = list(range(len(procs))), 0
            while live and (stop is None or taken < stop):
                for w in list(live):
                    if stop is not None and taken >= stop:
                        break
                    items = [x for _, x in zip(range(batch), procs[w])]
                    if not items:
                        live.remove(w)
                        continue
                    got[w].extend(items)
                    taken += 1
            out[rank] = got
        return out


@st.composite
def streams(draw, most_episodes: int = 300):
    n = draw(st.integers(1, most_episodes))
    lengths = draw(st.lists(st.integers(1, 30), min_size=n, max_size=n))
    return Stream(
        lengths,
        seed=draw(st.integers(0, 2**16)),
        pool=draw(st.integers(1, 10)),
        buffer=draw(st.integers(1, 64)),
        read_ahead=draw(st.integers(1, 8)),
        blocks=draw(st.one_of(st.none(), st.integers(1, 12))),
        group=draw(st.sampled_from([1, 1, 2, 4])),
        stride=draw(st.sampled_from([1, 1, 3, 30])),
        pieces=draw(st.sampled_from([1, 1, 2, 3, 8])),
        striped=draw(st.booleans()),
        gop=draw(st.sampled_from([0, 0, 3, 30])),
    )


def _rows(delivered: dict) -> collections.Counter:
    return collections.Counter(row for per_worker in delivered.values() for items in per_worker for _, _, row in items)


@settings(max_examples=60, deadline=None)
@given(streams(), st.integers(1, 8), st.integers(0, 8), st.integers(1, 16), st.integers(0, 3))
def test_an_epoch_delivers_every_frame_once_and_leaves_no_worker_idle(stream, world, workers, batch, epoch):
    delivered = stream.deliver(epoch, world, workers, batch)
    total = stream.total
    assert _rows(delivered) == collections.Counter(range(total))
    units = len(stream.ep_from) // stream.group
    for rank, per_worker in delivered.items():
        busy = sum(1 for items in per_worker if items)
        assert busy == busy_workers(len(stream.shards), rank, world, workers)  # what the run's note says
        if world * max(workers, 1) <= min(units, MAX_AUTO_SHARDS):
            assert busy == max(workers, 1), f"rank {rank}: {busy} of {max(workers, 1)} workers have episodes"


@settings(max_examples=60, deadline=None)
@given(streams(), st.integers(1, 8), st.integers(0, 8), st.integers(1, 8), st.integers(0, 8), st.data())
def test_a_state_saved_anywhere_resumes_under_other_ranks_and_workers_exactly(stream, world, workers, w2, r2, data):
    batch = data.draw(st.integers(1, 16))
    stop = data.draw(st.integers(0, 40))  # batches each rank took before the checkpoint
    first = stream.deliver(1, world, workers, batch, stop=stop)
    state: dict[int, int] = {}  # the merged state: items delivered of each shard's stream
    for per_worker in first.values():
        for items in per_worker:
            for shard, pos, _ in items:
                state[shard] = max(state.get(shard, 0), pos + 1)
    then = stream.deliver(1, max(r2, 1), w2, batch, skip=state)
    both = _rows(first) + _rows(then)
    assert both == collections.Counter(range(stream.total))


@given(st.lists(st.integers(1, 500), min_size=1, max_size=300), st.integers(1, 600))
def test_split_keeps_episodes_whole_in_order_and_no_range_empty(lengths, parts):
    cut = split_episodes(np.asarray(lengths), parts)
    assert [e for r in cut for e in r] == list(range(len(lengths)))
    assert len(cut) == min(parts, len(lengths)) and all(len(r) for r in cut)


def test_interleave_reads_at_once_streams_and_hands_lanes_on():
    """Three streams, two lanes: the third starts in the lane the first one to end frees, and every item comes."""
    lanes_seen: dict[str, int] = {}

    def stream(name: str, n: int, lane: int):
        lanes_seen[name] = lane
        yield from (f"{name}{i}" for i in range(n))

    got = list(
        interleave(
            [partial(stream, "a", 1), partial(stream, "b", 5), partial(stream, "c", 3)], 2, np.random.default_rng(0)
        )
    )
    assert sorted(got) == sorted(["a0", *(f"b{i}" for i in range(5)), *(f"c{i}" for i in range(3))])
    assert lanes_seen == {"a": 0, "b": 1, "c": 0}
    assert got.index("c0") > got.index("a0")


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 1000), st.integers(1, 400), st.integers(1, 9), st.integers(1, 40))
def test_episode_blocks_cover_an_episode_once_in_strided_ascending_blocks(start, length, read_ahead, stride):
    blocks = episode_blocks(start, start + length, read_ahead, stride)
    rows = [r for b in blocks for r in b]
    assert sorted(rows) == list(range(start, start + length))  # every row once
    step = min(stride, length)
    for b in blocks:
        assert 1 <= len(b) <= read_ahead and all(y - x == step for x, y in zip(b, b[1:]))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-60, 0), min_size=1, max_size=8, unique=True), st.integers(1, 9))
def test_a_block_decodes_each_distinct_frame_of_its_windows_once(offsets, read_ahead):
    stride = window_stride(offsets)
    frames = {r * stride + o for r in range(read_ahead) for o in offsets}
    assert block_frames(offsets, read_ahead, stride) == len(frames)
    assert block_frames(offsets, read_ahead, stride) <= read_ahead * len(offsets)
    if len(offsets) > 1:  # rows a window apart share all but one frame when the window is evenly spaced
        even = list(range(-7 * stride, 1, stride))
        assert block_frames(even, read_ahead, stride) == read_ahead + 7


def test_window_stride_is_the_spacing_of_the_window():
    assert window_stride([-210, -180, -150, -120, -90, -60, -30, 0]) == 30
    assert window_stride([0]) == 1 and window_stride([-2, -1, 0]) == 1 and window_stride([-20, 0]) == 20
    # one frame at an offset: rows 30 apart share no frame, so nothing is gained by taking them together
    assert window_stride([-30]) == 1 and window_stride([-30, -30]) == 1
    assert window_stride([-60, -30]) == 30  # the spacing, wherever the window sits


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-60, 0), min_size=1, max_size=8, unique=True))
def test_rows_a_window_stride_apart_share_frames_whenever_they_can(offsets):
    stride = window_stride(offsets)
    shared = set(offsets) & {o + stride for o in offsets}
    if stride > 1:
        assert shared  # taking such rows together saves decoding
    if len(offsets) == 1:
        assert stride == 1


def test_the_partition_and_the_model_import_without_torch():
    """Placement and prediction are pure: planning a run (the workflow's parse, `dlbench predict`) loads no torch."""
    import subprocess
    import sys

    code = "import sys, dlbench.loader.partition, dlbench.model.equations; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 400), min_size=1, max_size=30), st.integers(1, 9), st.integers(1, 120))
def test_pieces_cover_every_episode_once_none_too_short(lengths, per_episode, min_frames):
    ep_to = np.cumsum(lengths)
    ep_from = ep_to - np.asarray(lengths)
    pf, pt, pe = cut_pieces(ep_from, ep_to, per_episode, min_frames)
    assert pf[0] == 0 and pt[-1] == ep_to[-1] and np.all(pf[1:] == pt[:-1])  # contiguous, in row order, all rows
    for ep in range(len(lengths)):
        mine = pe == ep
        assert 1 <= mine.sum() <= per_episode
        assert pf[mine][0] == ep_from[ep] and pt[mine][-1] == ep_to[ep]  # a piece never spans two episodes
        if mine.sum() > 1:
            assert np.all(pt[mine] - pf[mine] >= min_frames)


def test_interleave_by_items_left_ends_its_streams_together_and_prefers_new_episodes():
    """Chosen evenly, a small stream is spent early and the large one ends the pass alone (a tail of alike batches);
    chosen by items left, the small one's items spread over the whole pass. A freed lane takes a stream of an episode
    no live lane reads, where there is one."""

    def stream(name: str, n: int, lane: int):
        yield from (f"{name}{i}" for i in range(n))

    def order(sizes):
        streams = [partial(stream, "a", 90), partial(stream, "b", 10)]
        return list(interleave(streams, 2, np.random.default_rng(1), sizes))

    even, weighted = order(None), order([90, 10])
    last_b = lambda got: max(i for i, x in enumerate(got) if x.startswith("b"))  # noqa: E731
    assert last_b(even) < 40 and last_b(weighted) > 70
    assert sorted(weighted) == sorted(even)  # every item once either way
    started = []

    def tracked(name: str, lane: int):
        started.append(name)  # when its lane is given: the factory's call, not its first item
        return iter([name])

    streams = [partial(tracked, n) for n in ("x1", "x2", "y1", "z1")]
    list(interleave(streams, 2, np.random.default_rng(0), keys=["x", "x", "y", "z"]))
    assert started[:2] == ["x1", "y1"]  # x2 waits: episode x is live in the other lane


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 40),
    st.integers(1, 6),
    st.integers(1, 4),
    st.integers(1, 4),
    st.integers(0, 2**16),
    st.integers(0, 5),
)
def test_an_episodes_pieces_go_to_as_many_workers_as_there_are_pieces(episodes, pieces, world, workers, seed, epoch):
    """With P pieces an episode and C = ranks x workers consumers, each consumer holds pieces of min(P, C)/C of the
    episodes, never two of one while another consumer has none: every worker's pool reaches most of the dataset."""
    stream = Stream([4 * pieces] * episodes, seed, 4, 8, 1, None, 1, pieces=pieces)
    n = len(stream.shards)
    order = deal_order(n, seed, epoch, stream.keys)
    assert sorted(order.tolist()) == list(range(n))  # a permutation: every shard dealt once
    held = collections.defaultdict(list)  # episode -> consumers holding a piece of it
    for rank in range(world):
        for w in range(workers):
            for v in worker_shards(rank_shards(n, seed, epoch, rank, world, keys=stream.keys), workers, w):
                held[int(stream.keys[v])].append((rank, w))
    for consumers in held.values():
        assert len(consumers) == pieces and len(set(consumers)) == min(pieces, world * workers)


def test_distinct_keys_deal_the_plain_permutation():
    plain = np.random.default_rng([3, 1]).permutation(50)
    assert (deal_order(50, 3, 1, np.arange(50)) == plain).all() and (deal_order(50, 3, 1) == plain).all()


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 300), st.integers(1, 6), st.integers(1, 9), st.sampled_from([1, 3, 30]))
def test_stripes_split_an_episodes_blocks_and_each_spans_it(length, per_episode, read_ahead, stride):
    """Stripes of an episode hold each of its rows once, in whole blocks, and each (but a stripe of one block)
    reaches into both halves of the episode: a worker holding one sees the episode's starts and its ends."""
    pf, pt, pe, phase, count, rows = stripe_pieces(np.array([0]), np.array([length]), per_episode, read_ahead, stride)
    blocks = episode_blocks(0, length, read_ahead, stride)
    assert len(pf) == min(per_episode, len(blocks)) and rows.sum() == length
    mine = [[r for b in blocks[int(p) :: int(c)] for r in b] for p, c in zip(phase, count)]
    assert sorted(r for m in mine for r in m) == list(range(length))
    assert [len(m) for m in mine] == rows.tolist()
    if stride == 1 and len(blocks) >= 4 * len(pf):
        assert all(min(m) < length / 2 <= max(m) for m in mine)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 500), st.integers(1, 400), st.integers(1, 9), st.integers(0, 40), st.integers(0, 2**16))
def test_gop_runs_take_each_gop_in_reading_order_once(start, length, read_ahead, gop, seed):
    """Runs hold an episode's blocks once, in reading order, each run within one GOP from the episode's first
    keyframe; a live episode's decodes then jump once a run (the blocks of a run follow one another)."""
    blocks = episode_blocks(start, start + length, read_ahead)
    runs = gop_runs(blocks, start, gop)
    assert [b for run in runs for b in run] == blocks
    if gop:
        assert all(len({(b[0] - start) // gop for b in run}) == 1 for run in runs)
    ep_from, ep_to = np.array([start]), np.array([start + length])
    events = shard_order(ep_from, ep_to, [0], seed, 0, 0, 1, 8, read_ahead, True, None, 1, 1, run_rows=gop)
    decoded = [rows for kind, rows in ((k, v[0]) for k, v in events if k == "decode")]
    jumps = sum(1 for a, b in zip(decoded, decoded[1:]) if b[0] != a[-1] + 1)
    assert sorted(r for rows in decoded for r in rows) == list(range(start, start + length))
    assert jumps <= (len(runs) - 1 if gop else len(blocks) - 1)


@settings(max_examples=40, deadline=None)
@given(lanes=st.integers(2, 120), per=st.integers(1, 6), seed=st.integers(0, 2**16))
def test_a_lane_just_read_waits_its_spread_before_it_is_read_again(lanes, per, seed):
    """Every item is yielded once, and between two items of one stream there are at least `spread` items of others
    while enough streams are live (`SPREAD_PICKS`, `SPREAD_SHARE`): a block's rows do not share a batch."""
    from dlbench.loader.partition import SPREAD_PICKS, SPREAD_SHARE

    def stream(s, lane):
        return iter([(s, i) for i in range(per)])

    out = list(
        interleave([partial(stream, s) for s in range(lanes)], lanes, np.random.default_rng(seed), [per] * lanes)
    )
    assert sorted(out) == [(s, i) for s in range(lanes) for i in range(per)]
    spread = min(SPREAD_PICKS, lanes // SPREAD_SHARE)
    done = collections.Counter()
    last: dict[int, int] = {}
    for pos, (s, _) in enumerate(out):
        if s in last:
            assert pos - last[s] > spread, (s, last[s], pos)
        last[s] = pos
        done[s] += 1
        if done[s] == per:  # a stream ends: fewer live, a shorter spread from here
            break
