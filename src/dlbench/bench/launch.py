"""Launching a bench run: its W ranks at the same time, each writing `rank{r}of{W}.json` (+ .csv, .samples.npy).

`launch()` starts the ranks with `srun` inside a SLURM allocation that has the tasks for them, and as local
processes otherwise (RANK / WORLD_SIZE set for each). Ranks wait for each other at a file barrier after warm-up,
so their steady windows overlap. When all ranks have finished, `launch()` checks that every rank file exists and
that all ranks ran the same configuration, then writes `run.json`, the run's manifest. LeRobot loaders run in the
peer environment.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from .. import atomic
from ..errors import UserError
from ..format.paths import is_remote
from ..peer import CREATE_COMMAND, DEFAULT_PEER, REPO_ROOT, named_peer_ready, named_peer_venv, peer_python, require_peer
from ..run.loaders import LANCE_LOADERS, PEER_LOADERS, PEER_PACKAGE, RAY_LOADERS, LoaderName
from ..run.spec import RunSpec, resolve_workers
from . import record as recordmod
from .ray_cluster import RAY_ADDRESS_ENV, ray_cluster
from .remote import metered

IN_PEER_ENV = "DLBENCH_IN_PEER"
PROGRESS_ENV = "DLBENCH_PROGRESS"  # set by `dlbench bench-run` without -q: its ranks say each window as it ends
RUN_MANIFEST = "run.json"
BARRIER_TIMEOUT_S = 600.0
HUB_CACHE = ".hub-cache"  # a run's own HF_HOME (LeRobot downloads there), removed when the run ends


def rank_file(out_dir: str | Path, rank: int, world: int, suffix: str = ".json") -> Path:
    return Path(out_dir) / f"rank{rank}of{world}{suffix}"


def config_digest(config: dict) -> str:
    """What ranks must agree on: the configuration without rank-specific fields."""
    shared = {k: v for k, v in config.items() if k not in ("rank",)}
    return hashlib.sha256(json.dumps(shared, sort_keys=True).encode()).hexdigest()[:16]


def needs_peer(loader: str) -> bool:
    """LeRobot's loaders, lance_map and ray_data run in the peer environment unless their package is importable
    right here; `lerobot_map@NAME` runs in .peers/NAME unless this is that environment."""
    parsed = LoaderName.parse(loader)
    loader, name = parsed.base, parsed.peer
    if name:
        return Path(sys.prefix).resolve() != named_peer_venv(name).resolve()
    return loader in PEER_LOADERS and importlib.util.find_spec(PEER_PACKAGE[loader]) is None


def _peer_env(root: str) -> dict:
    env = {
        **os.environ,
        IN_PEER_ENV: "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT / "src"), os.environ.get("PYTHONPATH")])),
    }
    if not str(root).startswith("hf://"):  # a local dataset: LeRobot must not reach for the Hub
        env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    return env


def rank_command(loader: str, root: str = "") -> tuple[list[str], dict]:
    """The interpreter command for one rank (`... -m dlbench bench-rank`) and its environment."""
    if needs_peer(loader):
        name = LoaderName.parse(loader).peer
        if os.environ.get(IN_PEER_ENV) and not name:
            raise UserError("LeRobot is not importable in the peer environment; recreate it with scripts/peer-env.sh")
        return [str(require_peer(name)), "-m", "dlbench", "-q", "bench-rank"], _peer_env(root)
    return [sys.executable, "-m", "dlbench", "-q", "bench-rank"], dict(os.environ)


class FileBarrier:
    """All ranks write `<dir>/.barrier/<rank>` (their arrival time) and wait until W files exist (works across nodes
    on a shared FS); then every rank starts at the same instant, the last arrival plus `START_DELAY_S`, so their
    measuring windows begin together however late each one noticed the last file (clocks of a cluster's nodes are
    assumed synchronised, as NTP keeps them to a millisecond or so). A rank that fails before it arrives says so
    (`abort`), and the ranks waiting stop at once with its message instead of waiting out the timeout."""

    START_DELAY_S = 0.1

    def __init__(self, out_dir: str | Path, rank: int, world: int, timeout_s: float = BARRIER_TIMEOUT_S):
        self.dir, self.rank, self.world, self.timeout_s = Path(out_dir) / ".barrier", rank, world, timeout_s

    def _arrivals(self) -> list[float]:
        return [float(p.read_text()) for p in self.dir.iterdir() if p.name.isdigit()]

    def __call__(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        atomic.write_text(self.dir / str(self.rank), repr(time.time()))  # atomic: others never read a partial time
        deadline = time.time() + self.timeout_s
        while len(arrivals := self._arrivals()) < self.world:
            failed = sorted(self.dir.glob("failed-*"))
            if failed:
                raise UserError(f"rank {self.rank}: stopped: {failed[0].read_text()}")
            if time.time() > deadline:
                raise UserError(
                    f"rank {self.rank}: the other ranks did not reach the start barrier in "
                    f"{self.timeout_s:.0f} s ({self.dir}); check their logs"
                )
            time.sleep(0.005)
        time.sleep(max(0.0, max(arrivals) + self.START_DELAY_S - time.time()))

    def abort(self, message: str) -> None:
        """Tell the other ranks that this one failed (they stop waiting)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        atomic.write_text(self.dir / f"failed-{self.rank}", f"rank {self.rank} failed: {message}")


