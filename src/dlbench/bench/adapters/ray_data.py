"""ray_data: Ray Data's LeRobot reader (`ray.data.read_lerobot`, Ray 2.60), in the peer environment beside the
LeRobot whose decode function it calls (`decode_video_frames_torchcodec`).

Ray is not a torch Dataset: its users take batches from the Dataset itself (`iter_batches` / `iter_torch_batches`),
and Ray's own tasks do the reading and decoding in its worker processes. So this adapter brings its own batch
source (`RayBatches`) in place of the DataLoader, and the harness measures it as it measures every loader: the
batches the consumer receives, every frame checked, memory with Ray's processes (its object store is their shared
memory) counted.

What a run sets, in Ray's terms: `concurrency` (read tasks at once; unset: Ray's own autoscaling, whatever
`num_workers` says, which is a DataLoader's), `override_num_blocks`, `read_granularity`, `ray_shuffle` (none:
Ray's default order; blocks: `randomize_block_order`; global: `random_shuffle`) and `buffer_size`
(`local_shuffle_buffer_size`; unset: none, as in Ray). Everything else is Ray's default.

A run of one rank starts a Ray instance of its own on the cores this process may use. A run of several ranks reads
on the cluster its job started (`RAY_ADDRESS_ENV`: the head on the job's first node, the others joined), each rank
a driver of its own share of the episodes (every W-th), whose read tasks Ray places anywhere in the cluster.
"""

from __future__ import annotations

import contextlib
import os
import time
import warnings

import numpy as np
import torch

from ...loader.dataset_meta import DatasetMeta
from ..interface import Adapter, lerobot_delta_timestamps, not_importable
from ..measure import SAMPLE_INFO
from ..ray_cluster import RAY_ADDRESS_ENV, RAY_NODES_ENV
from ..remote import S3_ENDPOINT_ENV

JOIN_TIMEOUT_S = 120.0  # a rank waits this long for every node of its job's cluster
# Ray hands numpy views of its object store, read-only: a tensor over them is what `iter_torch_batches` gives too
warnings.filterwarnings("ignore", message="The given NumPy array is not writable")

LOADER = "ray_data"
PACKAGE = "Ray Data 2.60 (ray[data]==2.60.0)"
INFO_WIDTH = 9  # `measure.sample_info`'s fields; Ray tells none but the wait, the rest stay -1


def ray_adapter(run, dmeta: DatasetMeta) -> Adapter:
    """Ray Data over `run.root` in the run's frame mode: this rank's episodes, Ray's knobs as the run sets them."""
    try:
        import ray.data  # noqa: F401
    except ImportError:
        raise not_importable(LOADER, PACKAGE) from None
    start_ray()
    deltas = lerobot_delta_timestamps(dmeta, run.mode, run.delta_timestamps)
    fpi = sum(len(deltas.get(c, [0])) if deltas else 1 for c in dmeta.cameras)
    batches = RayBatches(run, dmeta, deltas)
    roots = node_processes if os.environ.get(RAY_ADDRESS_ENV) and first_on_node(run.rank) else None
    return Adapter(batches, True, fpi, None, None, batches=batches.for_run, memory_roots=roots)


def first_on_node(rank: int) -> bool:
    """Whether this rank is its node's first (srun's local id 0; one host: rank 0): the one whose memory counts
    the node's Ray processes, which every rank on the node shares."""
    local = os.environ.get("SLURM_LOCALID")
    return int(local) == 0 if local is not None else rank == 0


def rank_processes(rank: int) -> list:
    """The Ray processes whose CPU this rank counts as its workers': its own instance's (its children), or on a
    joined cluster the node's (its raylet and GCS and their children, the workers among them), counted by the
    node's first rank only, as its memory is: every rank on the node shares them, and none is a rank's child."""
    import psutil

    if not os.environ.get(RAY_ADDRESS_ENV):
        return psutil.Process().children(recursive=True)
    if not first_on_node(rank):
        return []
    roots = node_processes()
    found = list(roots)
    for p in roots:
        with contextlib.suppress(psutil.Error):
            found.extend(p.children(recursive=True))
    return found


def node_processes() -> list:
    """This node's processes of the job's Ray cluster (its raylet and GCS: the workers and the object store's
    pages are theirs and their children's), which a rank that joined the cluster did not start."""
    import psutil
    import ray

    session = ray._private.worker._global_node.get_session_dir_path()
    found = []
    for p in psutil.process_iter(["name", "cmdline"]):
        if p.info["name"] in ("raylet", "gcs_server") and any(session in arg for arg in p.info["cmdline"] or ()):
            found.append(p)
    return found


def start_ray() -> None:
    """Join the job's cluster (`RAY_ADDRESS_ENV`), or start an instance of this process's own on the cores it may
    use; quiet (no progress bars, no dashboard): the harness's log is the run's."""
    import logging

    import ray

    if ray.is_initialized():
        return
    quiet = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    address = os.environ.get(RAY_ADDRESS_ENV)
    if address:
        from ...loopback import routable_address

        try:
            # this node's own address, said outright: Ray caches a node's address in its temporary directory, which
            # nodes sharing /tmp (the test cluster's namespaces) would read as one another's
            ray.init(address=address, _node_ip_address=routable_address() or "127.0.0.1", **quiet)
        except ConnectionError as e:
            from ...errors import UserError

            raise UserError(f"the job's Ray cluster at {address} cannot be reached ({e}); see its ray.log") from None
        _wait_for_nodes(int(os.environ.get(RAY_NODES_ENV, "1")))
    else:
        ray.init(address="local", num_cpus=len(os.sched_getaffinity(0)), **quiet)
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    context.print_on_execution_start = False
    logging.getLogger("ray.data").setLevel(logging.ERROR)


