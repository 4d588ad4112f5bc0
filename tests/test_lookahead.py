"""`loader.lookahead`: batches that name the batch their DataLoader worker gets next."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from dlbench.loader.lookahead import LookaheadBatches

pytestmark = pytest.mark.unit


@given(st.integers(0, 60), st.integers(1, 7), st.integers(1, 5))
def test_batches_keep_their_order_and_name_the_one_a_worker_later(n, batch_size, workers):
    batches = list(torch.utils.data.BatchSampler(range(n), batch_size, drop_last=False))
    got = list(LookaheadBatches(batches, workers))
    assert [list(b) for b in got] == batches and len(LookaheadBatches(batches, workers)) == len(batches)
    later = [batches[k + workers] if k + workers < len(batches) else None for k in range(len(got))]
    assert [b.ahead for b in got] == later


def test_set_epoch_reaches_the_sampler_under_the_batches():
    sampler = torch.utils.data.distributed.DistributedSampler(range(10), num_replicas=1, rank=0, seed=1)
    batches = LookaheadBatches(torch.utils.data.BatchSampler(sampler, 4, drop_last=False), 2)
    first = [list(b) for b in batches]
    batches.set_epoch(1)
    assert sampler.epoch == 1 and [list(b) for b in batches] != first


def test_each_worker_is_told_the_batch_it_gets_next():
    """torch's DataLoader (in order) hands batch k to worker k mod W: `LookaheadBatches`' guess of each worker's
    next batch is the batch that worker then gets, for 1 to 3 workers."""
    ds = _Echo()
    for workers in (1, 2, 3):
        sampler = torch.utils.data.BatchSampler(range(40), 3, drop_last=False)
        loader = torch.utils.data.DataLoader(
            ds, batch_sampler=LookaheadBatches(sampler, workers), num_workers=workers, collate_fn=lambda b: b[0]
        )
        got: dict[int, list] = {}
        for worker, batch, ahead in loader:
            got.setdefault(worker, []).append((batch, ahead))
        assert sorted(i for seen in got.values() for b, _ in seen for i in b) == list(range(40))
        for seen in got.values():
            assert [ahead for _, ahead in seen] == [b for b, _ in seen[1:]] + [None], workers


class _Echo(torch.utils.data.Dataset):
    """Each batch as (worker id, its indices, the batch it names as next)."""

    def __len__(self):
        return 40

    def __getitems__(self, indices):
        return [(torch.utils.data.get_worker_info().id, list(indices), getattr(indices, "ahead", None))]


def test_only_batches_handed_out_in_turn_name_their_next():
    """dlbench's DataLoader guesses for a dataset that plans its batches, with one worker or in order; never where
    torch may pass a worker over (in_order=False) or where nothing is fetched ahead."""
    from dlbench.loader import DataLoader

    class Planned(_Echo):  # declares `loader.items.FrameDataset`, as dlbench's map-style dataset does
        plans_batches = True
        decode_device = "cpu"
        frame_bytes_per_item = 0  # no batch ring

        def float_cameras(self) -> frozenset:
            return frozenset()

    def guesses(ds, **kw) -> bool:
        return isinstance(DataLoader(ds, batch_size=4, **kw)._index_sampler, LookaheadBatches)

    assert guesses(Planned(), num_workers=1, in_order=False)
    assert guesses(Planned(), num_workers=2) and not guesses(Planned(), num_workers=2, in_order=False)
    assert not guesses(Planned(), num_workers=0) and not guesses(_Echo(), num_workers=2)
