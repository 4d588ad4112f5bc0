"""The knob space `dlbench tune` searches, and its ranking by the model: pure functions of a calibration, the node
and the constraints (no I/O), tested directly.

A candidate is one configuration of one loader: the loader, its DataLoader workers, and for dlbench_stream its pool of
live episodes and the rows it decodes a block. The model (`model.table.predict_run`) predicts its frames/s per node
and its peak memory from the calibration; it ranks the candidates, and `dlbench tune` proves the best few by running
them (the model's own miss is 5-25% where it was not fitted, so a prediction is never the answer). What the model
cannot predict, how much a batch is worth to training (effective batch size), is measured in the proof: a
candidate below the floor is replaced by its next knob move (`knob_moves`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .. import floor as shortfalls
from ..model.calibration import Calibration
from ..model.table import predict_run

# what dlbench's loaders are searched over (LeRobot's keep their own defaults but for the workers: `lerobot_best`)
LOADERS = ("dlbench_map", "dlbench_stream")
# the stream's live episodes per worker, in the order tried: more live episodes mix more of them in a batch, at one
# decoder set per episode each
POOLS = (32, 64, 16)
BUFFER_MB = 512  # the most dlbench_stream's default buffer_mb takes (`loader.stream.BUFFER_MB_RANGE`)
ITEMS_PER_LIVE_EPISODE = 32  # a grown pool's shuffle buffer, per live episode
FLOOR_MARGIN = 0.1  # a grown pool aims this far above the floor (`pool_needed`)
TRAINING_S = 3600.0  # the run predicted: an hour of training, not a benchmark's window
# the stream's blocks decoded together as a speed move (its default: 4 for windows over long GOPs, else 1): the same
# order for the memory of the blocks decoded early (720p H.264 g=30, sarm, 2 workers: 196 frames/s at 3.9 GB, 118
# at 2.9 GB with 4; single frames, 4 against 1: 1.1x for 1.9x the memory)
DECODE_AHEAD = 8
# rows a block as a speed move on single frames (the default's 2 keeps ten batches at the floor whatever the
# content; where a block's rows differ, more rows meet it too: 480x640 AV1 g=2, 2 workers, 4 rows 0.82 / 0.58)
READ_AHEAD = 8


@dataclass
class Candidate:
    """One configuration: `loader` with `settings` (run keys: num_workers, pool_size, read_ahead, ...), what the
    model predicts of it, and (once proven) what it measured."""

    loader: str
    settings: dict
    predicted_fps: float = 0.0
    predicted_pss_mb: float = 0.0
    bound: str = ""
    measured: dict = field(default_factory=dict)

    @property
    def key(self) -> str:
        """A stable name: the loader and its settings, as a run id names them."""
        parts = [self.loader] + [f"{k}={v}" for k, v in sorted(self.settings.items())]
        return " ".join(parts)


def worker_options(cores: int, remote: bool) -> list[int]:
    """The DataLoader worker counts searched: none, then 1 to the cores (to twice the cores where workers wait on a
    remote source)."""
    top = cores * (2 if remote else 1)
    return [0] + list(range(1, top + 1))


def ranked(
    cal: Calibration,
    mode: str,
    batch_size: int,
    cores: int,
    nodes: int,
    memory_mb: float | None,
    remote: bool = False,
    loaders: tuple[str, ...] = LOADERS,
) -> list[Candidate]:
    """Every (loader, workers) the calibration can predict, at the stream's default pool, best predicted frames/s
    first; those whose predicted peak memory exceeds `memory_mb` left out. Each loader's first entry is its best."""
    out = []
    for loader in loaders:
        for w in worker_options(cores, remote):
            run = {"loader": loader, "mode": mode, "num_workers": w, "batch_size": batch_size, "ranks": nodes,
                   "decode_device": "cpu", "step_ms": 0, "duration_s": TRAINING_S}  # fmt: skip
            p = predict_run(run, cal, cores=cores, hosts=nodes)
            if isinstance(p, str):
                continue
            if memory_mb is not None and p.peak_pss_mb > memory_mb:
                continue
            out.append(Candidate(loader, {"num_workers": w}, p.frames_per_s_node, p.peak_pss_mb, p.bound))
    return sorted(out, key=lambda c: -c.predicted_fps)


