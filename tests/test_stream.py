import collections
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from dlbench.errors import UserError
from dlbench.format import paths
from dlbench.loader.map import LeRobotMapDataset
from dlbench.loader.partition import entry_groups, shard_order, split_episodes
from dlbench.loader.stream import LeRobotStreamingDataset
from dlbench.workers import start_method

from .helpers import check_item, unbatch

pytestmark = pytest.mark.unit


def torch_loader(dataset, **kwargs):
    """torch's own DataLoader, its workers started as dlbench starts its own: forked only while no other thread
    runs in this process (earlier tests leave some behind, such as fsspec's I/O loop)."""
    return torch.utils.data.DataLoader(dataset, multiprocessing_context=start_method(), **kwargs)


@pytest.mark.parametrize("mode", ["single", "sarm"])
def test_stream_every_frame_carries_its_barcode(v30_h264, mode):
    ds = LeRobotStreamingDataset(str(v30_h264), return_uint8=True, mode=mode, pool_size=3, buffer_size=10)
    n = 0
    for item in ds:
        check_item(ds, item)
        n += 1
    assert n == ds.meta.num_frames == len(ds)


@pytest.mark.parametrize("world, workers", [(1, 2), (2, 2), (3, 1)])
def test_one_epoch_yields_every_frame_exactly_once(v30_h264, world, workers):
    seen = collections.Counter()
    for rank in range(world):
        ds = LeRobotStreamingDataset(
            str(v30_h264), return_uint8=True, rank=rank, world_size=world, pool_size=2, buffer_size=8
        )
        loader = torch_loader(ds, batch_size=4, num_workers=workers)
        for batch in loader:
            seen.update(batch["index"].tolist())
    total = LeRobotMapDataset(str(v30_h264), return_uint8=True).meta.num_frames
    assert sorted(seen) == list(range(total)) and set(seen.values()) == {1}


def test_order_is_seeded_per_epoch_and_shuffled(v30_h264):
    def order(seed, epoch):
        ds = LeRobotStreamingDataset(str(v30_h264), return_uint8=True, seed=seed, pool_size=3, buffer_size=16)
        ds.set_epoch(epoch)
        return [int(it["index"]) for it in ds]

    a = order(1, 0)
    assert a == order(1, 0)
    assert a != order(1, 1) and a != order(2, 0)
    assert a != sorted(a)
    # several episodes interleave early in the epoch (the pool; one virtual shard holds all 8 episodes)
    ds = LeRobotStreamingDataset(
        str(v30_h264), return_uint8=True, seed=1, pool_size=3, buffer_size=16, read_ahead=2, virtual_shards=1
    )
    first = [int(it["episode_index"]) for _, it in zip(range(40), ds)]
    assert len(set(first)) >= 3


RESUME_KW = dict(pool_size=2, buffer_size=8, seed=5, tag_items=True, virtual_shards=6)


def stream_loader(ds, workers, **kwargs):
    """torch's DataLoader over `ds` with `workers` workers (0: in this process)."""
    if workers == 0:
        return torch.utils.data.DataLoader(ds, batch_size=4, **kwargs)
    return torch_loader(ds, batch_size=4, num_workers=workers, **kwargs)


def run_ranks(root, world, workers, stops=None, state=None, epoch=None, **kw):
    """The ranks of one run, one after another in this process: each observes its batches and stops after
    stops[rank] of them (None: at the end of the epoch). Returns (indices delivered, per-rank state_dict, per-rank
    len before the pass, per-rank list of (virtual shard, pos, index) in arrival order)."""
    delivered, states, lengths, tagged = [], [], [], []
    for rank in range(world):
        ds = LeRobotStreamingDataset(root, return_uint8=True, rank=rank, world_size=world, **{**RESUME_KW, **kw})
        if epoch is not None:
            ds.set_epoch(epoch)
        if state is not None:
            ds.load_state_dict(state)
        lengths.append(len(ds))
        loader = stream_loader(ds, workers)
        seen = []
        for k, batch in enumerate(loader):
            ds.observe(batch)
            delivered += batch["index"].tolist()
            seen += zip(batch["_shard"].tolist(), batch["_pos"].tolist(), batch["index"].tolist())
            for item in unbatch(batch):
                check_item(ds, item)
            if stops is not None and k + 1 == stops[rank]:
                break
        del loader  # its workers stop; batches they had prefetched are not delivered
        states.append(ds.state_dict())
        tagged.append(seen)
    return delivered, states, lengths, tagged


@pytest.mark.parametrize(
    "first, then", [((1, 1), (1, 2)), ((1, 2), (1, 3)), ((2, 1), (1, 2)), ((2, 2), (3, 1)), ((1, 0), (2, 2))]
)
def test_resume_with_other_ranks_and_workers_delivers_the_rest_exactly_once(v30_h264, first, then):
    """A state taken mid-epoch with (ranks, workers) = `first`, each rank stopped at another batch, merged and
    resumed with `then`: every frame of the epoch arrives exactly once over both parts."""
    total = LeRobotStreamingDataset(str(v30_h264), return_uint8=True, **RESUME_KW).num_frames
    before, states, _, _ = run_ranks(str(v30_h264), *first, stops=[5, 3, 7][: first[0]], epoch=2)
    state = json.loads(json.dumps(LeRobotStreamingDataset.merge_states(states)))  # as a checkpoint file holds it
    assert state["epoch"] == 2 and sum(state["delivered"].values()) == len(before) > 0
    after, _, lengths, _ = run_ranks(str(v30_h264), *then, state=state)
    assert not set(before) & set(after)
    assert sorted(before + after) == list(range(total))
    assert sum(lengths) == len(after)  # len() after load_state_dict: what each rank still yields


