"""What a configuration will give, from what a calibration measured: pure functions, no I/O (docs/model.md).

A rank's DataLoader is a pipeline of two stages. Its workers build samples in parallel: each busy worker takes
`worker_s` of wall time per sample (its CPU time `worker_cpu_s`, plus waits on storage), so B busy workers deliver
B / worker_s samples/s. The main process takes each batch over and consumes it, one at a time: `main_s` of CPU per
sample (hand-over, the run's frame checks, the consumer's bookkeeping), so it passes at most 1 / main_s. Every
process of the host shares its cores: a sample costs worker_cpu_s + main_s of CPU in all, plus `other_cpu_s` of
the host's other processes (a storage server on this host, its proxies), so the host delivers at most
cores / cpu_s. With every core busy a sample costs more CPU than with one (shared caches, memory bandwidth,
clocks): cpu_s is the one-worker pass's sum plus the extra the full-width pass (a worker per core) measured, in
proportion to the cores busy beside the first (`LoaderCost.cpu_s`). Without workers the one process builds and takes
every sample in turn, at its own measured time per sample (`solo_s`: no shared-memory hand-over, its checks
included): 1 / solo_s.
A training step of step_ms per batch caps a rank at batch_size / step. The smallest of these is the rate, and its
name is the bound:

    rate_rank  = min(B / worker_s, 1 / main_s, batch_size / step)        (workers > 0)
               = min(1 / solo_s, batch_size / step)                      (workers = 0)
    rate_host  = min(sum of rate_rank over the host's ranks, cores / cpu_s(cores))
    frames/s   = mean of rate_host over the hosts x frames_per_sample

B, the busy workers, is every worker for map-style loaders, and for streaming loaders those with a unit of work:
dlbench_stream's virtual shards (`loader.partition`), LeRobot's data files (one shard each); where a rank's shards
do not divide among its workers, those with fewer idle at the end of every pass through them (`worker_share`).
Nothing here is fitted: every term is a measured cost of this dataset on this node (`calibration.LoaderCost`), or a
count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..loader.partition import auto_pieces, auto_virtual_shards, busy_workers, rank_shard_count
from ..run.loaders import LoaderName
from .calibration import LoaderCost

# the names of the bounds, in the order ties are reported
BOUNDS = {
    "workers": "the DataLoader workers at their measured time per sample: more workers would add, cores allowing",
    "cores": "every core is busy (workers and main process together): more workers would not help",
    "main process": "the main process (taking batches over, frame checks): more workers would not help",
    "episodes": "too few units of work (episodes, data files) for the workers: some idle",
    "fetch latency": "the workers wait on storage: more workers (or fetching ahead) overlap the waits",
    "training step": "the training step: the consumer holds each batch for step_ms (the run is fed)",
    "single process": "one process (num_workers 0) builds and consumes every sample in turn",
}
FETCH_BOUND_SHARE = 0.5  # a worker-bound run whose workers wait on storage more than this share is fetch-bound


@dataclass(frozen=True)
class Node:
    """A host: its cores, how many of a run's ranks share it, and (for a what-if) its storage's time to first byte;
    None: the calibrated source's."""

    cores: int
    ranks: int = 1
    ttfb_ms: float | None = None


def unmeasured(cost: LoaderCost, workers: int | str) -> str | None:
    """Why `cost` cannot predict a run of `workers` workers (None: it can)."""
    if workers == 0 and cost.solo_s is None:
        return (
            f"{cost.loader} {cost.mode} at 0 workers: its one-process pass was not measured (calibrate with a run of "
            "0 workers, or `dlbench calibrate --root`)"
        )
    return None


def worker_time(cost: LoaderCost, node: Node, calibrated_ttfb_ms: float | None) -> float:
    """A worker's seconds per sample on `node`: its CPU time plus its waits on storage, which scale with the time
    to first byte of each request (the calibrated source's, or the node's what-if latency)."""
    wait = max(0.0, cost.worker_s - cost.worker_cpu_s)
    if node.ttfb_ms is None or not calibrated_ttfb_ms:
        return cost.worker_s
    return cost.worker_cpu_s + wait * node.ttfb_ms / calibrated_ttfb_ms


@dataclass(frozen=True)
class Prediction:
    frames_per_s_node: float
    samples_per_s_node: float
    bound: str  # a key of BOUNDS
    busy_workers: int  # per rank
    rates: dict  # samples/s per node under each bound that applies (the smallest is the prediction)
    first_batch_s: float
    peak_pss_mb: float
    requests_per_kframe: float | None
    mb_per_kframe: float | None


