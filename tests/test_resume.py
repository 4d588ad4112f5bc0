"""The resume bookkeeping of a streaming epoch (`loader.resume`), as pure functions: counts, merging, checks."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dlbench.errors import UserError
from dlbench.loader.partition import rank_shards
from dlbench.loader.resume import Delivered, merge_states

pytestmark = pytest.mark.unit

IDENTITY = {"seed": 3, "virtual_shards": 6, "dataset": {"num_frames": 60}, "order": {"pool_size": 2}}
FRAMES = np.full(6, 10)


def _rank_shards(world_size):
    """The dealing `LeRobotStreamingDataset.rank_shards` does, for rank 0 of `world_size` by default."""

    def deal(epoch, rank=None, world=None):
        return rank_shards(len(FRAMES), 3, epoch, 0 if rank is None else rank, world or world_size)

    return deal


# what each rank's consumer saw: (epoch, virtual shard, items of its stream delivered so far), in any order
notes = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 5), st.integers(1, 10)), max_size=30)


@given(st.lists(notes, min_size=1, max_size=4))
def test_merged_counts_are_each_shards_highest_count_of_the_last_epoch(ranks):
    states = []
    for rank, seen in enumerate(ranks):
        d = Delivered()
        for epoch, shard, count in seen:
            d.note(epoch, shard, count)
        states.append(d.state(IDENTITY, rank, len(ranks)))
    last = max((epoch for seen in ranks for epoch, _, _ in seen), default=0)
    if any(s["epoch"] != last for s in states):  # a rank still in an earlier epoch: not one point of the run
        with pytest.raises(UserError, match="differs from state 0 in epoch"):
            merge_states(states)
        return
    merged = merge_states(states)
    want: dict[int, int] = {}
    for seen in ranks:
        for epoch, shard, count in seen:
            if epoch == last:
                want[shard] = max(want.get(shard, 0), count)
    assert merged["delivered"] == dict(sorted(want.items()))
    assert merged["ranks"] == {"world_size": len(ranks), "counted": list(range(len(ranks)))}


@given(notes)
def test_a_state_loads_back_as_what_it_counted(seen):
    d = Delivered()
    for epoch, shard, count in seen:
        d.note(epoch, shard, count)
    again = Delivered()
    assert again.load(d.state(IDENTITY, 0, 1), IDENTITY, FRAMES, _rank_shards(1)) == d.epoch
    assert again.skip == {k: v for k, v in d.counts.items() if v} and again.counts == again.skip


def test_a_state_that_does_not_fit_is_refused_with_what_differs():
    d = Delivered()
    d.note(0, 1, 4)
    state = d.state(IDENTITY, 0, 1)
    with pytest.raises(UserError, match=r"another stream: seed 3 \(here 4\)"):
        Delivered().load(state, {**IDENTITY, "seed": 4}, FRAMES, _rank_shards(1))
    with pytest.raises(UserError, match=r"virtual shards \[1\] do not fit"):
        Delivered().load({**state, "delivered": {1: 11}}, IDENTITY, FRAMES, _rank_shards(1))
    with pytest.raises(UserError, match="older dlbench"):
        Delivered().load({"seed": 3}, IDENTITY, FRAMES, _rank_shards(1))
    # one rank's counts of a two-rank run cannot resume a single rank, which reads the other's shards too
    one_of_two = Delivered().state(IDENTITY, 1, 2)
    with pytest.raises(UserError, match=r"rank\(s\) \[1\] of 2 only"):
        Delivered().load(one_of_two, IDENTITY, FRAMES, _rank_shards(1))


def test_a_late_batch_of_an_earlier_epoch_changes_nothing():
    d = Delivered()
    d.note(1, 0, 5)
    d.note(0, 0, 9)
    d.note(1, 0, 3)
    assert (d.epoch, d.counts) == (1, {0: 5})