def _write_skipped(run: RunSpec, out_dir: Path, reason: str) -> dict:
    rec = recordmod.make_record(run.record(), {}, status="skipped", reason=reason)
    rec["config_digest"] = config_digest(rec["config"])
    recordmod.write(rec, rank_file(out_dir, run.rank, run.world_size))
    return rec


def rank_main(spec: str | Path, out_dir: str | Path, rank: int | None) -> dict | None:
    """One rank process of a job (`dlbench bench-rank`, started by `launch`): the run from its spec file, re-run in
    the LeRobot peer environment where its loader lives there (None: that process wrote the record), else its
    source's settings applied and rank `rank` (None: from torch.distributed, RANK or SLURM_PROCID) measured."""
    from ..loader.world import rank_and_world
    from ..run import spec as runspec
    from ..sources import apply_env

    run = runspec.read(spec)
    if needs_peer(run.loader):  # run this rank in the LeRobot peer environment
        cmd, env = rank_command(run.loader, run.root)
        own = ["--spec", str(spec), "--out-dir", str(out_dir), *(["--rank", str(rank)] if rank is not None else [])]
        code = subprocess.run([*cmd, *own], env=env).returncode
        if code:
            raise UserError(f"bench rank in the LeRobot peer environment failed (exit {code}); see the messages above")
        return None
    apply_env(run.source_spec)
    rank, _ = rank_and_world(rank, run.ranks)
    return run_rank(replace(run, rank=rank), out_dir)


def run_rank(run: RunSpec, out_dir: str | Path) -> dict:
    """Run rank `run.rank` and write its files atomically; a killed rank leaves no rank file."""
    from .gpu import cuda_unavailable_reason
    from .runner import measure_rank

    out_dir = Path(out_dir)
    out = rank_file(out_dir, run.rank, run.world_size)
    reason = cuda_unavailable_reason(run.decode_device)  # once a rank: measure_rank trusts it
    if reason and run.on_unavailable == "skip":
        return _write_skipped(run, out_dir, reason)
    if reason:
        raise UserError(reason)
    else:
        samples: list[int] = []
        barrier = FileBarrier(out_dir, run.rank, run.world_size) if run.world_size > 1 else None
        try:
            with metered(run) as meter:
                rec = measure_rank(run, samples_out=samples, barrier=barrier, meter=meter)
        except Exception as e:
            if barrier is not None:
                barrier.abort(str(e).splitlines()[0] if str(e) else type(e).__name__)
            raise
        with atomic.file(rank_file(out_dir, run.rank, run.world_size, ".samples.npy")) as tmp:
            with open(tmp, "wb") as f:
                np.save(f, np.asarray(samples, dtype=np.int64))
    rec["config_digest"] = config_digest(rec["config"])
    recordmod.write(rec, out)
    return rec


SPEC_FILE = "spec.json"


def run_job(run: RunSpec, out_dir: str | Path) -> dict:
    """The bench job of a checked run (`RunSpec.check`: the workflow's parse, the CLI, `advice.prove`): check the
    source (warm, reachable), size `auto` workers, run every rank at once, write run.json. Each rank gets the run
    whole, as `<out_dir>/spec.json`."""
    from ..sources import apply_env, check_reachable

    apply_env(run.source_spec)
    _gate_on_prewarm(run)
    if is_remote(run.root):
        try:
            check_reachable(run.root)
        except UserError as e:
            if run.on_unreachable != "skip":
                raise
            return skip_run(run, out_dir, f"source not reachable from this machine: {e}")
    if run.num_workers == "auto":
        run = replace(run, num_workers=resolve_workers("auto", run.ranks_per_node), num_workers_requested="auto")
    return launch(run, out_dir)


def _gate_on_prewarm(run: RunSpec) -> None:
    """A run that requires a warm source stops (or warns) when the prewarm check said cold."""
    if not run.require_warm:
        return
    from ..prewarm import explain

    report_path = run.require_warm
    try:
        report = json.loads(Path(report_path).read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"{report_path}: prewarm report unreadable ({e}); rerun the prewarm check") from None
    if report["verdict"] == "warm":
        return
    message = (
        f"{explain(report)}. Prewarm the bucket near this compute (hf.co/storage) and rerun the check "
        f"(delete {report_path}), or set on_cold: warn for this source to measure anyway"
    )
    if run.on_cold == "error":
        raise UserError(message)
    print(f"warning: {message}", file=sys.stderr)