@pytest.mark.parametrize("mode", ["single", "sarm"])
def test_blocks_decoded_ahead_change_when_frames_are_decoded_not_the_order(v30_h264, mode):
    """`decode_ahead` decodes a virtual shard's next blocks with its current one (fewer, larger requests): every
    item still comes where the stream puts it, with its own frames."""
    kw = dict(return_uint8=True, mode=mode, pool_size=3, buffer_size=10, seed=3)
    streams = {k: LeRobotStreamingDataset(str(v30_h264), decode_ahead=k, **kw) for k in (1, 4)}
    requests = collections.Counter()
    for k, ds in streams.items():
        assert ds.decode_ahead() == k

        def counted(rows, cursor=None, ahead=None, build=ds.builder.build_many, k=k):
            requests[k] += 1
            return build(rows, cursor, ahead)

        ds.builder.build_many = counted
    alone = [int(it["index"]) for it in streams[1]]
    together = list(streams[4])
    for item in together:
        check_item(streams[4], item)
    assert [int(it["index"]) for it in together] == alone
    assert sorted(alone) == list(range(streams[1].num_frames))
    assert requests[4] * 2 < requests[1]


def test_blocks_are_decoded_ahead_by_default_where_windows_reach_over_long_gops(v30_h264, tmp_path):
    """sarm (8 frames a second apart) on H.264 of GOP 30 in random order: DECODE_AHEAD blocks at once; single frames
    (they share a GOP only where they land in one), reading forward or a GOP at a time (blocks follow one another):
    each block as it comes; on GOPs of 2 frames (LeRobot's AV1) a frame costs about what the next does."""
    from dlbench.convert.run import run as convert_run
    from dlbench.loader.stream import DECODE_AHEAD

    from .helpers import synth_cached, tiny_config

    root = str(v30_h264)
    assert DECODE_AHEAD > 1 and LeRobotStreamingDataset(root, mode="sarm").decode_ahead() == DECODE_AHEAD
    assert LeRobotStreamingDataset(root).decode_ahead() == 1
    assert LeRobotStreamingDataset(root, mode="sarm", episode_order="forward").decode_ahead() == 1
    assert LeRobotStreamingDataset(root, mode="sarm", shuffle=False).decode_ahead() == 1
    assert LeRobotStreamingDataset(root, gop_run=30).decode_ahead() == 1
    short = synth_cached(tiny_config(episodes=2, length_max=20, gop=2), tmp_path / "v21")
    short = convert_run(str(short), tmp_path / "v30", workers=1, progress=False)
    assert LeRobotStreamingDataset(str(short), mode="sarm").decode_ahead() == 1


def test_a_stream_decoding_ahead_resumes_with_other_workers_exactly_once(v30_h264):
    total = LeRobotStreamingDataset(str(v30_h264), return_uint8=True, **RESUME_KW).num_frames
    before, states, _, _ = run_ranks(str(v30_h264), 1, 2, stops=[4], decode_ahead=3)
    state = json.loads(json.dumps(LeRobotStreamingDataset.merge_states(states)))
    after, _, _, _ = run_ranks(str(v30_h264), 2, 1, state=state, decode_ahead=2)
    assert len(before) > 0 and not set(before) & set(after)
    assert sorted(before + after) == list(range(total))


def test_virtual_shard_order_does_not_depend_on_workers(v30_h264):
    """Each virtual shard's items come in the order of its own stream (positions 0, 1, 2...), the same with 1 and
    3 DataLoader workers and on every run with the same seed and epoch; another epoch reorders them."""

    def per_shard(workers, epoch=0):
        _, _, _, [seen] = run_ranks(str(v30_h264), 1, workers, epoch=epoch)
        order = collections.defaultdict(list)
        for shard, pos, index in seen:
            assert pos == len(order[shard])  # a prefix of the shard's stream at every point
            order[shard].append(index)
        return dict(order)

    one = per_shard(1)
    assert len(one) == 6 and one == per_shard(3) == per_shard(1)
    assert per_shard(0, epoch=1) != one


def test_rank_reads_the_same_virtual_shards_whatever_its_workers(v30_h264):
    ds = LeRobotStreamingDataset(str(v30_h264), return_uint8=True, rank=1, world_size=2, **RESUME_KW)
    mine = sorted(ds.rank_shards(3).tolist())
    for workers in (1, 2, 3, 4):
        dealt = [v for w in range(workers) for v in ds.worker_shards(3, workers, w).tolist()]
        assert sorted(dealt) == mine
    other = LeRobotStreamingDataset(str(v30_h264), return_uint8=True, rank=0, world_size=2, **RESUME_KW)
    assert sorted(mine + other.rank_shards(3).tolist()) == list(range(6))
    assert len(ds) + len(other) == ds.num_frames


def test_a_state_of_another_stream_is_refused(v30_h264):
    _, [state], _, _ = run_ranks(str(v30_h264), 1, 0, stops=[3])
    for other in (dict(seed=6), dict(virtual_shards=3), dict(pool_size=3), dict(episodes=[0, 1, 2])):
        ds = LeRobotStreamingDataset(str(v30_h264), return_uint8=True, **{**RESUME_KW, **other})
        with pytest.raises(UserError, match="cannot resume: the state belongs to another stream"):
            ds.load_state_dict(state)
    ds = LeRobotStreamingDataset(str(v30_h264), return_uint8=True, **RESUME_KW)
    with pytest.raises(UserError, match="older dlbench"):
        ds.load_state_dict({"seed": 5, "epoch": 0, "world_size": 1, "num_shards": 2, "consumed": {0: 4}})
    with pytest.raises(UserError, match="do not fit"):
        ds.load_state_dict({**state, "delivered": {0: 10_000}})
    with pytest.raises(UserError, match="differs from state 0 in epoch"):
        LeRobotStreamingDataset.merge_states([state, {**state, "epoch": 1}])
    # one rank's state of two: enough to resume that rank with the same world size, not the whole epoch elsewhere
    _, [_, rank1], _, _ = run_ranks(str(v30_h264), 2, 0, stops=[1, 3])
    LeRobotStreamingDataset(str(v30_h264), return_uint8=True, rank=1, world_size=2, **RESUME_KW).load_state_dict(rank1)
    with pytest.raises(UserError, match=r"holds the counts of rank\(s\) \[1\] of 2 only.*merge_states"):
        ds.load_state_dict(rank1)
    with pytest.raises(UserError, match="tag_items=True"):
        ds.observe({"index": torch.arange(4)})


