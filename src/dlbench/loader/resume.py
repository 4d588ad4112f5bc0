"""Resume state of a streaming epoch: one count per virtual shard.

A virtual shard's stream in an epoch is fixed by the seed and the order arguments, so what an epoch has delivered
of it is a prefix: the state of the whole epoch is how many items of each virtual shard's stream went out. Any ranks
and DataLoader workers can resume it: whoever reads a virtual shard next replays its delivered prefix without
decoding and yields the rest. Here is the bookkeeping and its checks, apart from the dataset (no torch, no I/O);
`stream.LeRobotStreamingDataset` supplies its identity (what a state must match) and its dealing of virtual shards.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..errors import UserError

STATE_KEYS = ("seed", "virtual_shards", "dataset", "order")  # what a state must match to be resumed or merged


class Delivered:
    """What this process has delivered of the current epoch (`counts`), and what a loaded state says each virtual
    shard skips on the first pass after it (`skip`)."""

    def __init__(self):
        self.epoch = 0
        self.counts: dict[int, int] = {}  # virtual shard -> items of its stream delivered in `epoch`
        self.skip: dict[int, int] = {}

    def start(self, epoch: int) -> None:
        """Epoch `epoch` from its beginning: nothing delivered, nothing to skip."""
        self.epoch, self.counts, self.skip = epoch, {}, {}

    def note(self, epoch: int, shard: int, count: int) -> None:
        """`count` items of `shard`'s stream in `epoch` are delivered; an item of a later epoch starts its count,
        one of an epoch already left behind (a late batch) is ignored."""
        if epoch != self.epoch:
            if epoch < self.epoch:
                return
            self.epoch, self.counts = epoch, {}
        if count > self.counts.get(shard, 0):
            self.counts[shard] = count

    def state(self, identity: dict, rank: int, world_size: int) -> dict:
        """This rank's state: the stream's `identity`, the epoch, the ranks it counts, the counts."""
        return {
            **identity,
            "epoch": self.epoch,
            "ranks": {"world_size": world_size, "counted": [rank]},
            "delivered": {int(k): int(v) for k, v in sorted(self.counts.items())},
        }

    def load(
        self,
        state: dict,
        identity: dict,
        shard_frames: np.ndarray,
        rank_shards: Callable[[int, int | None, int | None], np.ndarray],
    ) -> int:
        """Take `state` (merged over ranks) as where its epoch stands and return that epoch. `shard_frames`: each
        virtual shard's items; `rank_shards(epoch, rank, world_size)`: the virtual shards a rank reads (None, None:
        this one). A `UserError` names what does not fit: an older format, another stream, damaged counts, or counts
        missing for virtual shards this rank will read."""
        if "delivered" not in state or "ranks" not in state:
            raise UserError(
                "cannot resume: this state was saved by an older dlbench (counts per rank and worker); "
                "it cannot be resumed exactly: start the epoch again (set_epoch)"
            )
        differ = [f"{k} {state.get(k)!r} (here {identity[k]!r})" for k in STATE_KEYS if state.get(k) != identity[k]]
        if differ:
            raise UserError(
                f"cannot resume: the state belongs to another stream: {'; '.join(differ)}; build the dataset with "
                f"the same dataset, episodes, seed, virtual_shards, pool_size, buffer_size, read_ahead, buffer_mb, "
                f"mode and return_uint8"
            )
        skip = {int(k): int(v) for k, v in state["delivered"].items()}
        bad = [v for v, n in skip.items() if not (0 <= v < len(shard_frames) and 0 <= n <= shard_frames[v])]
        if bad:
            raise UserError(f"cannot resume: the state's counts for virtual shards {bad} do not fit them (damaged?)")
        epoch, saved = int(state["epoch"]), state["ranks"]
        covered = {int(v) for r in saved["counted"] for v in rank_shards(epoch, r, saved["world_size"])}
        uncounted = sorted(set(rank_shards(epoch, None, None).tolist()) - covered)
        if uncounted:
            raise UserError(
                f"cannot resume: the state holds the counts of rank(s) {saved['counted']} of {saved['world_size']} "
                f"only, and this rank reads virtual shards {uncounted[:8]} that others read; merge every rank's state "
                f"first (LeRobotStreamingDataset.merge_states) or take it under torch.distributed"
            )
        self.epoch = epoch
        self.skip = {v: n for v, n in skip.items() if n}
        self.counts = dict(self.skip)
        return epoch


def merge_states(states: list[dict]) -> dict:
    """One state from every rank's state of the same point of an epoch (each rank counts only the virtual shards
    its workers read): the highest count of each virtual shard. A `UserError` if they come from different streams
    or epochs."""
    if not states:
        raise UserError("merge_states needs at least one state")
    first = states[0]
    for k, other in enumerate(states[1:], 1):
        differ = [key for key in (*STATE_KEYS, "epoch") if other.get(key) != first.get(key)]
        if other["ranks"]["world_size"] != first["ranks"]["world_size"]:
            differ.append("ranks.world_size")
        if differ:
            raise UserError(
                f"cannot merge these states: state {k} differs from state 0 in {', '.join(differ)} "
                f"(merge the states of one run's ranks, taken at the same step)"
            )
    delivered: dict[int, int] = {}
    for state in states:
        for shard, count in state["delivered"].items():
            delivered[int(shard)] = max(delivered.get(int(shard), 0), int(count))
    counted = sorted({r for state in states for r in state["ranks"]["counted"]})
    ranks = {"world_size": first["ranks"]["world_size"], "counted": counted}
    return {**first, "ranks": ranks, "delivered": dict(sorted(delivered.items()))}