def _wait_for_nodes(nodes: int) -> None:
    import ray

    deadline = time.time() + JOIN_TIMEOUT_S
    while (alive := sum(n["Alive"] for n in ray.nodes())) < nodes:
        if time.time() > deadline:
            from ...errors import UserError

            raise UserError(
                f"the job's Ray cluster has {alive} of {nodes} nodes after {JOIN_TIMEOUT_S:.0f} s; see the run's "
                f"ray.log"
            )
        time.sleep(0.5)


def rank_episodes(dmeta: DatasetMeta, rank: int, world: int) -> list[int] | None:
    """This rank's episodes: every `world`-th, from its rank (None: one rank reads them all, as Ray's users do)."""
    if world <= 1:
        return None
    ids = [int(e) for e in dmeta.episodes["episode_index"]]
    return ids[rank::world]


def storage_options(root: str) -> dict | None:
    """fsspec options for an s3:// root on an endpoint of its own (the rank's metering proxy, else the source's),
    as a user of such a store passes them: Ray resolves s3:// with pyarrow's client otherwise, which knows AWS only.
    Credentials come from the environment (s3fs reads AWS_ACCESS_KEY_ID ...)."""
    endpoint = os.environ.get(S3_ENDPOINT_ENV)
    return {"endpoint_url": endpoint} if root.startswith("s3://") and endpoint else None


class RayBatches:
    """Ray Data's batches for one rank, one pass at a time (`set_epoch` reshuffles the next), as its users iterate a
    Dataset: `iter_batches` in numpy, each column then made a tensor as `iter_torch_batches` makes it (frames moved
    from Ray's HWC to the CHW of LeRobot's loaders). Stands in for the DataLoader in `measure.make_dataloader`."""

    sampler = batch_sampler = None  # what `measure.Epochs` asks of a DataLoader
    start_method = None  # Ray starts its own processes

    def __init__(self, run, dmeta: DatasetMeta, deltas: dict | None):
        self.run, self.deltas, self.epoch = run, deltas, 0
        self.current: _Batches | None = None  # the pass being read
        self.cameras = set(dmeta.cameras)
        self.episodes = rank_episodes(dmeta, run.rank, run.world_size)
        if self.episodes == []:
            from ...errors import UserError

            raise UserError(
                f"rank {run.rank} of {run.world_size}: ray_data has no episode to read ({dmeta.num_episodes} "
                f"episodes); use fewer ranks"
            )

    def for_run(self, run, pin: bool) -> RayBatches:
        return self

    def close(self) -> None:
        """Stop the pass's executor: left mid-epoch it keeps Ray reading until the process exits. Ray itself is
        shut down at the process's exit, once its threads are done (shut down here, a thread still winding down
        finds the worker gone and ends the process with an error)."""
        if self.current is not None:
            self.current.close()
            self.current = None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def dataset(self):
        """The Ray Dataset of this pass: `read_lerobot` with the run's knobs, then its shuffle."""
        import ray.data

        run = self.run
        # unset: Ray's own autoscaling of read tasks (num_workers is a DataLoader's; Ray has none)
        knobs = dict(concurrency=run.concurrency or None, override_num_blocks=run.override_num_blocks)
        if run.read_granularity:
            knobs["read_granularity"] = run.read_granularity
        ds = ray.data.read_lerobot(
            str(run.root),
            episodes=self.episodes,
            delta_timestamps=self.deltas,
            storage_options=storage_options(str(run.root)),
            **knobs,
        )
        seed = run.seed + self.epoch
        if run.ray_shuffle == "blocks":
            ds = ds.randomize_block_order(seed=seed)
        elif run.ray_shuffle == "global":
            ds = ds.random_shuffle(seed=seed)
        return ds

    def __iter__(self):
        run = self.run
        local = run.shuffle_buffer or None
        it = self.dataset().iter_batches(
            batch_size=run.batch_size,
            batch_format="numpy",
            drop_last=True,
            local_shuffle_buffer_size=local,
            local_shuffle_seed=run.seed + self.epoch if local else None,
        )
        if self.current is not None:
            self.current.close()
        self.current = _Batches(iter(it), self.cameras, run.rank)
        return self.current


class _Batches:
    """One pass's batches, each as tensors with its items' infos (latency: each item's share of the wait)."""

    def __init__(self, it, cameras: set[str], rank: int):
        self.it, self.cameras, self.rank = it, cameras, rank

    def __iter__(self):
        return self

    def close(self) -> None:
        """Stop Ray's executor of this pass (a generator's close runs its cleanup)."""
        close = getattr(self.it, "close", None)
        if close is not None:
            close()

    def __next__(self) -> dict:
        t0 = time.perf_counter()
        batch = next(self.it)
        out = {key: self._tensor(key, col) for key, col in batch.items()}
        n = len(next(iter(batch.values())))
        info = np.full((n, INFO_WIDTH), -1.0)
        info[:, 0] = (time.perf_counter() - t0) * 1000.0 / max(1, n)
        out[SAMPLE_INFO] = info
        return out

    def _tensor(self, key: str, col: np.ndarray):
        if col.dtype == object:  # per-row arrays (frames, vectors, pad masks) are stacked; strings stay a list
            if not isinstance(col[0], np.ndarray):
                return list(col)
            col = np.stack(col)
        t = torch.from_numpy(np.ascontiguousarray(col))
        return t.movedim(-1, -3) if key in self.cameras else t  # HWC -> CHW, as LeRobot's loaders hand frames

    @property
    def worker_pids(self) -> list[int]:
        """Ray's processes this rank counts (`rank_processes`); listed each window: Ray starts workers as it goes."""
        return [p.pid for p in rank_processes(self.rank)]