def _distributed_rank(rank, root, store, out):
    """One of two ranks with torch.distributed initialized: rank and world size come from it, and state_dict()
    gathers both ranks' counts."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    try:
        ds = LeRobotStreamingDataset(root, return_uint8=True, **RESUME_KW)
        delivered = []
        for k, batch in enumerate(torch.utils.data.DataLoader(ds, batch_size=4)):
            delivered += batch["index"].tolist()
            if k + 1 == (4, 6)[rank]:
                break
        state = ds.state_dict()
        (Path(out) / f"rank{rank}.json").write_text(json.dumps([ds.rank, ds.world_size, delivered, state]))
        dist.barrier()  # leave together: a rank whose peer already closed its gloo pairs can abort in teardown
    finally:
        dist.destroy_process_group()


def test_state_dict_gathers_the_ranks_under_torch_distributed(v30_h264, tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "5")  # torch.distributed comes first
    monkeypatch.setenv("WORLD_SIZE", "9")
    torch.multiprocessing.start_processes(
        _distributed_rank, args=(str(v30_h264), str(tmp_path / "store"), str(tmp_path)), nprocs=2, start_method="spawn"
    )
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert [(r[0], r[1]) for r in ranks] == [(0, 2), (1, 2)]
    assert ranks[0][3] == ranks[1][3]  # every rank returns the global state
    before = ranks[0][2] + ranks[1][2]
    assert sum(ranks[0][3]["delivered"].values()) == len(before)
    after, _, _, _ = run_ranks(str(v30_h264), 1, 2, state=ranks[0][3])
    assert sorted(before + after) == list(range(LeRobotStreamingDataset(str(v30_h264)).num_frames))


def test_decoder_cache_counters_add_up(v30_h264):
    ds = LeRobotStreamingDataset(
        str(v30_h264), return_uint8=True, mode="sarm", pool_size=4, buffer_size=8, decoder_cache_size=2
    )
    calls = 0
    real_get = ds.cache.get

    def counting_get(url, cursor=None):
        nonlocal calls
        calls += 1
        return real_get(url, cursor)

    ds.cache.get = counting_get
    for _ in ds:
        pass
    s = ds.cache.stats()
    assert s["hits"] + s["misses"] == calls > 0
    assert 0 < s["evictions"] <= s["misses"]  # 2 decoders for 2 cameras x several files: some are evicted
    assert s["size"] <= 2 and 0.0 <= s["hit_rate"] <= 1.0


def test_streaming_decoders_follow_pool_slots_not_episodes(v30_h264_one_file):
    """Read forward, live episodes of one file are read in turn by decoders of their own (none seeks back); an
    episode that starts takes over the decoder of the one that finished, so a camera's file is opened once per pool
    slot, not once per episode, and every frame is still the right one after those seeks. A worker reading several
    virtual shards at once (4 shards of 2 episodes: 2 lanes of 2 slots) keeps the slots' decoders from one shard to
    the next. In random order every block is a jump: one decoder per file and camera, blocks decoded in file order."""
    ds = LeRobotStreamingDataset(str(v30_h264_one_file), return_uint8=True, pool_size=3, buffer_size=8)
    assert sum(1 for item in ds if check_item(ds, item) is None) == ds.meta.num_frames
    assert ds.cache.stats()["misses"] == len(ds.meta.cameras)
    for shards, lanes, slots in ((1, 1, 3), (4, 2, 4)):
        ds = LeRobotStreamingDataset(
            str(v30_h264_one_file), return_uint8=True, pool_size=3, buffer_size=8, virtual_shards=shards,
            episode_order="forward",
        )  # fmt: skip
        assert {len(set(ds.meta.video_url(c, e) for e in range(len(ds.meta.ep_from)))) for c in ds.meta.cameras} == {1}
        assert ds.lanes.at_once == lanes and ds.lanes.at_once * ds.lanes.pool == slots
        n = 0
        for item in ds:
            check_item(ds, item)
            n += 1
        assert n == ds.meta.num_frames
        s = ds.cache.stats()
        assert len(ds.meta.ep_from) == 8 and s["misses"] == slots * len(ds.meta.cameras)
        assert s["size"] <= len(ds.meta.cameras) * (slots + 2)


def test_split_balances_frames_and_keeps_episodes_whole():
    lengths = torch.tensor([10, 200, 15, 30, 30, 5, 90, 20]).numpy()
    parts = split_episodes(lengths, 3)
    assert [e for p in parts for e in p] == list(range(8))
    loads = [int(lengths[list(p)].sum()) for p in parts]
    assert max(loads) <= 215 and min(loads) > 0


def test_stream_bad_inputs(v30_h264, v21_h264, tmp_path):
    with pytest.raises(UserError, match="dlbench convert run"):
        LeRobotStreamingDataset(str(v21_h264), return_uint8=True)
    with pytest.raises(UserError, match="not a multiple of 1/fps"):
        LeRobotStreamingDataset(str(v30_h264), return_uint8=True, delta_timestamps={"observation.state": [0.01]})
    with pytest.raises(UserError, match="http://127.0.0.1:9/nowhere"):
        LeRobotStreamingDataset("http://127.0.0.1:9/nowhere", return_uint8=True)
    broken = tmp_path / "broken"
    shutil.copytree(v30_h264, broken)
    video = broken / paths.v30_video_path("observation.images.front", 0, 0)
    video.write_bytes(video.read_bytes()[:200])
    with pytest.raises(UserError, match="file-000.mp4: cannot open video"):
        list(LeRobotStreamingDataset(str(broken), return_uint8=True))


def test_metadata_here_data_files_elsewhere(v30_h264, tmp_path):
    """`data_files_root`: meta/ from one place (a Hub repo, say), data/ and videos/ from another (a bucket)."""
    meta_only, files_only = tmp_path / "meta_repo", tmp_path / "bucket"
    shutil.copytree(v30_h264 / "meta", meta_only / "meta")
    for part in ("data", "videos"):
        shutil.copytree(v30_h264 / part, files_only / part)
    with pytest.raises(UserError):  # the files are not under the metadata root
        LeRobotMapDataset(str(meta_only), return_uint8=True)[0]
    mapped = LeRobotMapDataset(str(meta_only), return_uint8=True, mode="sarm", data_files_root=str(files_only))
    for i in range(0, len(mapped), 7):
        check_item(mapped, mapped[i])
    stream = LeRobotStreamingDataset(str(meta_only), return_uint8=True, data_files_root=str(files_only), buffer_size=4)
    seen = []
    for item in stream:
        check_item(stream, item)
        seen.append(int(item["index"]))
    assert sorted(seen) == list(range(stream.meta.num_frames))


def test_dlbench_dataloader_batches_equal_torch_default_batches(v30_h264):
    """dlbench.loader.DataLoader moves small fields pickled, not through shared memory; the batches it
    returns must be exactly what torch's default collate gives."""
    from dlbench.loader import DataLoader

    kw = dict(mode="sarm", seed=3, pool_size=2, buffer_size=4)
    ours = DataLoader(LeRobotStreamingDataset(str(v30_h264), return_uint8=True, **kw), batch_size=4, num_workers=1)
    ref = torch_loader(LeRobotStreamingDataset(str(v30_h264), return_uint8=True, **kw), batch_size=4, num_workers=1)
    for k, (a, b) in enumerate(zip(ours, ref)):
        assert a.keys() == b.keys()
        for key in a:
            if isinstance(b[key], torch.Tensor):
                assert isinstance(a[key], torch.Tensor) and a[key].dtype == b[key].dtype, key
                assert torch.equal(a[key], b[key]), key
            else:
                assert a[key] == b[key], key
        if k == 5:
            break


