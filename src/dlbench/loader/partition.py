"""Who streams which frames, and in what order: pure functions of the episodes' lengths, the ranks, the DataLoader
workers, the seed and the epoch (no I/O), so that they are tested directly over many shapes.

Pieces and virtual shards: each episode read is cut into `pieces` contiguous pieces of at least 2 s
(`cut_pieces`; the stream's default is ranks x DataLoader workers), and the pieces into contiguous runs of about
equal frame count (`split_episodes`), by default one per piece, or one per fetch group of `group` consecutive
episodes, up to `MAX_AUTO_SHARDS` (`auto_virtual_shards`). A state (one count per virtual shard) names its pieces
and resumes with them under any ranks and workers.

Dealing: each epoch a permutation of the K virtual shards seeded by (seed, epoch), the pieces of one episode next
to one another (`deal_order`), is dealt out: rank r of R takes every R-th (perm[r::R]), its DataLoader worker w of
W every W-th of those (`rank_shards`, `worker_shards`), so an episode's pieces go to different workers. Worker
(r, w) therefore has work exactly when K > r + R * w: with K >= R x W every worker of every rank has some, which the
default K guarantees whenever there are R x W episodes (R x W fetch groups when fetching) and R x W <= 512.
With `shuffle=False` rank r takes a contiguous block of virtual shards (the blocks rotate with the epoch) and each
worker a contiguous part of it.

Order: each virtual shard is one stream of events (`shard_order`) drawn from a generator seeded by (seed, epoch,
shard): it visits the shard's episodes in a seeded random order, keeping `pool` of them live, takes the next block
of a random live one at a time (`read_ahead` rows `stride` apart, decoded together: `episode_blocks`), and yields
items at random from a buffer. A
worker reads `Lanes.at_once` of its virtual shards at once (`interleave`): each next item comes from a random one of
them, and one that ends hands its lane to the next. The lanes share the worker's pool, buffer and decoded-block
bound, so a worker keeps about `pool_size` episodes live whether its shards are one episode each or many.

Resuming: a worker yields each virtual shard's items in that shard's stream order, and the consumer receives each
worker's batches in order, so what an epoch has delivered is, for each virtual shard, a prefix of its stream. The
interleaving of lanes may differ between runs (it depends on the worker); the shards' streams do not.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

MAX_AUTO_SHARDS = 512  # the state holds one count per virtual shard; more shards than this gain no parallelism
MIN_PIECE_S = 2.0  # a piece of an episode is at least this long (s): a piece that starts costs a seek
T = TypeVar("T")
# a lane just read waits this many picks, at most 1/SPREAD_SHARE of the live lanes, before it is read again
# (`interleave`): its next item is likely its last block's other row; 32 keeps them in other batches up to 32 items
SPREAD_PICKS = 32
SPREAD_SHARE = 4


def auto_virtual_shards(num_episodes: int, group: int = 1) -> int:
    """The default number of virtual shards: one per episode, or per `group` episodes fetched together, at most
    `MAX_AUTO_SHARDS`, at least 1. As many as the episodes allow, so that no rank or worker goes without work."""
    return max(1, min(MAX_AUTO_SHARDS, num_episodes // max(group, 1)))


def auto_pieces(num_episodes: int, ranks: int, workers: int, fetching: bool = False) -> int:
    """The stream's default pieces an episode: one per consumer (ranks x DataLoader workers), while the pieces
    number at most `MAX_AUTO_SHARDS` (past it shards hold several pieces, often of one episode, which then take
    several of a pool's slots; with that many episodes no pool holds its share anyway); 1 where episodes are
    fetched whole."""
    if fetching:
        return 1
    return max(1, min(max(ranks, 1) * max(workers, 1), MAX_AUTO_SHARDS // max(num_episodes, 1)))


def cut_pieces(ep_from: np.ndarray, ep_to: np.ndarray, per_episode: int, min_frames: int) -> tuple[np.ndarray, ...]:
    """Each episode cut into up to `per_episode` contiguous pieces of about equal length, none shorter than
    `min_frames` (an episode shorter than two such stays whole): (piece_from, piece_to, piece_episode), in row
    order. A piece is what a stream's pool keeps live and a virtual shard is made of: pieces of one episode dealt to
    different workers let every worker's batches mix most episodes."""
    froms, tos, eps = [], [], []
    for ep, (a, b) in enumerate(zip(np.asarray(ep_from, np.int64), np.asarray(ep_to, np.int64))):
        length = int(b - a)
        parts = max(1, min(per_episode, length // max(min_frames, 1)))
        cuts = [a + (length * k) // parts for k in range(parts + 1)]
        froms += cuts[:-1]
        tos += cuts[1:]
        eps += [ep] * parts
    return np.asarray(froms, np.int64), np.asarray(tos, np.int64), np.asarray(eps, np.int64)


def stripe_pieces(
    ep_from: np.ndarray, ep_to: np.ndarray, per_episode: int, read_ahead: int, stride: int = 1, run_rows: int = 0
) -> tuple[np.ndarray, ...]:
    """Each episode cut into up to `per_episode` stripes: stripe k of P holds every P-th of its blocks
    (`episode_blocks`), starting at block k. For a stream that reads a live episode's blocks in random order (a seek
    each, whatever the cut), so a stripe costs what a contiguous piece does, yet spans the whole episode: workers
    holding different stripes of it see all of its moments, where halves would give one worker its starts and
    another its ends. With `run_rows`, stripes are of runs (`gop_runs`), not blocks. Returns (piece_from, piece_to,
    piece_episode, phase, count, rows): a stripe's rows lie in its episode's range [from, to), `rows` of them."""
    froms, tos, eps, phases, counts, rows = [], [], [], [], [], []
    for ep, (a, b) in enumerate(zip(np.asarray(ep_from, np.int64), np.asarray(ep_to, np.int64))):
        units = gop_runs(episode_blocks(int(a), int(b), read_ahead, stride), int(a), run_rows)
        sizes = [sum(len(block) for block in unit) for unit in units]
        parts = max(1, min(per_episode, len(sizes)))
        for k in range(parts):
            froms.append(a), tos.append(b), eps.append(ep), phases.append(k), counts.append(parts)
            rows.append(sum(sizes[k::parts]))
    return tuple(np.asarray(x, np.int64) for x in (froms, tos, eps, phases, counts, rows))


def gop_runs(blocks: list[list[int]], start: int, run_rows: int) -> list[list[list[int]]]:
    """An episode's blocks (consecutive rows, from `start`, its first keyframe) grouped by the run of `run_rows` rows
    (its video's GOP) they begin in; 0: each block alone. A stream that takes a run's blocks in reading order seeks
    once a run: on long GOPs a block taken alone at random costs the decode of the GOP before it."""
    if run_rows <= 0:
        return [[b] for b in blocks]
    runs: dict[int, list[list[int]]] = {}
    for b in blocks:
        runs.setdefault((b[0] - start) // run_rows, []).append(b)
    return list(runs.values())


def split_episodes(lengths: np.ndarray, parts: int) -> list[range]:
    """Cut episodes 0..N-1 into min(parts, N) contiguous, non-empty ranges of about equal total length."""
    n = len(lengths)
    if n == 0:
        return []
    parts = max(1, min(parts, n))
    cum = np.concatenate([[0], np.cumsum(lengths)])
    cuts = [0]
    for k in range(1, parts):
        cut = int(np.searchsorted(cum, cum[-1] * k / parts, side="left"))
        # every range keeps at least one episode, and leaves one for each range after it
        cuts.append(min(max(cut, cuts[-1] + 1), n - (parts - k)))
    cuts.append(n)
    return [range(cuts[k], cuts[k + 1]) for k in range(parts)]


def deal_order(num_shards: int, seed: int, epoch: int, keys: np.ndarray | None = None) -> np.ndarray:
    """The order the virtual shards are dealt out in `epoch`: a permutation seeded by (seed, epoch), in which
    shards of one key (pieces of one episode) follow one another. Entry i goes to consumer i mod (R x W) (rank
    i mod R, its worker (i // R) mod W), so the pieces of an episode go to different consumers: with as many
    pieces as consumers each worker's pool holds a piece of every episode instead of whole episodes of its own,
    and its batches mix the whole dataset. With distinct keys (or none) it is the plain permutation."""
    perm = np.random.default_rng([seed, epoch]).permutation(num_shards)
    if keys is None:
        return perm
    met = np.asarray(keys)[perm]
    _, first, which = np.unique(met, return_index=True, return_inverse=True)
    # keys in the order the permutation first meets them; within a key, its shards in permuted order
    return perm[np.argsort(first[which], kind="stable")]


def rank_shards(
    num_shards: int,
    seed: int,
    epoch: int,
    rank: int,
    world: int,
    shuffle: bool = True,
    keys: np.ndarray | None = None,
) -> np.ndarray:
    """The virtual shards rank `rank` of `world` reads in `epoch`, in the order its workers take them (`keys`:
    each shard's episode where it is a piece of one, `deal_order`)."""
    if not shuffle:  # contiguous blocks, rotating with the epoch
        return np.array_split(np.arange(num_shards), world)[(rank + epoch) % world]
    return deal_order(num_shards, seed, epoch, keys)[rank::world]


def worker_shards(mine: np.ndarray, num_workers: int, worker: int, shuffle: bool = True) -> np.ndarray:
    """The virtual shards DataLoader worker `worker` of `num_workers` takes of its rank's `mine`, in order."""
    if not shuffle:
        return np.array_split(mine, max(num_workers, 1))[worker]
    return mine[worker :: max(num_workers, 1)]


def rank_shard_count(num_shards: int, rank: int, world: int) -> int:
    """How many of `num_shards` virtual shards rank `rank` of `world` reads in an epoch (`rank_shards`; unshuffled,
    the same block sizes rotate among the ranks)."""
    return len(range(rank, num_shards, max(world, 1)))


def busy_workers(num_shards: int, rank: int, world: int, num_workers: int) -> int:
    """How many of rank `rank`'s `num_workers` DataLoader workers (0: the process itself) have a virtual shard."""
    return min(rank_shard_count(num_shards, rank, world), max(num_workers, 1))


@dataclass(frozen=True)
class Lanes:
    """How a worker reads its virtual shards: `at_once` of them interleaved, each with its share of the worker's
    pool of live episodes, its shuffle buffer (items) and its decoded blocks (None: no bound)."""

    at_once: int
    pool: int
    buffer: int
    blocks: int | None

    @classmethod
    def plan(
        cls,
        num_episodes: int,
        num_shards: int,
        pool_size: int,
        buffer_size: int,
        max_blocks: int | None,
        shuffle: bool = True,
    ) -> Lanes:
        """Enough lanes that about `pool_size` episodes are live (no more than the blocks allow: each lane keeps
        one decoded block at least; one lane without shuffling); a function of the dataset and the stream's
        arguments, not of the workers."""
        if not shuffle:
            return cls(1, pool_size, buffer_size, max_blocks)
        per_shard = num_episodes / max(num_shards, 1)
        at_once = max(1, math.ceil(pool_size / max(per_shard, 1) - 1e-9))
        if max_blocks is not None:
            at_once = min(at_once, max(1, max_blocks))
        return cls(
            at_once,
            math.ceil(pool_size / at_once),
            math.ceil(buffer_size / at_once),
            None if max_blocks is None else max(1, max_blocks // at_once),
        )


def interleave(
    streams: Iterable[Callable[[int], Iterator[T]]],
    at_once: int,
    rng: np.random.Generator,
    sizes: Iterable[int] | None = None,
    keys: Iterable | None = None,
) -> Iterator[T]:
    """The items of several streams, `at_once` read at a time: each next item comes from a live stream chosen at
    random, and a stream that ends hands its lane to the next. `streams` gives factories called with their lane
    (0..at_once-1), so that a reader can keep per-lane resources (decoders) for the stream that follows.

    `sizes` (each stream's items): a live stream is chosen with odds in proportion to the items it has left, so the
    live streams end together, as draws without replacement from their union would. Chosen evenly instead, the
    largest outlive the rest, and a pass ends in a tail of batches from the few streams left (alike batches).

    A lane just chosen waits `spread` picks (SPREAD_PICKS, at most 1/SPREAD_SHARE of the live lanes) before it can
    be chosen again: a stream's next items are often its last block's other rows (neighbouring frames, alike), and
    drawn with replacement they would share a batch. 100 episodes of 2 x 240x320, 2 workers, batch 16, lanes
    holding 2 items each: 0.92 of the nominal batch on the state over one batch without it.

    `keys` (each stream's episode): a freed lane takes the first pending stream whose key no live stream has (else
    the next one), so the live streams are of as many episodes as there are: pieces of one episode are alike."""
    pending = list(streams)
    counts = list(sizes) if sizes is not None else [None] * len(pending)
    names = list(keys) if keys is not None else [None] * len(pending)
    live: list[list] = []  # [lane, iterator, items left (None: unknown), key]
    free = list(range(at_once - 1, -1, -1))
    head = 0  # pending[head:] are still to start (taken ones are set to None)

    def fill() -> None:
        nonlocal head
        while free:
            while head < len(pending) and pending[head] is None:
                head += 1
            if head == len(pending):
                return
            taken = {entry[3] for entry in live}
            j = next((i for i in range(head, len(pending)) if pending[i] is not None and names[i] not in taken), head)
            j = j if pending[j] is not None else head
            factory, pending[j] = pending[j], None
            lane = free.pop()
            live.append([lane, factory(lane), counts[j], names[j]])

    fill()
    recent: collections.deque[int] = collections.deque()  # the last picks' lanes: not chosen for `spread` picks
    try:
        while live:
            spread = min(SPREAD_PICKS, len(live) // SPREAD_SHARE)
            while len(recent) > spread:
                recent.popleft()
            choosable = [i for i, entry in enumerate(live) if entry[0] not in recent] if recent else range(len(live))
            k = choosable[_pick(rng, [live[i][2] for i in choosable])]
            lane, it = live[k][0], live[k][1]
            try:
                item = next(it)
            except StopIteration:
                live.pop(k)
                free.append(lane)
                fill()
                continue
            recent.append(lane)
            if live[k][2] is not None:
                live[k][2] = max(1, live[k][2] - 1)  # a stream may yield past its count: it stays choosable
            yield item
    finally:  # the consumer stopped early: close what is still open
        for _, it, *_ in live:
            close = getattr(it, "close", None)
            if close is not None:
                close()


def _pick(rng: np.random.Generator, left: list) -> int:
    """A random index: with odds in proportion to `left` where every entry is known, else evenly."""
    if len(left) == 1:
        return 0
    if any(v is None for v in left):
        return int(rng.integers(len(left)))
    weights = np.asarray(left, dtype=np.float64)
    return int(np.searchsorted(np.cumsum(weights), rng.random() * weights.sum(), side="right").clip(0, len(left) - 1))


def entry_groups(episodes, group: int, rng: np.random.Generator | None) -> list[list[int]]:
    """The episodes in the order they enter the pool, as groups of up to `group` consecutive episodes that enter
    one after another (the unit `EpisodeFetcher` fetches together); rng None: in order."""
    eps = np.asarray(episodes, dtype=np.int64)
    runs = [eps[i : i + max(group, 1)] for i in range(0, len(eps), max(group, 1))]
    if rng is None:
        return [[int(e) for e in run] for run in runs]
    if group <= 1:
        return [[int(e)] for e in rng.permutation(eps)[::-1]]
    return [[int(e) for e in rng.permutation(runs[j])] for j in rng.permutation(len(runs))]


def shard_order(
    ep_from: np.ndarray,
    ep_to: np.ndarray,
    episodes,
    seed: int,
    epoch: int,
    shard: int,
    pool_size: int,
    buffer_size: int,
    read_ahead: int,
    shuffle: bool = True,
    max_blocks: int | None = None,
    group: int = 1,
    stride: int = 1,
    forward: bool = False,
    stripes: tuple[np.ndarray, np.ndarray] | None = None,
    run_rows: int = 0,
) -> Iterator[tuple[str, tuple[list[int], int] | int]]:
    """The deterministic event stream of one shard: ("decode", (rows, slot)) and ("emit", row), no I/O.

    Every row of the shard's episodes is decoded once and emitted once. `slot` (0..pool_size-1): the rows' episode's
    place in the pool of live episodes, handed to the next episode when it ends, so a reader with a decoder per
    (file, slot) seeks it instead of opening one per episode. A decode event's rows share one block of frames, alive
    until the last is emitted; over `max_blocks` live blocks the oldest block's rows are emitted, at random, until
    it is gone. Episodes enter the pool in `entry_groups` order (`group` consecutive ones one after another).

    `stride` > 1: a block holds rows `stride` apart (`episode_blocks`), whose windows share frames at the windows'
    spacing (`block_frames`). A live episode's blocks are taken in a seeded random order; `forward`: in reading
    order from a seeded random block on, then from its start (one seek back), so that episodes live at once are
    at unrelated moments of their tasks, not side by side from their starts; a batch still holds few moments of
    each live episode, so it takes many live for ten batches to draw across the dataset (`bench.checks.effective`).
    `stripes` (phase, count) per piece: piece p holds every count[p]-th block of its
    range from block phase[p] (`stripe_pieces`); None: all of its range. `run_rows` > 0 (stride 1, random order):
    blocks are taken a GOP run at a time (`gop_runs`), the runs in random order.
    """

    if not shuffle:
        for ep in episodes:
            for rows in piece_blocks(ep_from, ep_to, ep, read_ahead, 1 if stripes is None else stride, stripes):
                yield "decode", (rows, 0)
                yield from (("emit", r) for r in rows)
        return
    rng = np.random.default_rng([seed, epoch, shard])
    pending = [ep for g in reversed(entry_groups(episodes, group, rng)) for ep in reversed(g)]  # popped from the end
    live: list[list] = []  # [its blocks still to decode, slot] per live episode
    free_slots = list(range(pool_size - 1, -1, -1))
    buffer = _BlockBuffer()
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
            blocks = piece_blocks(ep_from, ep_to, ep, read_ahead, stride, stripes, run_rows, None if forward else rng)
            if forward:  # from a random block on, then its start: live episodes at unrelated moments of their tasks
                turn = int(rng.integers(len(blocks)))
                blocks = blocks[turn:] + blocks[:turn]
            blocks = blocks[::-1]  # popped
            live.append([blocks, free_slots.pop()])
        k = _pick(rng, [sum(len(b) for b in entry[0]) for entry in live])  # odds by rows left: pieces end together
        blocks, slot = live[k]
        rows = blocks.pop()
        if not blocks:
            free_slots.append(live.pop(k)[1])
        yield "decode", (rows, slot)
        buffer.left[block] = len(rows)
        for r in rows:
            buffer.add(r, block)
            if len(buffer.rows) >= fill:
                yield "emit", buffer.take(int(rng.integers(len(buffer.rows))))
                fill = min(cap, fill + 1)
        block += 1
        while max_blocks is not None and len(buffer.left) > max_blocks:
            members = buffer.oldest_block()
            yield "emit", buffer.take(members[int(rng.integers(len(members)))])
    rng.shuffle(buffer.rows)
    yield from (("emit", r) for r in buffer.rows)


def piece_blocks(
    ep_from: np.ndarray,
    ep_to: np.ndarray,
    piece: int,
    read_ahead: int,
    stride: int,
    stripes: tuple[np.ndarray, np.ndarray] | None = None,
    run_rows: int = 0,
    rng: np.random.Generator | None = None,
) -> list[list[int]]:
    """Piece `piece`'s blocks in the order a stream takes them: its stripe's only (`stripes`), in reading order
    (`rng` None) or at random, a GOP run at a time where `run_rows` > 0 (`gop_runs`: each run in reading order)."""
    start = int(ep_from[piece])
    units = gop_runs(episode_blocks(start, int(ep_to[piece]), read_ahead, stride), start, run_rows)
    if stripes is not None:
        units = units[int(stripes[0][piece]) :: int(stripes[1][piece])]
    if rng is not None:
        units = [units[j] for j in rng.permutation(len(units))]
    return [block for unit in units for block in unit]


class _BlockBuffer:
    """A shard's shuffle buffer: its rows, and for each decode event (block) how many of its rows it still holds,
    oldest block first (a block's frames live until its last row leaves)."""

    def __init__(self):
        self.rows: list[int] = []
        self.block_of: dict[int, int] = {}  # row in the buffer -> its decode event
        self.left: dict[int, int] = {}  # decode event -> its rows still in the buffer (oldest first)

    def add(self, row: int, block: int) -> None:
        self.rows.append(row)
        self.block_of[row] = block

    def take(self, j: int) -> int:
        """Remove and return the j-th row (the last takes its place)."""
        self.rows[j], self.rows[-1] = self.rows[-1], self.rows[j]
        row = self.rows.pop()
        block = self.block_of.pop(row)
        self.left[block] -= 1
        if not self.left[block]:
            del self.left[block]
        return row

    def oldest_block(self) -> list[int]:
        """The places in `rows` of the oldest block's rows."""
        oldest = next(iter(self.left))
        return [j for j, r in enumerate(self.rows) if self.block_of[r] == oldest]


def episode_blocks(start: int, end: int, read_ahead: int, stride: int = 1) -> list[list[int]]:
    """Rows start..end-1 in the blocks they are decoded in, in reading order: `read_ahead` rows at a time, `stride`
    apart (phase 0: start, start + stride, ...; then phase 1, ...), a block never spanning two phases."""
    stride = max(1, min(stride, end - start))
    out = []
    for phase in range(start, start + stride):
        rows = list(range(phase, end, stride))
        out.extend(rows[i : i + read_ahead] for i in range(0, len(rows), read_ahead))
    return out


def block_frames(offsets: Iterable[int], read_ahead: int, stride: int) -> int:
    """Distinct frames one camera decodes for a block of `read_ahead` rows `stride` apart, each item reading the
    frames at `offsets` (frames from its row; [0] for a single frame): what the block holds in memory."""
    offs = set(int(o) for o in offsets) or {0}
    return len({k * stride + o for k in range(max(read_ahead, 1)) for o in offs})


def window_stride(offsets: Iterable[int]) -> int:
    """How far apart rows taken together should be for their windows to share the most frames: the most common gap
    between two of the window's offsets (the smallest of equals); for an evenly spaced window its spacing, so rows
    that far apart share all but one frame. 1 for a single frame or a single offset (e.g. [-30]), which rows share
    at no spacing."""
    distinct = sorted({int(o) for o in offsets})
    if len(distinct) < 2:
        return 1
    gaps = collections.Counter(b - a for i, a in enumerate(distinct) for b in distinct[i + 1 :])
    return min(gaps, key=lambda g: (-gaps[g], g))


def emit_units(events: Iterable[tuple[str, object]]) -> Iterator[tuple[list, int]]:
    """A shard's events grouped by the item each leads to: (the decode events made just before it, its row)."""
    decodes: list = []
    for kind, value in events:
        if kind == "decode":
            decodes.append(value)
        else:
            yield decodes, value
            decodes = []