def with_policy_window(run: RunSpec) -> RunSpec:
    """`run` reading its policy's window: the delta_timestamps lerobot-train resolves for `run.policy` on this
    dataset (`tune.trainer.policy_window`, LeRobot's config read in its peer environment), once, here, so that every
    rank reads the same and run.json keeps it; a policy with no delta indices reads single frames."""
    from ..loader.dataset_meta import DatasetMeta
    from ..sources import apply_env
    from ..tune.trainer import policy_window

    apply_env(run.source_spec)
    deltas, _ = policy_window(run.policy, DatasetMeta.load(run.root))
    return replace(run, delta_timestamps=deltas) if deltas else run


def launch(run: RunSpec, out_dir: str | Path) -> dict:
    """Run all ranks of one run (`ranks` of them) concurrently; verify their files; write and return run.json."""
    out_dir = atomic.make_dir(out_dir)
    shutil.rmtree(out_dir / ".barrier", ignore_errors=True)
    if run.policy and run.delta_timestamps is None:
        run = with_policy_window(run)
    world = run.world_size
    # what keeps the run from running here, the dataset's reason before this machine's: skipped with it, or an error
    reason = lerobot_stream_misreads(run) or _missing_peer_env(run) or _missing_package(run)
    if reason:
        if run.on_unavailable != "skip":
            raise UserError(reason)
        return skip_run(run, out_dir, reason)
    _check_ray_ranks(run)
    if world == 1 and not needs_peer(run.loader):  # one rank of our own: run it here, sparing an interpreter start
        run_rank(run, out_dir)
        return finish(out_dir, world, "in-process")
    spec_path = out_dir / SPEC_FILE
    atomic.write_json(spec_path, run.to_dict())
    cmd, env = rank_command(run.loader, run.root)
    hub_cache = out_dir / HUB_CACHE
    # each run starts with an empty Hub cache, as on a fresh node (LanceDBDataset keeps a remote copy's meta/ there)
    if str(run.root).startswith("hf://") or run.loader in LANCE_LOADERS:
        env.update(HF_HOME=str(hub_cache), HF_LEROBOT_HOME=str(hub_cache / "lerobot"))
    args = [*cmd, "--spec", str(spec_path), "--out-dir", str(out_dir)]
    use_srun = bool(world > 1 and "SLURM_JOB_ID" in os.environ and shutil.which("srun"))
    with _cluster(run, use_srun, env, out_dir) as env:
        if use_srun:
            # one task per rank; each gets its SLURM_PROCID (the plugin's tasks/nodes give the allocation)
            # since SLURM 22.05 srun no longer inherits --cpus-per-task from the job: pass it on, or on clusters
            # that bind tasks to cores every rank (and its DataLoader workers) would share one CPU
            cpus = os.environ.get("SLURM_CPUS_PER_TASK")
            step = ["srun", f"--ntasks={world}", *([f"--cpus-per-task={cpus}"] if cpus else []), "--kill-on-bad-exit=1"]
            if RAY_ADDRESS_ENV in env:  # beside the Ray workers' step, on the same CPUs
                step.append("--overlap")
            procs = [subprocess.Popen([*step, *args], env=env)]
        else:
            ranks = [{**env, "RANK": str(r), "WORLD_SIZE": str(world)} for r in range(world)]
            procs = [subprocess.Popen(args, env=rank_env) for rank_env in ranks]
        codes = [p.wait() for p in procs]
    shutil.rmtree(out_dir / ".barrier", ignore_errors=True)
    shutil.rmtree(hub_cache, ignore_errors=True)
    if any(codes):
        raise UserError(f"{out_dir}: rank process(es) failed (exit codes {codes}); see the messages above")
    return finish(out_dir, world, "srun" if use_srun else "local")


def _missing_peer_env(run: RunSpec) -> str:
    """A peer loader whose environment is missing: one line saying how to create it, else ''."""
    name = run.loader_name.peer
    if not needs_peer(run.loader) or peer_python(name) is not None:
        return ""
    create = f"snakemake -c1 {named_peer_ready(name)}" if name and name != DEFAULT_PEER else CREATE_COMMAND
    return f"loader {run.loader} needs the LeRobot peer environment, which is missing; create it with {create}"


ADDED_LATER = {"ray_data": "Ray Data", "daft_data": "Daft"}  # peers an environment made before them may lack