class _CollateInWorker(torch.utils.data.IterableDataset):
    """Collates 3 items of `ds` where a DataLoader would, in the worker, and yields what the batch looks like."""

    def __init__(self, ds):
        self.ds = ds

    def __iter__(self):
        from dlbench.loader.collate import collate

        items = []
        for item in self.ds:
            items.append(item)
            if len(items) == 3:
                batch = collate(items)
                frames = [batch[cam] for cam in self.ds.meta.cameras]
                yield (
                    [f.untyped_storage().data_ptr() for f in frames],
                    [f.is_shared() for f in frames],
                    type(batch["_pos"]).__name__,
                    [
                        torch.equal(f, torch.stack([i[cam] for i in items]))
                        for f, cam in zip(frames, self.ds.meta.cameras)
                    ],
                    [f.movedim(-3, -1).is_contiguous() for f in frames],
                )
                return


def test_collate_ships_all_frames_of_a_batch_in_one_shared_block(v30_h264):
    """Inside a DataLoader worker, every camera's frames of one batch are views of a single shared-memory block
    (one descriptor crosses to the main process, not one per camera), and plain numbers become numpy arrays."""
    ds = LeRobotStreamingDataset(str(v30_h264), return_uint8=True, mode="sarm", buffer_size=4, tag_items=True)
    loader = torch_loader(_CollateInWorker(ds), batch_size=None, num_workers=1)
    ptrs, shared, pos_type, equal, hwc = next(iter(loader))
    assert len(ds.meta.cameras) == 2 and len(set(ptrs)) == 1 and all(shared)
    assert pos_type == "ndarray" and all(equal)
    assert all(hwc)  # stacked in the (H, W, C) memory order torchcodec decodes to: no per-pixel transpose


@pytest.mark.parametrize("loader", ["stream", "map"])
def test_windows_reach_collate_uncopied_in_its_workers_and_batch_right(v30_h264, monkeypatch, loader):
    """In a DataLoader worker batched by dlbench's collate, a window with repeated frames stays a FrameGather (its
    frames are copied once, into the batch); the batch holds the right barcodes and equals the batch of
    materialized items. Everywhere else items hold plain tensors."""
    from dlbench.decode.cache import FrameGather
    from dlbench.loader import collate as collate_mod

    ds = (
        LeRobotStreamingDataset(str(v30_h264), return_uint8=True, mode="sarm", buffer_size=4, tag_items=False)
        if loader == "stream"
        else LeRobotMapDataset(str(v30_h264), return_uint8=True, mode="sarm")
    )

    def items():
        if loader == "map":
            return [ds[i] for i in range(0, 60, 10)]
        ds.set_epoch(0)  # the same items again
        return [item for _, item in zip(range(6), ds)]

    plain = items()
    assert not any(isinstance(v, FrameGather) for item in plain for v in item.values())
    monkeypatch.setattr(collate_mod, "_collating_worker", False)
    collate_mod.CollateWorkerInit()(0)
    assert collate_mod.collating_worker()
    lazy = items()  # rows whose fields the batch gathers, with their frames
    assert all(isinstance(item, collate_mod.RowItem) for item in lazy)
    assert any(isinstance(item.frames[cam], FrameGather) for item in lazy for cam in ds.meta.cameras)
    got, want = collate_mod.to_torch(collate_mod.collate(lazy)), collate_mod.to_torch(collate_mod.collate(plain))
    assert list(got) == list(want)  # the same keys in the same order
    for key, value in want.items():
        assert got[key] == value if key == "task" else (got[key].dtype == value.dtype and torch.equal(got[key], value))
    for cam in ds.meta.cameras:
        assert got[cam].movedim(-3, -1).is_contiguous()
    for item in unbatch(got):
        check_item(ds, item)


def test_buffer_is_capped_by_decoded_bytes(v30_h264):
    """However large the frames and windows, the shuffle buffer keeps at most buffer_mb of decoded blocks alive
    (the items decoded together share one block, which lives until the last of them leaves the buffer)."""
    item_mb = (64 * 64 * 3 + 64 * 96 * 3) * 8 / 2**20  # sarm: 8 steps of both cameras
    ds = LeRobotStreamingDataset(
        str(v30_h264),
        return_uint8=True,
        mode="sarm",
        buffer_size=256,
        read_ahead=4,
        block_stride=1,  # consecutive rows: a block holds 4 whole windows
        buffer_mb=2 * 4 * item_mb,
    )
    assert ds.max_blocks() == 2  # per DataLoader worker, whatever their number
    events = list(
        shard_order(
            ds.meta.ep_from,
            ds.meta.ep_to,
            range(len(ds.meta.ep_from)),
            0,
            0,
            0,
            ds.pool_size,
            ds.buffer_size,
            ds.read_ahead,
            True,
            ds.max_blocks(),
            1,
            ds.block_stride,
        )
    )
    block_of, alive, most = {}, collections.Counter(), 0
    for n, (kind, value) in enumerate(events):
        if kind == "decode":
            for r in value[0]:
                block_of[r] = n
            alive[n] = len(value[0])
        else:
            alive[block_of[value]] -= 1
            alive += collections.Counter()  # drop blocks with no item left
        most = max(most, len(alive) if kind == "emit" else 0)
    assert most <= 2 + 1  # the two kept, plus the one just decoded while the oldest drains
    seen = sorted(int(item["index"]) for item in ds)
    assert seen == list(range(ds.meta.num_frames))  # a small bound still yields every frame once
    order = [int(item["index"]) for item in ds]
    assert order != sorted(order)  # and still shuffles