def best_per_loader(candidates: list[Candidate]) -> dict[str, Candidate]:
    """Each loader's best-predicted candidate; of equals within 2%, the one with the fewest workers."""
    best: dict[str, Candidate] = {}
    for c in candidates:
        top = best.get(c.loader)
        if top is None:
            best[c.loader] = c
        elif c.predicted_fps >= 0.98 * top.predicted_fps and c.settings["num_workers"] < top.settings["num_workers"]:
            best[c.loader] = c
    return best


def derived(c: Candidate, move: dict) -> Candidate:
    """`c` with `move` made. The model predicts (loader, workers) alone: a candidate differing from a ranked one by
    a knob the model has no term for carries no prediction (0, shown as not predicted), not its parent's;
    `predictions` gives one back where only the workers moved."""
    return Candidate(c.loader, {**c.settings, **move})


def predictions(c: Candidate, ranked: list[Candidate]) -> Candidate:
    """`c` with the model's prediction of the ranked candidate of its loader and settings, where there is one."""
    same = next((r for r in ranked if r.key == c.key), None)
    if same is None:
        return c
    return Candidate(c.loader, c.settings, same.predicted_fps, same.predicted_pss_mb, same.bound, c.measured)


def knob_moves(c: Candidate, measured: dict, floor: dict, episodes_per_worker: int) -> list[Candidate]:
    """What to try after a dlbench_stream candidate measured below the floor: one row a block where its batches
    repeat frames (distinct frames low), more live episodes where its batches are worth few items (`pool_needed`, up
    to the episodes a worker reads; with the default pool, every piece, twice the `buffer_mb` whose blocks bound the
    lanes). Empty for other loaders, over the memory budget alone (a move would add memory),
    or where no move is left."""
    if c.loader != "dlbench_stream":
        return []
    moves = []

    def below(m, f, names):  # measured below: a figure not shown says nothing of which knob to move
        return [n for n, v, _ in shortfalls.short(m, f, names) if v is not None]

    if below(measured, floor, ("distinct_frames",)) and c.settings.get("read_ahead") != 1:
        moves.append(derived(c, {"read_ahead": 1}))
    pool = c.settings.get("pool_size") or episodes_per_worker  # unset: every piece live
    if pool < episodes_per_worker and below(measured, floor, ("effective_batch", "effective_window")):
        bigger = min(pool_needed(pool, measured, floor), episodes_per_worker)
        # the buffer grows with the pool: a batch draws from the items of every live episode (500 episodes, 2
        # workers: pool 64 alone 0.64 of nominal, with 2,048 items 0.69; pool 128 with 4,096 items 0.86)
        grown = {"pool_size": bigger, "buffer_size": ITEMS_PER_LIVE_EPISODE * bigger}
        moves.append(derived(c, grown))
    elif not {"pool_size", "buffer_mb"} & set(c.settings) and below(
        measured, floor, ("effective_batch", "effective_window")
    ):
        # every piece is live by default: the lanes are bounded by the blocks buffer_mb keeps, so more buffer
        mb = 2 * c.settings.get("buffer_mb", BUFFER_MB)  # unset: the most the default takes
        moves.append(derived(c, {"buffer_mb": mb}))
    return moves


def memory_moves(c: Candidate) -> list[Candidate]:
    """What to try after a proof that qualified but for memory: one DataLoader worker fewer (each holds its own
    decoders and frames) and, for a stream, half its buffer (unset: half the most the default takes); nothing below
    one worker or a 64 MB buffer."""
    moves = []
    workers = c.settings.get("num_workers", 0)
    if workers > 1:
        moves.append({"num_workers": workers - 1})
    if c.loader == "dlbench_stream":
        mb = c.settings.get("buffer_mb") or BUFFER_MB
        if mb / 2 >= 64:
            moves.append({"buffer_mb": mb / 2})
    return [derived(c, m) for m in moves]