def _missing_package(run: RunSpec) -> str:
    """ray_data needs Ray, daft_data Daft, in the peer environment, which an environment made before them may lack:
    one line saying how to add it, else ''."""
    base = run.loader_name.base
    if base not in ADDED_LATER or not needs_peer(run.loader):
        return ""
    python = peer_python(run.loader_name.peer)
    has = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({PEER_PACKAGE[base]!r}) is None)"
    if python is None or subprocess.run([str(python), "-c", has]).returncode == 0:
        return ""
    return (f"loader {run.loader} needs {ADDED_LATER[base]} in the peer environment, which lacks it; add it with "
            f"{CREATE_COMMAND}")  # fmt: skip


def _check_ray_ranks(run: RunSpec) -> None:
    """ray_data gives each rank whole episodes: more ranks than episodes is one line before any process starts."""
    if run.loader_name.base not in RAY_LOADERS or run.world_size == 1:
        return
    from ..loader.dataset_meta import DatasetMeta

    episodes = DatasetMeta.load(run.root, data_files_root=run.data_files_root).num_episodes
    if run.world_size > episodes:
        raise UserError(
            f"loader ray_data gives each rank whole episodes: {run.world_size} ranks for {episodes} episodes of "
            f"{run.root}; use at most {episodes} ranks"
        )


def lerobot_stream_misreads(run: RunSpec) -> str:
    """LeRobot 0.6.1's StreamingLeRobotDataset seeks a frame's video at its dataset-wide `index / fps`, which is its
    time in the file only where an episode's video starts at its first row's time: in each camera's first file, not
    after a file rolls over (huggingface/lerobot#4524, open). There it raises IndexError past the file's end or, short
    of it, returns another episode's frames: one line before any process starts, else ''."""
    if run.loader_name.base != "lerobot_stream":
        return ""
    from ..loader.dataset_meta import DatasetMeta
    from ..sources import apply_env

    apply_env(run.source_spec)  # a remote root's endpoint and credentials, as the ranks read it
    meta = DatasetMeta.load(run.root, data_files_root=run.data_files_root)
    for cam, starts in meta.video_from.items():
        # LeRobot decodes frame round(index) of the file where frame round(from_timestamp * fps + frame_index) is
        # meant: another frame from half a frame's time apart
        off = np.flatnonzero(np.abs(starts * meta.fps - meta.ep_from) >= 0.5)
        if len(off):
            e = int(off[0])
            return (
                f"loader lerobot_stream cannot read {run.root}: LeRobot 0.6.1's streaming dataset seeks video at a "
                f"frame's dataset-wide index / fps (huggingface/lerobot#4524), and episode {e} of {cam} starts "
                f"at {starts[e]:.3f} s of {meta.video_file[cam][e]}, not {meta.ep_from[e] / meta.fps:.3f} s "
                f"({len(off)} episodes so): it would fail or return other episodes' frames; use lerobot_map "
                "or dlbench_stream, or convert with a video_file_size_in_mb keeping each camera in one file"
            )
    return ""


def _cluster(run: RunSpec, use_srun: bool, env: dict, out_dir: Path):
    """The Ray cluster of a ray_data run of several ranks (`ray_cluster`); for any other run, nothing."""
    if run.loader_name.base not in RAY_LOADERS or run.world_size == 1:
        return contextlib.nullcontext(env)
    ray = require_peer(run.loader_name.peer).parent / "ray"
    return ray_cluster(ray, run.nodes, use_srun, env, out_dir)


def skip_run(run: RunSpec, out_dir: str | Path, reason: str) -> dict:
    """Record every rank of the run as skipped with `reason` (nothing was measured); write run.json."""
    out_dir = Path(out_dir)
    for r in range(run.world_size):
        _write_skipped(replace(run, rank=r), out_dir, reason)
    return finish(out_dir, run.world_size, "none")


def finish(out_dir: Path, world: int, launcher: str) -> dict:
    """Check the ranks' records of a run that ended (every rank's, of one configuration); write run.json."""
    files = [rank_file(out_dir, r, world) for r in range(world)]
    missing = [str(f) for f in files if not f.exists()]
    if missing:
        raise UserError(f"rank record(s) missing after the run: {missing}")
    records = [recordmod.read(f) for f in files]
    digests = {r["config_digest"] for r in records}
    if len(digests) != 1:
        raise UserError(
            f"{out_dir}: the ranks ran different configurations ({sorted(digests)}); "
            f"rerun the job so that every rank gets the same arguments"
        )
    manifest = {
        "world_size": world,
        "ranks": [f.name for f in files],
        "config_digest": digests.pop(),
        "launcher": launcher,
        "status": records[0].get("status", "ok"),
    }
    atomic.write_json(out_dir / RUN_MANIFEST, manifest)
    return manifest