def test_blocks_of_rows_a_window_apart_share_their_frames(v30_h264):
    """sarm's window is 8 frames 1 s apart: rows that far apart share 7 of them, so a block of 4 such rows holds 11
    frames a camera, not 32, and the same buffer_mb keeps about 3 times as many blocks (episodes) alive."""
    frame_mb = (64 * 64 * 3 + 64 * 96 * 3) / 2**20
    kw = dict(return_uint8=True, mode="sarm", read_ahead=4, buffer_mb=8 * 4 * 8 * frame_mb)
    strided, flat = (
        LeRobotStreamingDataset(str(v30_h264), **kw),
        LeRobotStreamingDataset(str(v30_h264), block_stride=1, **kw),
    )
    assert strided.block_stride == int(strided.meta.fps)
    assert strided.block_bytes() == round(frame_mb * 2**20 * 11) and flat.block_bytes() == round(frame_mb * 2**20 * 32)
    assert strided.max_blocks() == 23 and flat.max_blocks() == 8
    items = list(strided)
    assert sorted(int(i["index"]) for i in items) == list(range(strided.meta.num_frames))  # every frame once
    for item in items[:40]:
        check_item(strided, item)  # the right frames in every window


def test_default_read_ahead_keeps_the_pool_live_within_buffer_mb_and_shares_no_frame(v30_h264):
    """With read_ahead unset, a stream whose blocks would crowd the buffer takes fewer rows a block, so that 3/4 of
    its pool's episodes keep a block alive; small items take 2, never more (ten batches then hold a block's alike
    rows at most twice, whatever the batch size or content). Rows of a multi-frame window a spacing apart share
    frames, which would meet in one batch: one row a block, unless the stride keeps them apart."""
    frame_mb = (64 * 64 * 3 + 64 * 96 * 3) / 2**20
    assert LeRobotStreamingDataset(str(v30_h264), return_uint8=True).read_ahead == 2
    assert LeRobotStreamingDataset(str(v30_h264), return_uint8=True, buffer_mb=4096).read_ahead == 2
    tight = LeRobotStreamingDataset(str(v30_h264), return_uint8=True, pool_size=8, buffer_mb=6 * 2 * frame_mb)
    assert tight.read_ahead == 2 and tight.max_blocks() >= 6
    tighter = LeRobotStreamingDataset(str(v30_h264), return_uint8=True, pool_size=8, buffer_mb=5 * 2 * frame_mb)
    assert tighter.read_ahead == 1
    assert LeRobotStreamingDataset(str(v30_h264), return_uint8=True, buffer_mb=0.01).read_ahead == 1
    assert LeRobotStreamingDataset(str(v30_h264), return_uint8=True, mode="sarm").read_ahead == 1
    apart = LeRobotStreamingDataset(str(v30_h264), return_uint8=True, mode="sarm", block_stride=1000)
    assert apart.read_ahead > 1  # rows 1,000 frames apart share no frame of a 7 s window


@pytest.mark.parametrize(
    "key", ["read_ahead", "virtual_shards", "block_stride", "pool_size", "buffer_size", "decode_ahead"]
)
def test_zero_counts_are_refused_not_taken_for_the_default(v30_h264, key):
    with pytest.raises(UserError, match=f"{key} must be >= 1 \\(got 0\\)"):
        LeRobotStreamingDataset(str(v30_h264), **{key: 0})
    with pytest.raises(UserError, match="episode_order must be one of random, forward"):
        LeRobotStreamingDataset(str(v30_h264), episode_order="sideways")


def _ring_span(ring) -> tuple[int, int]:
    import numpy as np

    start = np.frombuffer(ring._mem, dtype=np.uint8).ctypes.data
    return start, start + len(ring._mem)


@pytest.mark.parametrize("context", [None, "forkserver"])
def test_batch_ring_reuses_slots_and_never_overwrites_a_held_batch(v30_h264, context):
    """Workers write frames into a few reused shared slots. A consumer that keeps every batch exhausts them: later
    batches take the fallback and no held batch is overwritten; dropped batches (read or not) free their slots, and
    a consumer that drops each batch is served from the slots. Forked workers inherit the slots' memory; workers
    started by the fork server map it through the descriptor they receive (None: as `start_method` picks)."""
    import gc

    from dlbench.loader import DataLoader

    ds = LeRobotStreamingDataset(str(v30_h264), return_uint8=True, mode="single", pool_size=2, buffer_size=8)
    loader = DataLoader(ds, batch_size=4, num_workers=2, persistent_workers=True, multiprocessing_context=context)
    held = list(loader)
    ring = loader.collate_fn.ring
    lo, hi = _ring_span(ring)
    in_ring = [lo <= b[ds.meta.cameras[0]].data_ptr() < hi for b in held]
    assert sum(in_ring) == ring.workers * ring.slots < len(held) and ring.busy() == sum(in_ring)
    for batch in held:
        for item in unbatch(batch):
            check_item(ds, item)
    del held, batch, item
    gc.collect()
    assert ring.busy() == 0
    ds.set_epoch(1)
    for k, batch in enumerate(loader):  # noqa: B007 (a partial pass: batches still in flight are dropped unread)
        if k == 2:
            break
    del batch  # the last batch was held to here
    ds.set_epoch(2)
    from_ring = [lo <= b[ds.meta.cameras[0]].data_ptr() < hi for b in loader]
    gc.collect()
    # slots are reused many times over; a few batches at the epoch's tail may fall back (once a worker's shard
    # ends, torch lets the other run up to prefetch_factor x num_workers batches ahead)
    assert len(from_ring) > 4 * ring.workers * ring.slots and sum(from_ring) >= 0.8 * len(from_ring)
    assert ring.busy() == 0


