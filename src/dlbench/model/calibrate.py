"""`dlbench calibrate`: what one dataset costs to load from one source on this host, per loader and frame mode,
measured in a few seconds each (`model.Calibration`; the model in `model.equations` reads it).

Each loader runs short DataLoader passes, through the same launcher as a bench run (LeRobot's and Lance's loaders in
their environment) and with the run's own frame checks: one with one worker, where the worker sets the pace, so its
time per sample, its CPU time, the main process's hand-over and checks, the first batch and the memory of each
process are read off the pass's record (measured twice, the other passes between, and pooled); on a host of
several cores, one with a worker per core (its warm-up as many times longer, so each worker has built as much), where
every core is busy and a sample's CPU (every process of the host) is what the cores bound divides them by; and,
where a run of the matrix has no workers, one in a single process (measured twice and pooled too; its memory is
its own).
The checks are measured where runs pay them: on frames a worker handed over through shared memory they cost the main
process up to ten times what they cost on frames it decoded itself (first touches of the ring's pages, caches the
worker filled on another core).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from ..bench import record as recordmod
from ..bench.launch import launch, needs_peer, rank_command, rank_file
from ..cli.common import STAMPED, say
from ..errors import UserError
from ..loader.dataset_meta import DatasetMeta
from ..peer import CREATE_COMMAND, peer_python
from ..run import spec as runspec
from ..run.loaders import OWN_WORKERS
from ..run.spec import RunSpec, resolve_workers
from .calibration import Calibration, LoaderCost, host_cores

# the calibration passes: a short window after the run's own warm-up (a stream's cost per sample depends on how far
# into its episodes it is), the run's checks, nothing else; `solo` in one process, `worker` with one DataLoader worker
FORWARD_POOL = 32  # = loader.stream.FORWARD_POOL (not imported: this module stays torch-free)
PASS = dict(
    duration_s=1.5,
    repeats=1,
    num_batches=None,
    min_batches=0,  # a pass measures speed; its batches are not judged
    probe_samples=0,
    step_ms=0,
    ranks=1,
    nodes=1,
    resume_check=False,
    decode_device="cpu",
    on_unavailable="skip",
)
MAX_WARMUP_S = 3.0
# a loader that sizes its own workers delivers in bursts (Ray Data: an epoch read ahead in about 1 s, then 3-5 s to
# restart the next): its pass takes this many windows, whose rate is what they delivered in all (`bench.rates`),
# not one window's, which a burst or a restart fills
OWN_WORKERS_WINDOWS = 3
# a stream of windows costs more per sample as its readers get further into their episodes (a window's frames before
# an episode's start are one frame, decoded once), so where its readers are still in their first episodes after the
# run's warm-up, its passes are measured halfway through the run's windows
MAX_STREAM_WARMUP_S = 6.0
STEADY_MARGIN = 1.25  # a stream's second pass warms up this much longer than its readers need at the first's rate
MIN_BATCHES = 3  # a window with fewer is measured again, long enough for them (slow sets: 720p sarm)
MAX_WINDOW_S = 8.0
MAX_FULL_WARMUP_S = 12.0  # the full-width pass's warm-up: a 16-core node's is not 16 times the run's
WORKER_BOUND_WAIT = 0.5  # the pass was worker-bound when the main process waited on data this share of the time


def cores() -> int:
    """The cores this job may use (SLURM's allocation where there is one)."""
    return host_cores()


def pass_warmup_s(run: RunSpec) -> float:
    """The warm-up before a pass's window: the run's own, or for a stream of windows (a mode of several frames per
    camera), up to the middle of the run's windows, where its cost per sample is the average of theirs."""
    if run.loader_name.kind != "stream" or run.mode == "single":
        return min(run.warmup_s, MAX_WARMUP_S)
    middle = run.warmup_s + runspec.windows_s(run) / 2 - PASS["duration_s"] / 2
    return min(max(run.warmup_s, middle), MAX_STREAM_WARMUP_S)


def steady_samples(run: RunSpec, episode_samples: float) -> float:
    """The samples a stream delivers before its readers have each been through a whole episode; from then on the mix
    of their positions in episodes, and so the cost per sample, holds: dlbench_stream's pool of readers, an episode
    each; LeRobot's one shard at a time, behind its shuffle buffer."""
    if run.loader_name.base == "dlbench_stream":
        # unset in random order every piece is live from the start; the readers' mix settles as the 32 of the
        # forward default's would (an upper bound: the warm-up it sizes is capped, MAX_STREAM_WARMUP_S)
        return (run.pool_size or FORWARD_POOL) * episode_samples
    return episode_samples + run.shuffle_buffer


def full_warmup_s(warmup_s: float, width: int) -> float:
    """The full-width pass's warm-up: its `width` workers share what the host builds, so each has built as many
    samples as the one-worker pass's worker had after `warmup_s` only after about `width` times as long (a worker's
    decoder cache warms with the samples it builds: at 2 workers on a 360x640 AV1 set, a worker's CPU per sample
    was 51-56 ms after 1 s, 40-46 after 2 s, the one-worker pass's 41-43 after 1 s); at most MAX_FULL_WARMUP_S."""
    return max(min(warmup_s * width, MAX_FULL_WARMUP_S), warmup_s)


def planned_workers(run: RunSpec) -> int | None:
    """The workers a stream's passes plan their reading for: the run's. A stream cuts its episodes into a piece per
    worker and reads GOP runs from 2 workers up (`LeRobotStreamingDataset.use_workers`), so a pass that planned for
    its own one worker would read otherwise than each worker of the run: on a 20 ms bucket, 128 KB blocks at random
    at 25 samples/s a worker against 300 (predictions 95% low)."""
    if run.loader_name.base != "dlbench_stream":
        return None
    return resolve_workers(run.num_workers, run.ranks_per_node)


def one_pass(run: RunSpec, workdir: Path, workers: int, warmup_s: float | None = None) -> dict | str:
    """One calibration pass of `run`'s loader with `workers` DataLoader workers (after `warmup_s`, default
    `pass_warmup_s`): its rank record's metrics, or a string saying why the loader could not run here."""
    out = workdir / f"{run.loader}-{run.mode}-w{workers}"
    warmup_s = pass_warmup_s(run) if warmup_s is None else warmup_s
    spec = replace(run, **PASS, num_workers=workers, warmup_s=warmup_s, plan_workers=planned_workers(run))
    if run.loader_name.base in OWN_WORKERS:
        spec = replace(spec, repeats=OWN_WORKERS_WINDOWS)
    t0 = time.perf_counter()
    for _ in range(2):
        shutil.rmtree(out, ignore_errors=True)
        try:
            manifest = launch(spec.with_id(), out)
        except Exception as e:  # the loader's own failure: its bench runs will report it; the rest is calibrated
            last = (str(e).strip().splitlines() or [""])[-1]
            # a worker's error arrives as its traceback, whose last line names the type already
            named = last if last.startswith(f"{type(e).__name__}: ") else f"{type(e).__name__}: {last}"
            return f"{run.loader} {run.mode}: {named}"
        rec = recordmod.read(rank_file(out, 0, 1))
        if manifest["status"] not in ("ok", "unverified"):
            return f"{run.loader} {run.mode}: {rec.get('reason') or manifest['status']}"
        m = rec["metrics"]
        # the warm-up as it ran (a stream from remote storage warms up at least as long as its first batch took)
        warm = m["wallclock_s"] - m["first_batch_latency_s"] - (m["window_end_unix"] - m["window_start_unix"])
        say(f"calibrate: {run.loader} {run.mode}, {workers} worker(s): first batch in "
              f"{m['first_batch_latency_s']:.1f} s, {m['samples']} samples in {windows_said(spec)} "
              f"after {warm:.1f} s; {time.perf_counter() - t0:.1f} s in all")  # fmt: skip
        if m["samples"] >= MIN_BATCHES * run.batch_size or spec.duration_s >= MAX_WINDOW_S:
            return m
        spec = replace(spec, duration_s=min(MAX_WINDOW_S, 1.3 * MIN_BATCHES * run.batch_size / m["samples_per_s"]))
    return m


def windows_said(spec: RunSpec) -> str:
    return (
        f"a {spec.duration_s:.1f} s window"
        if spec.repeats == 1
        else f"{spec.repeats} windows of {spec.duration_s:.1f} s"
    )


def worker_pass(run: RunSpec, workdir: Path, samples: int, episodes: int) -> tuple[dict | str, float]:
    """The one-worker pass of `run` and the warm-up it needed (`samples`, `episodes`: the dataset's). A stream of
    windows is measured first after the run's own warm-up. Where its readers had not yet been through an episode
    each by then (its cost per sample still changing) and the run would not go through the dataset once at that
    pass's rate (a run that does averages the cost over its episodes, as the first pass's start did on every set of
    under 2,600 samples), again: once the readers have, or halfway through the run's windows if that is sooner
    (`pass_warmup_s`)."""
    short, long = min(run.warmup_s, MAX_WARMUP_S), pass_warmup_s(run)
    if long <= short:
        return one_pass(run, workdir, 1, short), short
    m = one_pass(run, workdir, 1, short)
    steady = steady_samples(run, samples / max(episodes, 1))
    span = run.warmup_s + runspec.windows_s(run)
    if isinstance(m, str) or m["warmup_samples"] >= steady or samples / m["samples_per_s"] <= span:
        return m, short
    warmup = min(long, max(short, STEADY_MARGIN * steady / m["samples_per_s"]))
    return one_pass(run, workdir, 1, warmup), warmup


def loader_costs(
    runs: list[RunSpec],
    workdir: Path,
    samples: int,
    episodes: int,
    contention: Calibration | None = None,
    once: bool = False,
) -> list[LoaderCost | str]:
    """The passes of each run's loader and mode, as its costs per sample (a string where it could not run): the
    one-worker pass, the full-width pass unless `contention` (`usable_contention`) has the pair, and the one-process
    pass where the run has no workers (`num_workers` 0; nothing else reads it). `once`: the one-worker pass is not
    measured again for drift (`dlbench tune`, which ranks by the calibration and measures what it answers).
    Every one-worker pass comes first: its worker forks from this process, which must not hold decoders of a loader
    yet (LeRobot keeps them in one cache per process, which a forked worker would share and break). Loaders that
    size their own workers (`OWN_WORKERS`: Ray Data, Daft) come after every other loader's passes, as one pass
    that is their full-width pass too: the runtime they start here (Ray's processes, Daft's threads) outlives the
    pass, and would share the cores with any pass measured after it."""
    own = [run for run in runs if run.loader_name.base in OWN_WORKERS]
    forked = [run for run in runs if run.loader_name.base not in OWN_WORKERS]
    found = dict(zip(map(id, forked), _forked_costs(forked, workdir, samples, episodes, contention, once)))
    for run in own:
        m, warmup = worker_pass(run, workdir, samples, episodes)
        m = m if once else repeated(run, workdir, m, warmup)
        found[id(run)] = m if isinstance(m, str) else _cost(run, None, m, full=m)
    return [found[id(run)] for run in runs]


def _forked_costs(
    runs: list[RunSpec], workdir: Path, samples: int, episodes: int, contention: Calibration | None, once: bool
) -> list[LoaderCost | str]:
    """`loader_costs` of loaders whose DataLoader workers fork from this process."""
    passes = [worker_pass(run, workdir, samples, episodes) for run in runs]
    width = cores()
    known = {(c.loader, c.mode): c for c in contention.costs if c.full_cpu_s is not None} if contention else {}
    fulls = [
        one_pass(run, workdir, width, full_warmup_s(warmup, width))
        if width > 1 and not isinstance(m, str) and (run.loader, run.mode) not in known
        else None
        for run, (m, warmup) in zip(runs, passes)
    ]
    # the one-worker pass again, the other passes later: a host's speed moves by 10-20% over minutes, and a single
    # pass that caught it moving would set every prediction of its loader (docs/model.md, "Drift")
    forked = [m if once else repeated(run, workdir, m, warmup) for run, (m, warmup) in zip(runs, passes)]
    for run, m in zip(runs, forked):
        if isinstance(m, dict) and m.get("repeat_diff") is not None:
            how = "the median of three" if m["repeat_passes"] == 3 else "averaged"
            say(f"calibrate: {run.loader} {run.mode}: its one-worker passes {m['repeat_diff']:.0%} apart in time "
                  f"per sample; {how}")  # fmt: skip
    solos = [
        repeated(run, workdir, one_pass(run, workdir, 0, warmup), warmup, workers=0)
        if run.num_workers == 0 and not isinstance(m, str)
        else None
        for run, (m, warmup) in zip(runs, passes)
    ]
    costs = [
        next((p for p in (m, full, solo) if isinstance(p, str)), None) or _cost(run, solo, m, full)
        for run, solo, m, full in zip(runs, solos, forked, fulls)
    ]
    return [c if isinstance(c, str) or c.full_cpu_s is not None else with_contention(c, known) for c in costs]


def usable_contention(path: str | Path | None) -> Calibration | None:
    """The calibration (`path`, a local source's of the same dataset) whose full-width passes a remote source's
    calibration reuses, or None where it was made on another host or another number of cores (said in one line)."""
    if not path:
        return None
    ref = Calibration.read(path)
    if (ref.host, ref.cores) != (socket.gethostname(), cores()):
        say(f"calibrate: {path} was made on {ref.host} ({ref.cores} cores): full-width passes measured here")
        return None
    return ref


def with_contention(cost: LoaderCost, known: dict) -> LoaderCost:
    """`cost` with the full-width pass's CPU taken from a local calibration of its loader and mode on this host:
    what a sample costs on top of the one-worker pass with every core busy (shared caches, memory bandwidth, clocks)
    is the decode's and the hand-over's, which do not depend on where the bytes come from, while the one-worker pass
    measured here carries the source's own CPU (requests, a loopback server): the full-width CPU is the local
    one's plus that. A source reads through more code than the disk, never less: where its one-worker pass measured
    below the local one's (two short passes on a noisy host), the source adds nothing, rather than a negative cost
    that would make every prediction of it negative. A pair the reference lacks: unchanged."""
    ref = known.get((cost.loader, cost.mode))
    if ref is None:
        return cost
    source_cpu = max(0.0, cost.cpu_s(1) - ref.cpu_s(1))
    note = "; ".join(filter(None, [cost.note, "full-width contention from the local calibration"]))
    return replace(cost, full_cpu_s=ref.full_cpu_s + source_cpu, full_cores=ref.full_cores, note=note)


# a pass's figures per sample (or share of its time), which repeated passes of one loader pool
PER_SAMPLE = ("worker_cpu_ms_per_sample", "main_cpu_ms_per_sample", "check_ms_per_sample", "other_cpu_ms_per_sample",
              "worker_core_wait_ms_per_sample", "data_wait_frac")  # fmt: skip
REPEAT_AGREE = 0.25  # two one-worker passes further apart than this (a share of their mean): a third settles it


def repeated(run: RunSpec, workdir: Path, first: dict | str, warmup: float, workers: int = 1) -> dict | str:
    """A pass with `workers` workers (one; 0: the one process) measured again (and a third time where the two
    disagree by over REPEAT_AGREE), pooled."""
    if isinstance(first, str):
        return first
    again = one_pass(run, workdir, workers, warmup)
    two = pooled(first, again)
    if (two.get("repeat_diff") or 0.0) <= REPEAT_AGREE:
        return two
    return pooled(first, again, one_pass(run, workdir, workers, warmup))


def pooled(first: dict, *more: dict | str) -> dict:
    """One-worker passes of a loader as one: two averaged (time per sample, not rate), three by the median pass's
    costs (one pass caught apart from the others drops out); the first's start, memory and reads either way.
    `repeat_diff`: how far apart their times per sample were (largest less smallest, a share of the mean);
    `repeat_passes`: how many pooled. Passes that could not run (strings) are left out."""
    passes = [first, *(p for p in more if not isinstance(p, str))]
    if len(passes) == 1:
        return first
    times = [1.0 / p["samples_per_s"] for p in passes]
    out = dict(first)
    if len(passes) == 2:
        for key in PER_SAMPLE:
            if all(p.get(key) is not None for p in passes):
                out[key] = sum(p[key] for p in passes) / 2
        out["samples_per_s"] = 2.0 / sum(times)
    else:
        middle = passes[sorted(range(len(passes)), key=times.__getitem__)[len(passes) // 2]]
        out.update({key: middle[key] for key in (*PER_SAMPLE, "samples_per_s") if middle.get(key) is not None})
    out["repeat_diff"] = (max(times) - min(times)) / (sum(times) / len(times))
    out["repeat_passes"] = len(passes)
    return out


def _cost(run: RunSpec, solo: dict | None, m: dict, full: dict | None = None) -> LoaderCost:
    """A loader's costs per sample from its one-worker (`m`), full-width (`full`) and one-process (`solo`) passes'
    metrics (None: not measured)."""
    check_s = m["check_ms_per_sample"] / 1000
    per_sample = 1.0 / m["samples_per_s"]
    worker_cpu = (m["worker_cpu_ms_per_sample"] or 0.0) / 1000
    worker_bound = m["data_wait_frac"] >= WORKER_BOUND_WAIT
    # the worker's own time per sample: not its waits for a core (on a job of one core it shares it with the main
    # process; a host with more cores gives it one of its own). Main-bound, the worker idled between batches: its
    # CPU time is what is known of its time per sample
    core_wait = (m.get("worker_core_wait_ms_per_sample") or 0.0) / 1000
    worker_s = max(per_sample - core_wait, worker_cpu) if worker_bound else max(worker_cpu, 1e-9)
    workers_pss = m.get("peak_pss_workers_mb") or 0.0
    return LoaderCost(
        loader=run.loader,
        mode=run.mode,
        batch_size=run.batch_size,
        frames_per_sample=m["frames_per_sample"],
        solo_s=1.0 / solo["samples_per_s"] if solo else None,
        worker_s=worker_s,
        worker_cpu_s=worker_cpu,  # more than worker_s where a worker decodes on several threads (LeRobot's)
        handover_s=max(0.0, m["main_cpu_ms_per_sample"] / 1000 - check_s),
        check_s=check_s,
        solo_check_s=solo["check_ms_per_sample"] / 1000 if solo else None,
        start_s=max(0.0, m["first_batch_latency_s"] - run.batch_size * worker_s),
        main_pss_mb=m["peak_pss_mb"] - workers_pss,
        worker_pss_mb=workers_pss,
        **remote_cost(m),
        other_cpu_s=(m.get("other_cpu_ms_per_sample") or 0.0) / 1000,
        worker_uss_mb=m.get("peak_uss_workers_mb"),
        worker_bound=worker_bound,
        full_cpu_s=None if full is None else host_cpu_ms(full) / 1000,
        full_cores=cores() if full else 0,
        repeat_diff=m.get("repeat_diff"),
        solo_pss_mb=solo["peak_pss_mb"] if solo else None,
        note="" if worker_bound else "the main process set the pace: worker time is its CPU time",
    )


def host_cpu_ms(m: dict) -> float:
    """The CPU per sample of every process of the host over a pass's window (its own, its workers', the rest)."""
    parts = ("main_cpu_ms_per_sample", "worker_cpu_ms_per_sample", "other_cpu_ms_per_sample")
    return sum(m.get(k) or 0.0 for k in parts)


def remote_cost(m: dict) -> dict:
    """A pass's remote reads split into a cost per frame (its steady window's) and fixed costs of opening: the main
    process's, before any worker started (once a rank), and the rest, its reading process's (once each): a run
    reads those once, over many more frames."""
    frames = m["samples"] * m["frames_per_sample"]
    if m.get("remote_requests") is None or not frames or m.get("remote_requests_window") is None:
        return {
            "requests_per_kframe": m.get("remote_requests_per_kframe"),
            "mb_per_kframe": m.get("remote_mb_per_kframe"),
        }
    per_frame = m["remote_requests_window"] / frames, m["remote_mb_window"] / frames
    total = m["remote_requests"], m["remote_bytes_read"] / 1e6
    main = m.get("remote_requests_main") or 0.0, m.get("remote_mb_main") or 0.0
    opening = [max(0.0, t - f * m["remote_frames"] - o) for t, f, o in zip(total, per_frame, main)]
    return {
        "requests_per_kframe": per_frame[0] * 1000,
        "mb_per_kframe": per_frame[1] * 1000,
        "open_requests": opening[0],
        "open_mb": opening[1],
        "rank_open_requests": main[0],
        "rank_open_mb": main[1],
    }


def ttfb_ms(dmeta: DatasetMeta, reads: int = 5) -> float | None:
    """The median time to the first byte of a small ranged read of the dataset's first video file, in ms (None on
    local disk, where the page cache answers)."""
    import fsspec

    from ..format.paths import is_remote

    if not dmeta.cameras or not is_remote(dmeta.data_root):
        return None
    fs, path = fsspec.core.url_to_fs(dmeta.video_url(dmeta.cameras[0], 0))
    size = fs.size(path)
    times = []
    for k in range(reads):
        t0 = time.perf_counter()
        fs.cat_file(path, start=(k * 7919) % max(size - 1, 1), end=(k * 7919) % max(size - 1, 1) + 1)
        times.append(time.perf_counter() - t0)
    return float(np.median(times) * 1000)


def calibrate(
    runs: list[RunSpec],
    dataset: str,
    source: str,
    out: str | Path,
    contention: str | Path | None = None,
    once: bool = False,
) -> Calibration:
    """Calibrate each (loader, mode) of `runs` (runs of one dataset on one source; the first run of each pair stands
    for it) and write the record to `out`; with `contention` (a local calibration of the dataset on this host), the
    full-width passes of the pairs it has are taken from it (`with_contention`); `once`: no pass measured again for
    drift (`loader_costs`). The pairs of loaders that run in
    another environment (LeRobot's, Lance's) are measured by one process there (`dlbench calibrate` again). Loaders
    that cannot run here are left out and named in the record's note."""
    from ..format.paths import is_remote
    from ..sources import apply_env, check_reachable

    t0 = time.perf_counter()
    first = runs[0]
    apply_env(first.source_spec)
    try:
        if is_remote(first.root):
            check_reachable(first.root)  # one line naming the URL and what to check, as bench jobs say it
        dmeta = DatasetMeta.load(first.root, data_files_root=first.data_files_root)
    except UserError as e:
        if any(run.on_unreachable != "skip" for run in runs):
            raise
        record = Calibration(dataset, source, socket.gethostname(), cores(), 0, 0, None, 0.0, note=f"not read: {e}")
        record.write(out)
        return record
    pairs: dict[tuple, RunSpec] = {}
    for run in runs:  # a pair's run without workers stands for it, if it has one: its one-process pass is measured
        if (run.loader, run.mode) not in pairs or run.num_workers == 0:
            pairs[(run.loader, run.mode)] = run
    here = [run for run in pairs.values() if not needs_peer(run.loader)]
    elsewhere: dict[str, list[RunSpec]] = {}
    for run in pairs.values():
        if needs_peer(run.loader):
            elsewhere.setdefault(run.loader_name.peer or "", []).append(run)
    costs, missing = [], []
    reference = usable_contention(contention)
    with tempfile.TemporaryDirectory(prefix="dlbench-calibrate-") as tmp:
        for cost in loader_costs(here, Path(tmp), dmeta.num_frames, dmeta.num_episodes, reference, once):
            (missing if isinstance(cost, str) else costs).append(cost)
        for name, group in elsewhere.items():
            peer_dir = Path(tmp) / f"peer-{name or 'default'}"
            found = _in_peer_env(group, peer_dir, dataset, source, contention if reference else None, once)
            costs += found.costs
            missing += [found.note] if found.note else []
    for problem in missing:
        say(f"calibrate: left out: {problem}")
    record = Calibration(
        dataset=dataset,
        source=source,
        host=socket.gethostname(),
        cores=cores(),
        episodes=dmeta.num_episodes,
        samples=dmeta.num_frames,
        data_files=len(dmeta.data_files()),
        ttfb_ms=ttfb_ms(dmeta),
        seconds=time.perf_counter() - t0,
        costs=costs,
        note="; ".join(missing),
    )
    record.write(out)
    return record


def _in_peer_env(
    runs: list[RunSpec],
    workdir: Path,
    dataset: str,
    source: str,
    contention: str | Path | None = None,
    once: bool = False,
) -> Calibration:
    """The costs of loaders that run in a peer environment, measured by one `dlbench calibrate` there; a
    calibration with only a note where that environment is missing."""
    name = runs[0].loader_name.peer
    if peer_python(name) is None:
        why = f"{', '.join(sorted({r.loader for r in runs}))}: no peer environment (create it: {CREATE_COMMAND})"
        return Calibration(dataset, source, socket.gethostname(), cores(), 0, 0, None, 0.0, note=why)
    workdir.mkdir(parents=True)
    specs = []
    for k, run in enumerate(runs):
        runspec.write(run, workdir / f"spec{k}.json")
        specs += ["--spec", str(workdir / f"spec{k}.json")]
    cmd, env = rank_command(runs[0].loader, runs[0].root)
    out = workdir / "calibration.json"
    args = [*cmd[: cmd.index("bench-rank")], "calibrate", *specs, "--dataset", dataset, "--source", source]
    args += ["--contention", str(Path(contention).resolve())] if contention else []
    args += ["--once"] if once else []
    proc = subprocess.run([*args, "--out", str(out)], env=env, capture_output=True, text=True)
    for line in proc.stdout.splitlines():  # its passes, stamped with its own times (what it left out: below)
        said = STAMPED.match(line)
        if said and said.group(1).startswith("calibrate: ") and not said.group(1).startswith("calibrate: left out: "):
            print(line, flush=True)
    if proc.returncode:
        last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        why = f"{', '.join(sorted({r.loader for r in runs}))}: calibrating in the peer environment failed: {last}"
        return Calibration(dataset, source, socket.gethostname(), cores(), 0, 0, None, 0.0, note=why)
    return Calibration.read(out)