def busy(loader: str, workers: int, rank: int, ranks: int, episodes: int, data_files: int, fetch_episodes: int) -> int:
    """The DataLoader workers of rank `rank` (of `ranks`) that have work (workers 0: the process itself, 1)."""
    base = LoaderName.parse(loader).base
    if base == "dlbench_stream":
        return busy_workers(stream_shards(episodes, ranks, workers, fetch_episodes), rank, ranks, workers)
    if base == "lerobot_stream":
        # one shard per data file; `datasets` splits ranks by rows where the files do not divide among them, so
        # every rank keeps every shard
        files = max(data_files, 1)
        return busy_workers(files, rank, ranks, workers) if files % ranks == 0 else min(max(workers, 1), files)
    return max(workers, 1)


def stream_shards(episodes: int, ranks: int, workers: int, fetch_episodes: int) -> int:
    """dlbench_stream's virtual shards at its defaults: one a piece, ranks x workers pieces an episode
    (`partition.auto_pieces`), one a fetch group where episodes are fetched whole."""
    pieces = auto_pieces(episodes, ranks, workers, fetch_episodes > 0)
    return auto_virtual_shards(episodes * pieces, max(fetch_episodes, 1))


def worker_share(
    busy_count: int, workers: int, shards: int, samples: int, worker_s: float, run_s: float | None
) -> float:
    """The busy workers of a rank over a run, where its `shards` virtual shards do not divide among its `workers`:
    each worker reads every W-th shard, so some read one more and the rest idle at every pass's end until they are
    done (5 shards on 2 workers: 3 and 2, 1.67 workers busy). A run shorter than the fewer shards take (`samples`
    of the dataset, `worker_s` a sample, `run_s` the run's span; unknown: a long run) sees no pass end."""
    if workers < 1 or shards <= workers:
        return float(busy_count)
    few, extra = divmod(shards, workers)  # `extra` workers read few + 1 shards, the rest few
    if not extra:
        return float(busy_count)
    if not samples or run_s is None:
        return shards / (few + 1)
    per_shard = samples / shards * worker_s  # seconds a worker takes over one shard (episodes of about one length)
    done = 0.0  # shards read over the run, by every worker
    for count, n in ((few + 1, extra), (few, workers - extra)):
        passes, left = divmod(run_s, (few + 1) * per_shard)  # a pass ends when the workers with more are done
        done += n * (passes * count + min(count, left / per_shard))
    return min(float(busy_count), done * per_shard / run_s)