def test_fetch_groups_of_consecutive_episodes_enter_the_pool_one_after_another():
    """With `fetch_episodes` k, a virtual shard's episodes enter the pool in runs of k consecutive episodes (the unit
    fetched together), the runs and the episodes within them in a seeded random order."""
    groups = entry_groups(range(10), 3, np.random.default_rng(0))
    assert sorted(sorted(g) for g in groups) == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    assert groups != entry_groups(range(10), 3, np.random.default_rng(1))
    lengths = np.array([5, 7, 3, 9, 4, 6, 8, 2, 5, 3])
    ep_from = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    events = shard_order(ep_from, ep_from + lengths, range(10), 0, 0, 0, 2, 16, 4, True, None, 3)
    entered = list(
        dict.fromkeys(int(np.searchsorted(ep_from, v[0][0], side="right")) - 1 for k, v in events if k == "decode")
    )
    groups = entry_groups(range(10), 3, np.random.default_rng([0, 0, 0]))  # the generator shard_order draws from
    group_of = {ep: k for k, g in enumerate(groups) for ep in g}
    assert sorted(entered) == list(range(10))
    assert list(dict.fromkeys(group_of[ep] for ep in entered)) == list(range(len(groups)))


@pytest.mark.parametrize("held_mb", [32, 0])
def test_a_rank_dealt_other_episodes_each_epoch_reads_each_data_file_once(v30_h264, monkeypatch, held_mb):
    """Ranks (and workers) are dealt other virtual shards each epoch, and so other rows of the data files: the
    tables a process already read are kept (up to HELD_DATA_MB), so a small dataset's files are read once, not once
    an epoch (on a remote source each re-read was requests in every epoch of a long run)."""
    import dlbench.loader.stream as stream

    monkeypatch.setattr(stream, "HELD_DATA_MB", held_mb)
    ds = LeRobotStreamingDataset(str(v30_h264), return_uint8=True, rank=0, world_size=2, pool_size=2, buffer_size=4)
    files = len(ds.meta.data_files())
    touched = set()
    for epoch in range(4):
        ds.set_epoch(epoch)
        rows = [int(item["index"]) for item in ds]
        touched |= {f for r in rows for f in ds.meta.data_files_for_rows(r, r + 1)}
    assert files > 1 and len(touched) == files  # every file was needed by some epoch
    if held_mb:
        assert ds._tables.reads == files
    else:  # nothing kept (one table at most): files are read again as the rows change
        assert ds._tables.reads > files


def test_a_sequential_reader_decodes_only_the_frames_its_last_request_lacked(v30_h264):
    """A pool slot's decoder keeps its last request's frames: the next block of rows a window apart asks the decoder
    for its one new frame, and gets the same frames, in the same memory layout, as a fresh decode."""
    from dlbench.decode.cache import VideoDecoderCache, is_channels_last
    from dlbench.loader.dataset_meta import DatasetMeta

    meta = DatasetMeta.load(str(v30_h264))
    url, fps = meta.video_url(meta.cameras[0], 0), meta.fps
    cache = VideoDecoderCache(4)
    first = cache.decode(url, [0 / fps, 3 / fps, 6 / fps], fps, cursor=0)
    entry = cache.get(url, cursor=0)
    asked, real = [], entry.decoder.get_frames_at
    entry.decoder.get_frames_at = lambda idx: asked.append(idx.tolist()) or real(idx)
    second = cache.decode(url, [3 / fps, 6 / fps, 9 / fps], fps, cursor=0)
    assert asked == [[9]]
    fresh = VideoDecoderCache(4).decode(url, [3 / fps, 6 / fps, 9 / fps], fps)
    assert torch.equal(second, fresh) and torch.equal(second[:2], first[1:])
    assert is_channels_last(second) == is_channels_last(fresh)
    cache.decode(url, [20 / fps], fps)  # no cursor (random access): nothing kept, nothing reused
    assert asked == [[9]]


def test_a_stream_in_random_order_keeps_no_slot_frames_outside_its_budget(v30_h264):
    """A slot's last block is kept for the next only where the next one follows it (forward): in random order those
    frames would be held outside buffer_mb and the decoder budget for nothing."""
    for order, kept in (("random", False), ("forward", True)):
        ds = LeRobotStreamingDataset(str(v30_h264), return_uint8=True, episode_order=order, read_ahead=4)
        items = list(ds)
        assert len(items) == ds.num_frames  # every frame once, in either order
        held = [e.recent is not None for e in ds.builder.decoder.cache._entries.values()]
        assert held and any(held) is kept


@pytest.fixture(scope="module")
def long_episodes(tmp_path_factory):
    """5 episodes of 4-5 s (10 fps): long enough to cut into two pieces of at least 2 s."""
    from dlbench.convert.run import run as convert_run

    from .helpers import synth_cached, tiny_config

    cfg = tiny_config(episodes=5, length_min=40, length_max=50, fps=10)
    v21 = synth_cached(cfg, tmp_path_factory.mktemp("long") / "v21")
    return convert_run(str(v21), tmp_path_factory.mktemp("longv30") / "v30", workers=1, progress=False)


def _epoch(root, world, workers, state=None, stop=None):
    """Each rank's pass through dlbench's DataLoader (which tells the stream its workers), stopping after `stop`
    batches a rank: (indices delivered, merged state, each rank's pieces, each worker's episodes)."""
    from dlbench.loader import DataLoader

    got, states, pieces, reach = [], [], [], []
    for rank in range(world):
        ds = LeRobotStreamingDataset(root, return_uint8=True, tag_items=True, seed=3, rank=rank, world_size=world)
        if state is not None:
            ds.load_state_dict(state)
        loader = DataLoader(ds, batch_size=4, num_workers=workers, multiprocessing_context=start_method())
        pieces.append((ds.pieces, ds.gop_run))
        for w in range(max(workers, 1)):
            mine = ds.worker_shards(ds.epoch, max(workers, 1), w)
            reach.append({int(e) for v in mine for e in ds.virtual_shard_episodes(int(v))})
        for k, batch in enumerate(loader):
            ds.observe(batch)
            got += batch["index"].tolist()
            if stop is not None and k + 1 == stop:
                break
        del loader
        states.append(ds.state_dict())
    return got, LeRobotStreamingDataset.merge_states(states), pieces, reach