def pool_needed(pool: int, measured: dict, floor: dict) -> int:
    """The pool of live episodes a stream needs for its effective batch sizes to clear the floor by `FLOOR_MARGIN`,
    from what a pool of `pool` measured; at least twice `pool`.

    Items of one episode are alike, so a batch (or ten) holding m items of each live episode is worth about
    B / (1 + (m - 1) rho) independent ones (Kish's design effect); m falls as 1 / pool, so the excess 1/e - 1 does
    too. Measured on 10,000 episodes of 96x128, one worker, over ten batches: pools of 32, 64, 128 and 256 gave
    0.12, 0.23, 0.29, 0.56, an excess times the pool of 235, 214, 313 and 202. The margin covers that spread, so the
    pool is grown in one proof, not in a doubling per proof."""
    grow = 2.0
    for _, e, least in shortfalls.short(measured, floor, ("effective_batch", "effective_window")):
        target = min(0.95, least + FLOOR_MARGIN)
        if e:  # not shown (None): the run was too short to tell, grown by the least
            grow = max(grow, (1 / e - 1) / (1 / target - 1))
    return int(math.ceil(pool * grow))


def below(measured: dict, floor: dict, names=None) -> list[str]:
    """The shuffle measures (of `names`, or every one the floor sets) below the floor or not shown
    (`dlbench.floor`: a figure too short to tell does not pass)."""
    return [name for name, _, _ in shortfalls.short(measured, floor, names)]


def speed_moves(c: Candidate, gop: int, span: int = 0, remote: bool = False, slot_mb: float = 0.0) -> list[Candidate]:
    """What to try after a dlbench_stream candidate met the floor, on GOPs of 8 frames or more (`gop`): with 2
    workers or more its episodes read a GOP at a time (`gop_run`), which the stream's default takes only where a
    worker's buffer keeps 32 runs (a floor of 0.8 / 0.5; docs/library.md) and a lower floor may allow (720p H.264
    g=30, 2 workers: 389 frames/s at 0.72 / 0.46 against 132 at 0.81 / 0.76); and, where a row's window reaches
    over several GOPs (`span`: frames from its first to its last), `DECODE_AHEAD` blocks decoded together, the
    same order for more memory (720p sarm, one worker: 83 against 59 frames/s at the default's 4, 2.3 against
    1.8 GB).
    On a `remote` source the blocks decoded together also share their reads, whatever the GOP (480x640 AV1 g=2
    from S3 at +20 ms, 4 workers: 418 against 303 frames/s, 7.0 against 3.5 GB). Empty for other loaders, short
    GOPs on local disk, or once a move is made. GOP runs take a decoder per pool slot (`slot_mb` each, estimated:
    `loader.stream.slot_decoders_mb`): not tried where those pass the stream's own bound for them (10,000 episodes
    in two files, pool 165: 6.2 GB and 5% slower).
    Single-frame rows (`span` 0) also try `READ_AHEAD` rows a block: fewer seeks and block hand-overs, whose cost to
    ten batches' effective size depends on how alike a block's rows are, which only the proof measures."""
    from ..loader.stream import AUTO_READ_AHEAD, FORWARD_DECODERS_MB

    moved = {"gop_run", "decode_ahead"} & set(c.settings) or c.settings.get("read_ahead", 1) > AUTO_READ_AHEAD
    if c.loader != "dlbench_stream" or moved:
        return []
    slots = c.settings.get("pool_size", POOLS[0]) + 2
    fits = slots * slot_mb <= FORWARD_DECODERS_MB
    moves = [{"gop_run": gop}] if c.settings.get("num_workers", 0) >= 2 and gop >= 8 and fits else []
    if span == 0 and "read_ahead" not in c.settings:
        moves.append({"read_ahead": READ_AHEAD})
    if (remote or gop >= 8 and span >= gop) and c.settings.get("episode_order", "random") == "random":
        moves.append({"decode_ahead": DECODE_AHEAD})
    return [derived(c, m) for m in moves]


def meets(measured: dict, floor: dict, memory_mb: float | None) -> str:
    """Why a proven candidate does not qualify ('' where it does): a wrong frame, an unverified run, a measure below
    the floor, or more memory than the budget."""
    if measured.get("status") != "ok":
        return measured.get("reason") or measured.get("status") or "did not run"
    if measured.get("frames_wrong"):
        return f"{measured['frames_wrong']} wrong frames"
    if low := shortfalls.describe(shortfalls.short(measured, floor)):
        return "below the floor: " + low
    if memory_mb is not None and measured.get("peak_pss_mb", 0) > memory_mb:
        return f"peak memory {measured['peak_pss_mb']:,.0f} MB > {memory_mb:,.0f} MB"
    return ""