def resolve_auto(workers: int | str, node: Node) -> int:
    """`auto` as the bench job resolves it (`run.spec.resolve_workers`): the host's cores shared by its ranks."""
    return max(1, node.cores // max(node.ranks, 1)) if workers == "auto" else int(workers)


def predict(
    cost: LoaderCost,
    node: Node,
    workers: int | str,
    *,
    batch_size: int,
    ranks: int = 1,
    step_ms: float = 0.0,
    episodes: int,
    samples: int = 0,
    data_files: int = 1,
    fetch_episodes: int = 0,
    calibrated_ttfb_ms: float | None = None,
    run_s: float | None = None,
) -> Prediction:
    """Frames/s per node of a run on `node` (`ranks` ranks in all; `node.ranks` of them on this host) and the
    bound that sets it. Every rank of every host counts with its own busy workers (a rank with fewer shards delivers
    less); the bound named is the slowest host's. `run_s`: how long a rank reads (warm-up and windows), over which
    its processes' opening reads are spread (None: a long run, the steady cost alone)."""
    w = resolve_auto(workers, node)
    per_host = max(node.ranks, 1)
    # ranks fill hosts in order (srun's block distribution); each delivers on its own, so a host's rate is the sum
    # of its ranks', its cores shared by them; frames/s per node is the mean over the hosts
    every = [busy(cost.loader, w, r, ranks, episodes, data_files, fetch_episodes) for r in range(max(ranks, 1))]
    worker_s = worker_time(cost, node, calibrated_ttfb_ms)
    if LoaderName.parse(cost.loader).base == "dlbench_stream":
        shards = stream_shards(episodes, ranks, w, fetch_episodes)
        mine = [rank_shard_count(shards, r, ranks) for r in range(max(ranks, 1))]
        busy_share = [worker_share(b, w, m, samples, worker_s, run_s) for b, m in zip(every, mine)]
    else:
        busy_share = [float(b) for b in every]
    hosts = [busy_share[h : h + per_host] for h in range(0, len(busy_share), per_host)]
    per_node = [host_rates(cost, node, w, here, worker_s, batch_size, step_ms) for here in hosts]
    rates = min(per_node, key=lambda r: min(r.values()))  # the slowest host's terms name the bound
    b = min(every)
    bound = min(rates, key=rates.get)
    samples = sum(min(r.values()) for r in per_node) / len(per_node)
    # the first batch: the workers' start, then one worker builds a whole batch
    first = cost.start_s + batch_size * (cost.solo_s if w == 0 else worker_s)
    # without workers the one process decodes too; each worker past the first adds its own pages, not the pages all
    # forked workers share (PSS splits those among the sharers: their sum stays what the one-worker pass measured)
    extra = cost.worker_pss_mb if cost.worker_uss_mb is None else cost.worker_uss_mb
    pss = cost.main_pss_mb + cost.worker_pss_mb + max(w - 1, 0) * extra
    if w == 0 and cost.solo_pss_mb is not None:  # measured alone: a stream holds more there than its two processes
        pss = cost.solo_pss_mb
    return Prediction(
        frames_per_s_node=samples * cost.frames_per_sample,
        samples_per_s_node=samples,
        bound=bound,
        busy_workers=b,
        rates=rates,
        first_batch_s=first,
        peak_pss_mb=per_host * pss,
        **remote_per_kframe(cost, b if w else 0, samples * cost.frames_per_sample / per_host * (run_s or math.inf)),
    )


def host_rates(
    cost: LoaderCost, node: Node, w: int, busy_ranks: list[float], worker_s: float, batch_size: int, step_ms: float
) -> dict[str, float]:
    """Samples/s one host delivers under each bound that applies: its ranks' busy workers (`busy_ranks`, one
    count a rank) at `worker_s` each, their main processes, the training step, and its cores."""
    n = len(busy_ranks)
    rates: dict[str, float] = {}
    if sum(busy_ranks) == 0:
        rates["episodes"] = 0.0
    elif w == 0:
        solo = cost.solo_s + (worker_s - cost.worker_s)  # the one process waits on storage as a worker does
        rates["single process"] = sum(1 for b in busy_ranks if b) / solo
    else:
        fetch_share = 1.0 - min(1.0, cost.worker_cpu_s / worker_s) if worker_s > 0 else 0.0
        short = any(b < w * 0.97 for b in busy_ranks)  # a worker without work, or idle at its passes' ends
        name = "episodes" if short else ("fetch latency" if fetch_share > FETCH_BOUND_SHARE else "workers")
        rates[name] = sum(busy_ranks) / worker_s
        rates["main process"] = n / cost.main_s if cost.main_s > 0 else math.inf
    if step_ms > 0:
        rates["training step"] = n * batch_size / (step_ms / 1000.0)
    rates["cores"] = node.cores / cost.cpu_s(node.cores)
    return rates


def remote_per_kframe(cost: LoaderCost, workers: int, frames: float) -> dict:
    """Requests and MB per 1,000 frames of a rank that delivers `frames`: the steady cost per frame, plus the
    opening reads spread over them: the main process's once (metadata; LeRobot's map-style loader downloads the
    dataset there) and each reading process's (`workers`: those with work, each opening the files it reads)."""
    readers = max(workers, 1)
    out = {}
    for key, steady, opening, rank_opening in (
        ("requests_per_kframe", cost.requests_per_kframe, cost.open_requests, cost.rank_open_requests),
        ("mb_per_kframe", cost.mb_per_kframe, cost.open_mb, cost.rank_open_mb),
    ):
        once = (opening or 0.0) * readers + (rank_opening or 0.0)
        spread = 1000.0 * once / frames if frames > 0 and math.isfinite(frames) else 0.0
        out[key] = None if steady is None else steady + spread
    return out


def error(predicted: float, measured: float) -> float | None:
    """(predicted - measured) / measured: +0.2 predicted 20% too high."""
    return (predicted - measured) / measured if measured else None


def saturation(curve: list[tuple[int, float]], gain: float = 0.05) -> int | None:
    """The worker count past which one more worker adds under `gain` (a share) of frames/s: where more workers
    stop paying (None: every step still pays)."""
    for (w0, r0), (_, r1) in zip(curve, curve[1:]):
        if r0 > 0 and r1 < r0 * (1 + gain):
            return w0
    return None