@pytest.mark.parametrize("first, then", [((1, 2), (1, 1)), ((2, 2), (1, 3)), ((1, 1), (2, 2))])
def test_workers_read_pieces_of_every_episode_and_a_state_keeps_its_pieces(long_episodes, first, then):
    """Under dlbench's DataLoader each episode is cut into ranks x workers pieces and every worker reads a piece of
    each episode; with 2 workers or more a GOP (30 frames here, blocks of 8) is read at a time. A state resumed
    under other ranks and workers keeps the pieces and GOP runs it was cut with, and the epoch still delivers every
    frame exactly once."""
    root = str(long_episodes)
    total = LeRobotStreamingDataset(root).num_frames
    before, state, pieces, reach = _epoch(root, *first, stop=3)
    consumers = first[0] * max(first[1], 1)
    cut = (consumers, 30 if first[1] >= 2 else 0)
    assert set(pieces) == {cut}
    if consumers == 2:  # as many pieces as workers: each worker holds a piece of all 5 episodes
        assert all(r == set(range(5)) for r in reach), reach
    state = json.loads(json.dumps(state))
    after, _, resumed, _ = _epoch(root, *then, state=state)
    assert set(resumed) == {cut}  # the state's pieces and runs, not the new workers'
    assert sorted(before + after) == list(range(total))


def test_gop_runs_are_taken_by_default_only_where_the_buffer_keeps_enough_of_them_decoded(long_episodes):
    """With 2 workers a GOP (30 frames) is read at a time where a worker's buffer keeps GOP_RUNS_HELD runs of it
    decoded; a buffer of a few runs (720p, or a small buffer_mb) reads blocks at random jumps instead, whose batches
    mix more moments; one worker never runs; an asked gop_run is kept whatever the buffer."""
    from dlbench.loader.stream import GOP_RUNS_HELD

    root = str(long_episodes)
    run_mb = 30 * LeRobotStreamingDataset(root, read_ahead=1).block_bytes(1) / 2**20

    def gop(buffer_runs, workers=2, **kw):
        ds = LeRobotStreamingDataset(root, read_ahead=2, buffer_mb=buffer_runs * run_mb, **kw)
        ds.use_workers(workers)
        return ds.gop_run

    assert gop(GOP_RUNS_HELD + 1) == 30 and gop(GOP_RUNS_HELD - 2) == 0
    assert gop(GOP_RUNS_HELD + 1, workers=1) == 0 and gop(2, gop_run=30) == 30


@pytest.fixture(scope="module")
def regular_gops(tmp_path_factory):
    """5 episodes of 4-5 s (10 fps) of camera content at 240x320, H.264 with a keyframe every 30 frames exactly
    (the barcodes of smaller frames make x264 add scene cuts)."""
    from dlbench.convert.run import run as convert_run
    from dlbench.synth import Camera

    from .helpers import synth_cached, tiny_config

    cam = (Camera("observation.images.front", 240, 320),)
    cfg = tiny_config(episodes=5, length_min=40, length_max=50, fps=10, content="camera", cameras=cam)
    v21 = synth_cached(cfg, tmp_path_factory.mktemp("regular") / "v21")
    return convert_run(str(v21), tmp_path_factory.mktemp("regularv30") / "v30", workers=1, progress=False)


def test_on_long_gops_a_default_block_spreads_its_rows_over_one_gop_and_an_epoch_reads_every_frame_once(
    regular_gops, long_episodes
):
    """Where GOP runs would not be kept decoded (a buffer of a few runs: 720p, or a small buffer_mb), a default
    block is 6 rows 5 apart inside one GOP of 30 (one GOP decoded for 6 of its frames, not half a GOP for each of 2
    consecutive rows); every block's rows lie in one GOP and an epoch under 2 workers delivers every frame once.
    With a buffer that keeps GOP runs, read_ahead / gop_run asked, or keyframes off a fixed grid (scene cuts), blocks
    are as before."""
    from dlbench.loader import DataLoader
    from dlbench.loader.stream import GOP_RUNS_HELD

    irregular = LeRobotStreamingDataset(str(long_episodes), buffer_mb=1)
    assert irregular.meta.keyframe_interval(0) == 30 and irregular.meta.regular_gop(0) == 0
    assert (irregular.read_ahead, irregular.block_stride) in ((2, 1), (1, 1))
    root = str(regular_gops)
    run_mb = 30 * LeRobotStreamingDataset(root, read_ahead=1).block_bytes(1) / 2**20
    small = LeRobotStreamingDataset(root, buffer_mb=4 * run_mb, return_uint8=True)
    assert (small.read_ahead, small.block_stride, small.gop_run) == (6, 5, 0)
    big = LeRobotStreamingDataset(root, buffer_mb=(GOP_RUNS_HELD + 2) * run_mb)
    assert (big.read_ahead, big.block_stride) == (2, 1)
    for asked in ({"read_ahead": 2}, {"gop_run": 0}):
        assert LeRobotStreamingDataset(root, buffer_mb=4 * run_mb, **asked).block_stride == 1
    small.use_workers(2)
    ep_from = small.meta.ep_from
    for w in range(2):
        for rows, _ in small.worker_decodes(0, 2, w):
            start = ep_from[np.searchsorted(ep_from, rows[0], side="right") - 1]
            assert len({(r - start) // 30 for r in rows}) == 1 and np.all(np.diff(rows) == 5), rows
    seen = [int(i) for batch in DataLoader(small, batch_size=8, num_workers=2) for i in batch["index"]]
    assert sorted(seen) == list(range(small.meta.num_frames))


def test_a_stream_planned_for_two_workers_keeps_that_plan_under_one_and_reads_every_frame_once(long_episodes):
    """`plan_for(2)`: the pieces and GOP runs two workers read (a calibration's one-worker pass reads as each worker
    of the run it stands for), kept when a DataLoader of one worker calls `use_workers(1)`, which alone cuts them
    back; under that one worker an epoch still delivers every frame once."""
    from dlbench.loader import DataLoader

    root = str(long_episodes)

    def planned(workers, plan=None):
        ds = LeRobotStreamingDataset(root, read_ahead=2, buffer_mb=1024, return_uint8=True)
        if plan:
            ds.plan_for(plan)
        ds.use_workers(workers)
        return ds

    two, one, kept = planned(2), planned(1), planned(1, plan=2)
    assert (kept.pieces, kept.gop_run) == (two.pieces, two.gop_run) == (2, 30)
    assert (one.pieces, one.gop_run) == (1, 0)
    seen = [int(i) for batch in DataLoader(kept, batch_size=8, num_workers=1) for i in batch["index"]]
    assert sorted(seen) == list(range(kept.meta.num_frames))


def test_gop_runs_are_not_taken_by_default_where_a_decoder_per_slot_would_not_fit(long_episodes, monkeypatch):
    """Reading forward takes a decoder per pool slot, camera and file, each holding its file's index: where those
    would pass FORWARD_DECODERS_MB (files of thousands of episodes), blocks are read at random jumps instead."""
    from dlbench.decode.cache import decoder_bytes
    from dlbench.loader import stream

    root = str(long_episodes)
    ds = LeRobotStreamingDataset(root, read_ahead=2, buffer_mb=1024)
    ds.use_workers(2)
    assert ds.gop_run == 30
    h, w = ds.meta.shapes[ds.meta.cameras[0]][:2]
    per = decoder_bytes(w, h, ds.meta.largest_video_file_frames())
    assert ds.meta.largest_video_file_frames() == ds.meta.num_frames  # one file per camera
    slots = len(ds.meta.cameras) * (ds.lanes.at_once * ds.lanes.pool + 2)
    monkeypatch.setattr(stream, "FORWARD_DECODERS_MB", 0.9 * slots * per / 2**20)
    small = LeRobotStreamingDataset(root, read_ahead=2, buffer_mb=1024)
    small.use_workers(2)
    assert small.gop_run == 0
    asked = LeRobotStreamingDataset(root, read_ahead=2, buffer_mb=1024, gop_run=30)
    asked.use_workers(2)
    assert asked.gop_run == 30  # asked for: kept


def test_read_ahead_counts_the_episodes_a_worker_can_hold_live_not_the_pool(v30_h264):
    """A pool larger than the rank's episodes holds only those: its default read_ahead is that of a pool of their
    number (counting the pool cut 720p blocks to single frames, each a seek). A smaller pool still counts itself."""
    n = LeRobotStreamingDataset(v30_h264).meta.num_episodes
    block = LeRobotStreamingDataset(v30_h264, read_ahead=1).block_bytes(2)
    buffer_mb = (0.75 * n + 0.5) * block / 2**20  # 3/4 of n blocks of 2 rows fit, not many more
    at = {pool: LeRobotStreamingDataset(v30_h264, pool_size=pool, buffer_mb=buffer_mb).read_ahead for pool in (n, 64)}
    assert at[64] == at[n] == 2
    assert LeRobotStreamingDataset(v30_h264, pool_size=64, buffer_mb=buffer_mb, world_size=2, rank=0).read_ahead == 2
    assert LeRobotStreamingDataset(v30_h264, pool_size=n, buffer_mb=buffer_mb / 8).read_ahead == 1


@pytest.mark.parametrize("order", ["forward", "random"])
def test_windows_reach_into_the_pieces_other_workers_read(long_episodes, order):
    """Under 2 workers each episode is cut into pieces read by different workers; a row's window (sarm: 8 steps 1 s
    apart) reaches into the other pieces of its episode, so a worker holds its episodes' whole tables: every row is
    delivered once, each with its window, the frames those of the map loader."""
    from dlbench.loader import DataLoader, LeRobotMapDataset

    root = str(long_episodes)
    ds = LeRobotStreamingDataset(root, mode="sarm", episode_order=order, return_uint8=True, seed=1)
    loader = DataLoader(ds, batch_size=4, num_workers=2, multiprocessing_context=start_method())
    assert ds.pieces == 2
    ref = LeRobotMapDataset(root, mode="sarm", return_uint8=True)
    cam = ref.meta.cameras[0]
    seen = []
    for batch in loader:
        seen += batch["index"].tolist()
        for i, idx in enumerate(batch["index"].tolist()[:1]):
            assert torch.equal(batch[cam][i], ref[idx][cam])
    assert sorted(seen) == list(range(ds.num_frames))


def test_windows_read_forward_by_default_where_enough_episodes_are_live(long_episodes, monkeypatch):
    """An unset episode_order reads windowed rows forward where FORWARD_MIN_LIVE episodes are read (lowered here to
    fit 5), every piece live; single frames, fewer episodes, NVDEC and an explicit order keep theirs. Read forward
    under 2 workers, every row comes once with its window's right frames, and pieces start at unrelated blocks."""
    import dlbench.loader.stream as stream
    from dlbench.loader import DataLoader

    root = str(long_episodes)
    monkeypatch.setattr(stream, "FORWARD_MIN_LIVE", 5)
    ds = LeRobotStreamingDataset(root, mode="sarm", return_uint8=True, seed=2)
    assert ds.episode_order == "forward" and ds.pool_size == ds.meta.num_episodes
    assert ds._identity()["order"]["episode_order"] == "forward"
    for kw in (
        dict(mode="single"),
        dict(mode="sarm", episodes=[0, 1, 2, 3]),
        dict(mode="sarm", episode_order="random"),
    ):
        assert LeRobotStreamingDataset(root, **kw).episode_order == "random", kw
    loader = DataLoader(ds, batch_size=4, num_workers=2, multiprocessing_context=start_method())
    seen = []
    for batch in loader:
        seen += batch["index"].tolist()
        for item in unbatch(batch)[:1]:
            assert check_item(ds, item) is None
    assert sorted(seen) == list(range(ds.num_frames))
    firsts = {}
    for kind, value in ds.shard_events(0, 0):
        if kind == "decode":
            ep = ds._episode_of(value[0][0])
            firsts.setdefault(ep, value[0][0] - int(ds.meta.ep_from[ep]))
    assert any(f > 0 for f in firsts.values()), firsts  # not every live episode from its start
