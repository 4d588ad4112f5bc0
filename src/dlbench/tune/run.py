"""`dlbench tune DATASET`: from a dataset to a proven loader configuration, in one command.

Its timeline (each phase timed in the result):
1. open: the dataset's metadata (one clear line where it cannot be read);
2. calibrate: each loader's costs on this host (`model.calibrate`: time-bounded passes, so its cost does not grow
   with the dataset), kept in the output directory and reused by a later tune of the same dataset and mode here;
3. search: every (loader, workers) the model can predict, ranked, over the memory budget left out (`search`);
4. prove: the best of each loader run as a short bench run (frames/s, effective batch size, peak memory, every frame
   checked), best-predicted first; a stream below the floor is followed by its next knob move; until every loader
   has a qualifying proof or the time budget is spent. Each proof is kept as it completes, so an interrupted tune
   resumes where it stopped (a proof half-run is run again, never read);
5. answer: the fastest proven candidate that qualifies (floor, memory, no wrong frame), with the code to paste, what
   bounds it, LeRobot's best where its environment is there, and how far to trust it (the spread of its windows,
   other load on the host while it ran). Written atomically: results/tune/<dataset>/<source>.{json,md,png}.
   With a step time (`step_ms`), qualifying candidates whose free-running rate could keep the GPUs at AU_TARGET are
   run again with the step held, cheapest first (fewest workers, then least memory), until one keeps the target
   measured so (`_at_step`); the answer is that one, or the best measured where none does, and the AU it states is
   the one measured with the step held (a free-running rate is only its bound: `trainer`). Its time is kept from
   the proofs' budget. The winner's swap is then run in lerobot-train's own loop where LeRobot's environment is
   here (`_loop_measured`), kept with the proofs so that a resumed tune does not run it again.

For another node (`cores`/`nodes` other than this host's) nothing can be proven here: the answer is the model's,
marked predicted, with the command that proves it there.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import time
import zlib
from pathlib import Path

from .. import atomic
from ..cli.common import say
from ..errors import UserError
from ..format.paths import is_remote
from ..model.equations import BOUNDS
from . import trainer
from .search import Candidate, best_per_loader, knob_moves, meets, memory_moves, predictions, ranked, speed_moves

PROOF = dict(repeats=2, warmup_s=2.0, check_frames=16, probe_samples=0)
# batches a proof takes at least, over its windows: the effective batch size over 10 batches is shown from 40
MIN_PROOF_BATCHES = 48
PROOF_S = 4.0  # a proof window's shortest duration (s); it runs on until its share of MIN_PROOF_BATCHES
OTHER_LOAD = 0.25  # cores busy with other work while proving, as a share of the host's: the answer says so
# the re-encoding probe's time per megapixel of a frame of every camera, kept from the proofs' budget (2 cores,
# 2026-11-30: 2 x 480x640 22 s and 1280x720 31 s with 3 s clips; the clip shrinks for larger frames: `lever`)
PROBE_S_PER_MPIXEL = 30.0
# lerobot-train's loop, run with the printed swap: its steps, after its warm-up batches, and the time kept for it
# (its environment's start, the factory's dataset and spawned workers: 15-20 s here, then the steps)
LOOP_STEPS, LOOP_WARMUP, LOOP_S = 60, 8, 40.0
WRITE_S = 3.0  # the report and its plot, written last (matplotlib's import and one figure: 2-3 s here)
PROBE_MIN_S = 10.0  # and at least this (2 x 240x320: 9 s, 2026-12-07), its clips' encoding and opening


def frame_pixels(meta) -> int:
    """Pixels of one frame of every camera (a video feature's shape holds its 3 channels, first or last)."""
    return sum(math.prod(meta.features[c]["shape"]) // 3 for c in meta.cameras)


def _open(root: str, source_spec: dict | None):
    """The dataset's metadata, its source's settings applied; one `UserError` where it cannot be read."""
    from ..loader.dataset_meta import DatasetMeta
    from ..sources import apply_env, check_reachable

    apply_env(source_spec)
    if is_remote(root):
        check_reachable(root)
    try:
        return DatasetMeta.load(root)
    except UserError:
        raise
    except Exception as e:  # a file that is there but is not a v3.0 dataset's
        raise UserError(f"{root}: not a readable LeRobot v3.0 dataset ({type(e).__name__}: {e})") from None


def _prove_queue(
    state,
    queue: list,
    prove,
    floor: dict,
    memory_mb,
    per_worker: int,
    deadline: float,
    gop: int = 0,
    span: int = 0,
    remote: bool = False,
    slot_mb: float = 0.0,
    reserve: int = 0,
    ranked_: list | None = None,
) -> list:
    """Prove candidates in turn until the queue is spent or the next proof would end past `deadline` (one at least,
    a proof taking as long as the longest before it); a proof over the memory budget alone queues a smaller
    configuration next (`search.memory_moves`: a worker fewer, half a stream's buffer); a stream that misses the
    floor queues its knob moves next (`search.knob_moves`; the pool it grew to is where the next stream
    starts), one that meets it its speed moves
    (`search.speed_moves`: GOP runs, `gop` frames; blocks decoded together, for windows of `span` frames or a
    `remote` source). `reserve`: proofs' time kept from the budget for what follows (a run with the step held).
    A move carries the model's prediction only where `ranked_` (the model's ranking) holds its settings."""
    proven, took = [], []  # took: each proof's wall time
    grown: dict = {}  # the pool a stream had to grow to before it met the floor: the next stream starts there
    while queue:
        c = queue.pop(0)
        # a proof is started only where one as long as the others so far ends within the budget: the answer is due
        # then, not a proof later (realistic16 from S3 at +20 ms: 326 s against a budget of 300 when started late)
        expected = max(took) if took else 0.0  # the budget is a promise: the next may be as long as the longest
        if proven and time.perf_counter() + expected * (1 + reserve) > deadline:
            state.note(f"time budget spent: {c.key} and {len(queue)} more not proven (a proof takes {expected:.0f} s)")
            break
        if c.loader == "dlbench_stream" and grown and not {"pool_size", "buffer_mb"} & set(c.settings):
            c = dataclasses.replace(c, settings={**c.settings, **grown}, measured={})
        left = deadline - time.perf_counter()
        if took:  # where the budget stands: the user's ETA
            say(f"tune: proof {len(proven) + 1}: {left:.0f} s of the budget left, {expected:.0f} s a proof so far, "
                f"{len(queue) + 1} queued")  # fmt: skip
        t = time.perf_counter()
        c.measured = prove(c)
        took.append(time.perf_counter() - t)
        proven.append(c)
        why = meets(c.measured, floor, memory_mb)
        if why.startswith("peak memory") and c.loader in ("dlbench_map", "dlbench_stream"):
            moves = [m for m in memory_moves(c) if m.key not in {p.key for p in proven}]
        elif why and c.loader == "dlbench_stream":
            moves = knob_moves(c, c.measured, floor, per_worker)
        else:
            if c.loader == "dlbench_stream" and {"pool_size", "buffer_mb"} & set(c.settings) and not grown:
                grown = {k: c.settings[k] for k in ("pool_size", "buffer_size", "buffer_mb") if k in c.settings}
            moves = speed_moves(c, gop, span, remote, slot_mb)
        queue = [predictions(m, ranked_ or []) for m in moves] + queue
    return proven


def tune(
    root: str,
    out: str | Path,
    *,
    mode: str = "single",
    delta_timestamps: dict | None = None,
    batch_size: int = 16,
    memory_gb: float | None = None,
    floor: dict | None = None,
    time_budget_s: float = 300.0,
    cores: int | None = None,
    nodes: int = 1,
    source_spec: dict | None = None,
    lerobot: bool = True,
    dataset: str | None = None,
    source: str = "local",
    calibration: str | Path | None = None,
    reencode: bool = True,
    policy: str | None = None,
    step_ms: float | None = None,
    step_sd_ms: float | None = None,
    gpus: int = 1,
    notes: list[str] | None = None,
    policy_config: dict | None = None,
    started_unix: float | None = None,
) -> dict:
    """Tune loading `root` for training with these constraints; writes `out`.json, .md and .png and returns the
    result (see the module docstring). `policy`: a LeRobot policy type whose window (at its defaults) is taken;
    `policy_config`: a saved config's delta indices (`trainer.train_config`), taken in its place;
    `started_unix`: when the command started (its process: the budget is the user's clock, imports too). A
    `UserError` for an unreadable dataset or a constraint that cannot be read."""
    from ..config import defaults
    from ..loader.dataset_meta import resolve_windows, window_span
    from ..loader.stream import slot_decoders_mb
    from ..model.calibration import host_cores

    t0 = time.perf_counter()
    phases: dict[str, float] = {}
    if started_unix is not None:
        phases["start_s"] = max(0.0, time.time() - started_unix)
        t0 -= phases["start_s"]
    out = Path(out)
    work = out.with_suffix(".work")  # calibration and proofs kept between an interrupted tune and the next
    floor = {**defaults("shuffle_floor"), **(floor or {})}
    here = host_cores()
    cores = cores or here
    predicted_only = cores != here or nodes != 1
    meta = _open(root, source_spec)
    dataset = dataset or Path(str(root).rstrip("/").split("@")[0]).name or "dataset"
    memory_note = ""
    if policy or policy_config:  # the window LeRobot's training takes for this policy, on this dataset
        if delta_timestamps:
            raise UserError("give --policy or --delta-timestamps, not both: the policy's config decides the window")
        if policy_config:  # a saved config's own (its chunk_size, n_obs_steps...), not the type's defaults
            delta_timestamps = trainer.windows_from_indices(policy_config, meta.features, meta.fps)
        else:
            delta_timestamps, _ = trainer.policy_window(policy, meta)
    if memory_gb is None:
        memory_gb = trainer.default_memory_gb()
        memory_note = f"memory budget {memory_gb:g} GB: half of this host's RAM (--memory-gb to change)"
    memory_mb = memory_gb * 1024
    phases["open_s"] = time.perf_counter() - t0 - phases.get("start_s", 0.0)
    constraints = dict(mode=mode, delta_timestamps=delta_timestamps, batch_size=batch_size, memory_gb=memory_gb,
                       floor=floor, time_budget_s=time_budget_s, cores=cores, nodes=nodes, policy=policy,
                       step_ms=step_ms, step_sd_ms=step_sd_ms or None, gpus=gpus)  # fmt: skip
    # what the measurements depend on: floor, memory and budget only judge them, so a tune under other constraints
    # reuses the calibration and the proofs of this dataset, mode and batch size on this host
    state = _State(work, dataset, root, {k: constraints[k] for k in ("mode", "delta_timestamps", "batch_size")},
                   content_digest(meta))  # fmt: skip
    for line in [memory_note, *(notes or [])]:
        if line:
            state.note(line)

    t = time.perf_counter()
    given, missing = _given_calibration(calibration, mode, delta_timestamps, batch_size, lerobot, root, state)
    cal = state.calibration(lambda: _calibrate(root, dataset, source, source_spec, mode, delta_timestamps,
                                               batch_size, missing, work, given))  # fmt: skip
    phases["calibrate_s"] = time.perf_counter() - t

    t = time.perf_counter()
    ours, best, runners_up, lerobot_best = _search(cal, root, work, constraints, memory_mb)
    phases["search_s"] = time.perf_counter() - t

    t = time.perf_counter()
    proven: list[Candidate] = []
    probing = reencode and not predicted_only and not is_remote(root)  # re-encoding copies a local dataset
    if not predicted_only:
        per_worker = max(1, meta.num_episodes // max(1, best.get("dlbench_stream", ours[0]).settings["num_workers"]))
        # each loader's best and its runner-up (the model's miss is 5-25%: the second may measure faster), then
        # LeRobot's best; best-predicted first
        ours_first = [*best.values(), *(c for c in runners_up if c is not None)]
        queue = sorted(ours_first, key=lambda c: -c.predicted_fps) + list(lerobot_best.values())

        def prove(c: Candidate) -> dict:
            return state.proof(c, lambda: _prove(c, root, mode, delta_timestamps, batch_size, source_spec, work))

        gop, span = meta.keyframe_interval(0), window_span(resolve_windows(mode, delta_timestamps, meta), meta.cameras)
        # the re-encoding probe runs after the proofs, within the budget too
        probe_s = max(PROBE_MIN_S, PROBE_S_PER_MPIXEL * frame_pixels(meta) / 1e6) if probing else 0.0
        from ..peer import peer_python

        here = step_ms and gpus == 1 and lerobot and not is_remote(root) and peer_python() is not None
        loop_s = LOOP_S if here else 0.0
        deadline = t0 + time_budget_s - probe_s - WRITE_S - loop_s
        proven = _prove_queue(state, queue, prove, floor, memory_mb, per_worker, deadline, gop, span, is_remote(root),
                              slot_decoders_mb(meta), reserve=1 if step_ms else 0, ranked_=ours)  # fmt: skip
    phases["prove_s"] = time.perf_counter() - t

    held: dict[str, dict] = {}  # candidate key: its run with the step held
    if step_ms and not predicted_only:
        t = time.perf_counter()
        order = _qualified(proven, floor, memory_mb, best, constraints)
        could = [c for c in order if _au(c.measured, constraints) >= trainer.AU_TARGET]

        def confirm(c: Candidate) -> dict:
            return _confirm_au(state, c, constraints, root, source_spec, work)

        held = _at_step(could, order[0] if order else None, confirm, deadline, state.note)
        phases["confirm_s"] = time.perf_counter() - t
    result = _answer(state, meta, cal, ours, best, lerobot_best, proven, floor, memory_mb, predicted_only,
                     constraints, root, dataset, source, held)  # fmt: skip
    if held and "winner" in result:
        t = time.perf_counter()
        result["winner"] |= _in_lerobot_train(result["winner"], proven, constraints, meta, cores)
        result["winner"] |= _loop_measured(state, result["winner"], constraints, root, work, deadline + loop_s, lerobot)
        phases["lerobot_loop_s"] = time.perf_counter() - t
    if probing:
        from .reencode import lever

        t = time.perf_counter()
        won = _qualified(proven, floor, memory_mb, best)
        result["reencode"] = lever(str(root), cal, won, constraints, memory_mb, meta.num_frames, frame_pixels(meta))
        phases["reencode_s"] = time.perf_counter() - t
    phases["total_s"] = time.perf_counter() - t0
    result["phases"] = {k: round(v, 1) for k, v in phases.items()}
    _write(out, result, proven)
    return result


def _search(cal, root, work: Path, constraints: dict, memory_mb: float | None) -> tuple:
    """The model's ranking of dlbench's configurations within the memory budget (a `UserError` naming the nearest
    where none fits), each loader's best and runner-up, and LeRobot's loaders' best."""
    c = constraints
    args = (cal, c["mode"], c["batch_size"], c["cores"], c["nodes"])
    ours = ranked(*args, memory_mb, is_remote(root))
    if not ours:
        every = ranked(*args, None, is_remote(root))
        if not every:
            raise UserError(f"no loader could be calibrated on {root}: {cal.note or 'see ' + str(work)}")
        least = min(every, key=lambda x: x.predicted_pss_mb)
        raise UserError(
            f"no configuration fits within {c['memory_gb']:g} GB on this node; the nearest is {least.key}: "
            f"{least.predicted_pss_mb:,.0f} MB and {least.predicted_fps:,.0f} frames/s by the model; raise --memory-gb"
        )
    best = best_per_loader(ours)
    runners_up = [next((x for x in ours if x.loader == lo and x.key != b.key), None) for lo, b in best.items()]
    lerobot_best = best_per_loader(ranked(*args, memory_mb, is_remote(root), loaders=("lerobot_stream", "lerobot_map")))
    return ours, best, runners_up, lerobot_best


def code_digest() -> str:
    """A digest of the code a proof's figures depend on: the loaders, the decoder, the harness and the model."""
    from .. import bench, decode, loader, model

    files = sorted(f for pkg in (bench, decode, loader, model) for f in Path(pkg.__file__).parent.rglob("*.py"))
    return f"{zlib.crc32(b''.join(f.read_bytes() for f in files)):08x}"


def content_digest(meta) -> str:
    """A digest of the dataset as its metadata describes it (info.json: its features, frames, files), so that a
    dataset rewritten at the same path is measured anew."""
    return f"{zlib.crc32(json.dumps(meta.info, sort_keys=True, default=str).encode()):08x}"


class _State:
    """What a tune has measured so far, in its work directory: the calibration and each completed proof, keyed by
    the dataset (its path and its content), what the measures depend on (mode, batch size), this host and the code's
    version. A state of another dataset, content, mode, host or code is set aside."""

    def __init__(self, work: Path, dataset: str, root: str, constraints: dict, content: str = ""):
        import socket

        self.work = work
        self.notes: list[str] = []
        key = {"dataset": dataset, "root": str(root), "content": content, "code": code_digest(),
               "host": socket.gethostname(), **constraints}  # fmt: skip
        self.path = work / "state.json"
        self.data = {"key": key, "proofs": {}}
        if self.path.exists():
            try:
                old = json.loads(self.path.read_text())
            except ValueError:
                old = None
            if old and old.get("key") == json.loads(json.dumps(key)):
                self.data = old
                if old["proofs"]:
                    self.note(f"resumed: {len(old['proofs'])} proof(s) of an earlier tune reused")
            else:
                shutil.rmtree(work, ignore_errors=True)  # another dataset, constraints or host: start clean
        work.mkdir(parents=True, exist_ok=True)

    def note(self, line: str) -> None:
        say(f"tune: {line}")
        self.notes.append(line)

    def save(self) -> None:
        atomic.write_json(self.path, self.data)

    def calibration(self, make):
        from ..model.calibration import Calibration

        path = self.work / "calibration.json"
        if path.exists() and self.data.get("calibrated"):
            return Calibration.read(path)
        cal = make()
        self.data["calibrated"] = True
        self.save()
        return cal

    def proof(self, c: Candidate, run) -> dict:
        if c.key in self.data["proofs"]:
            return self.data["proofs"][c.key]
        measured = run()
        self.data["proofs"][c.key] = measured
        self.save()
        return measured

    def has_loop(self, key: str) -> bool:
        return key in self.data.get("loops", {})

    def loop(self, key: str, run) -> dict | str:
        """lerobot-train's loop for `key` (the swap, flags and step it runs), kept as a proof is: a resumed tune
        reads it instead of running the loop again. A loop that did not run (its reason, a str) is not kept."""
        loops = self.data.setdefault("loops", {})
        if key in loops:
            self.note("lerobot-train's loop of an earlier tune reused")
            return loops[key]
        m = run()
        if isinstance(m, dict):
            loops[key] = m
            self.save()
        return m


def _tuned_loaders(lerobot: bool, root: str) -> list[str]:
    """The loaders a tune calibrates and searches: dlbench's, and those of LeRobot's that read `root` where its
    environment is there (not S3: `run.spec.lerobot_reads`)."""
    from ..peer import peer_python
    from ..run.spec import lerobot_reads

    theirs = [lo for lo in ("lerobot_map", "lerobot_stream") if lerobot and peer_python() and lerobot_reads(lo, root)]
    return ["dlbench_map", "dlbench_stream", *theirs]


def _given_calibration(path, mode: str, deltas, batch_size: int, lerobot: bool, root: str, state: _State):
    """The calibration at `path` (the workflow's of this dataset and source) if it was made on this host, and the
    tuned loaders it lacks in this mode at this batch size (only those are calibrated: the rest are the same
    passes a tune's own would measure, made minutes before). (None, every loader) where there is none to use."""
    import socket

    from ..model.calibration import Calibration

    loaders = _tuned_loaders(lerobot, root)
    if not path or deltas:
        return None, loaders
    cal = Calibration.read(path)
    if cal.host != socket.gethostname():
        state.note(f"{path} not used: made on {cal.host}")
        return None, loaders
    missing = [lo for lo in loaders if not (c := cal.cost(lo, mode)) or c.batch_size != batch_size]
    kept = [lo for lo in loaders if lo not in missing]
    state.note(f"calibration of {', '.join(kept) or 'no tuned loader'} from {path}" +
               (f"; {', '.join(missing)} calibrated here" if missing else ""))  # fmt: skip
    return cal, missing


def _calibrate(root, dataset, source, source_spec, mode, deltas, batch_size, loaders, work: Path, given=None):
    """Calibrate `loaders` on `root` in this mode; with `given` (a calibration of the others), the two as one."""
    from ..model.calibrate import calibrate
    from ..run import spec as runspec

    if given is not None and not loaders:
        given.write(work / "calibration.json")
        return given
    given_run = {"root": root, "mode": mode, "delta_timestamps": deltas, "batch_size": batch_size,
             "source_spec": source_spec, "num_workers": 1, "dataset": dataset}  # fmt: skip
    # one worker stands for every worker count but none: a training loop decodes in workers, and the one-process
    # passes would double the calibration's time. Each pass once: the calibration ranks, the proofs (two windows
    # each, their spread in the answer) measure what tune answers, so a drift check here would only add a third
    # of the calibration's time (realistic16 from S3 at +20 ms: 257 s with it)
    runs = [runspec.make_run({**given_run, "loader": lo}, scenario="tune") for lo in loaders]
    cal = calibrate(runs, dataset, source, work / "calibration.json", once=True)
    if given is None:
        return cal
    note = "; ".join(filter(None, [given.note, cal.note]))
    fresh = {(c.loader, c.mode) for c in cal.costs}  # a pair calibrated again (another batch size) replaces the given
    kept = [c for c in given.costs if (c.loader, c.mode) not in fresh]
    merged = dataclasses.replace(given, costs=[*kept, *cal.costs], note=note)
    merged.write(work / "calibration.json")
    return merged


def _prove(c: Candidate, root, mode, deltas, batch_size, source_spec, work: Path, step_ms: int = 0,
           window_s: float = PROOF_S) -> dict:  # fmt: skip
    """One short bench run of the candidate here (windows of `window_s` at least; each batch held `step_ms`, none
    without): summary.csv's row of it (frames/s, effective batch size, memory, frames checked), or {status, reason}
    where it could not run."""
    from ..bench.launch import launch
    from ..report.aggregate import aggregate
    from ..run import spec as runspec

    values = {"root": root, "loader": c.loader, "mode": mode, "delta_timestamps": deltas, "batch_size": batch_size,
              "source_spec": source_spec, "duration_s": window_s, "min_batches": MIN_PROOF_BATCHES, **PROOF,
              **c.settings, "step_ms": step_ms}  # fmt: skip
    out = work / "proofs" / f"{zlib.crc32(f'{c.key} step_ms={step_ms} window_s={window_s:g}'.encode()):08x}"
    shutil.rmtree(out, ignore_errors=True)
    try:
        run = runspec.make_run(values, scenario="tune")
        say(
            f"tune: proving {c.key}{f' at a {step_ms} ms step' if step_ms else ''} ({PROOF['repeats']} windows of "
            f"{window_s:.0f} s, {MIN_PROOF_BATCHES} batches at least)"
        )
        launch(run, out)
        row = aggregate([out], None).iloc[0].to_dict()
    except UserError as e:
        return {"status": "failed", "reason": str(e)}
    keep = ("status", "reason", "frames_per_s_node", "frames_per_s_min", "frames_per_s_max", "peak_pss_mb",
            "frames_verified", "frames_wrong", "shuffle_effective_batch", "shuffle_effective_window",
            "shuffle_distinct_frames", "other_cpu_ms_per_sample", "samples_per_s_node", "latency_p99_ms",
            "data_wait_frac", "worker_cpu_ms_per_sample")  # fmt: skip
    return {k: _plain(row.get(k)) for k in keep}


def _plain(v):
    try:
        return v.item()  # numpy scalars
    except AttributeError:
        return v


def _qualified(
    proven: list[Candidate], floor: dict, memory_mb: float | None, ours: dict, constraints: dict | None = None
) -> list[Candidate]:
    """dlbench's proofs that meet the floor and the memory budget, the answer first: with a step time, the cheapest
    (fewest workers, then least memory) of those that keep the node's GPUs at AU_TARGET, then the rest fastest
    first; without one, fastest first."""
    found = [c for c in proven if not meets(c.measured, floor, memory_mb) and c.loader in ours]
    found.sort(key=lambda c: -c.measured["frames_per_s_node"])
    step = (constraints or {}).get("step_ms")
    if not step:
        return found
    feeds = [c for c in found if _au(c.measured, constraints) >= trainer.AU_TARGET]
    feeds.sort(key=lambda c: (c.settings.get("num_workers", 0), c.measured.get("peak_pss_mb") or 0.0))
    return feeds + [c for c in found if c not in feeds]


def _au(measured: dict, constraints: dict, gpus: int | None = None) -> float:
    """AU of the node's GPUs (`gpus`, else the constraint's) at the constraint's step, from a proof's samples/s."""
    return trainer.utilization(measured.get("samples_per_s_node") or 0.0, constraints["batch_size"],
                               constraints["step_ms"], gpus or constraints["gpus"])  # fmt: skip


def _confirm_au(state, c: Candidate, constraints: dict, root, source_spec, work) -> dict:
    """Candidate `c` run once more with the training step held (`step_ms` over the GPUs: one rank consuming as fast
    as the node's GPUs together, the same load on its cores): AU measured, 1 less the share of time the consumer
    waited for a batch; or why it gave none."""
    step = max(1, round(constraints["step_ms"] / constraints["gpus"]))
    # a step drawn around its mean (DLIO's): the node's G GPUs' demand spread as its mean is, over G
    sd = {"step_sd_ms": constraints["step_sd_ms"] / constraints["gpus"]} if constraints.get("step_sd_ms") else {}
    held = Candidate(c.loader, {**c.settings, **sd})
    m = state.proof(
        Candidate(c.loader, {**c.settings, "step_ms": step, **sd}),
        lambda: _prove(held, root, constraints["mode"], constraints["delta_timestamps"], constraints["batch_size"],
                       source_spec, work, step_ms=step),
    )  # fmt: skip
    if m.get("status") not in (None, "ok") or m.get("data_wait_frac") is None:
        return {"au_measured": None, "au_measured_note": m.get("reason", "the run with the step held gave no wait")}
    return {"au_measured": 1.0 - m["data_wait_frac"], "au_confirm_step_ms": step}


def _at_step(could: list[Candidate], fastest: Candidate | None, confirm, deadline: float, note) -> dict[str, dict]:
    """Run candidates with the step held (`confirm`) until the cheapest that keeps AU_TARGET measured so is known:
    `could` are those whose free-running rate could (cheapest first, `_qualified`); the cheapest is run, then, where
    it falls short, the fastest of them, then those between in order of cost until one holds (where the fastest
    falls short too, none would). Without any that could: `fastest`, for the AU it does reach. One run at least, no
    other that would end past `deadline` (a run taking as long as the longest before it). Returns each run's key: its
    result ({"au_measured": AU or None, ...})."""
    held: dict[str, dict] = {}
    took: list[float] = []

    def run(c: Candidate, then: list[Candidate] = ()) -> bool:
        """Whether `c` kept AU_TARGET; False where the budget leaves no time for it, noted once with `then`, the
        runs that would have followed it."""
        if held and time.perf_counter() + max(took) > deadline:
            keys = ", ".join(x.key for x in (c, *then))
            note(f"time budget spent: {keys} not run with the step held")
            return False
        t = time.perf_counter()
        held[c.key] = confirm(c)
        took.append(time.perf_counter() - t)
        return (held[c.key].get("au_measured") or 0.0) >= trainer.AU_TARGET

    if not could:
        if fastest is not None:
            run(fastest)
        return held
    if run(could[0]) or len(could) == 1:
        return held
    top = max(could[1:], key=lambda c: c.measured["frames_per_s_node"])
    if not run(top):
        return held
    between = [c for c in could[1 : could.index(top)] if c.key not in held]
    for i, c in enumerate(between):
        if run(c, between[i + 1 :]) or c.key not in held:  # kept the target, or the budget is spent
            break
    return held


def _held_order(order: list[Candidate], held: dict[str, dict]) -> list[Candidate]:
    """`order` (`_qualified`'s) as measured with the step held: the cheapest that kept AU_TARGET first (the
    order's own is cheapest first), else the best measured; those not run with the step held after."""
    au = {k: v.get("au_measured") for k, v in held.items() if v.get("au_measured") is not None}
    ran = [c for c in order if c.key in au]
    kept = [c for c in ran if au[c.key] >= trainer.AU_TARGET]
    first = kept[:1] or sorted(ran, key=lambda c: -au[c.key])[:1]
    return first + [c for c in order if c not in first]


def _answer(state, meta, cal, ours, best, lerobot_best, proven, floor, memory_mb, predicted_only, constraints, root,
            dataset, source, held: dict | None = None) -> dict:  # fmt: skip
    """The result: the winner (proven, or predicted for another node), every proof, LeRobot's best, the notes;
    `held`: the runs with the step held (`_at_step`), which decide the winner and the AU it states."""
    held = held or {}
    qualified = _held_order(_qualified(proven, floor, memory_mb, best, constraints), held)
    peers = [c for c in proven if c.loader in lerobot_best and not meets(c.measured, floor, memory_mb)]
    peers.sort(key=lambda c: -c.measured["frames_per_s_node"])
    result = {
        "dataset": dataset,
        "root": str(root),
        "source": source,
        "episodes": meta.num_episodes,
        "frames": meta.num_frames,
        "host_cores": cal.cores,
        "constraints": constraints,
        "predicted_only": predicted_only,
        "proofs": [
            {
                "candidate": c.key,
                "loader": c.loader,
                "settings": c.settings,
                "predicted_fps": c.predicted_fps,
                "qualifies": not meets(c.measured, floor, memory_mb),
                "why_not": meets(c.measured, floor, memory_mb),
                **c.measured,
                **_au_figures(c.measured, constraints),
                **({"au_at_step": held[c.key].get("au_measured")} if c.key in held else {}),
            }
            for c in proven
        ],  # fmt: skip
        "notes": state.notes,
    }
    if predicted_only:
        top = ours[0]
        result["winner"] = _winner(top, constraints, root, predicted=True)
        cmd = f"dlbench tune {root} --mode {constraints['mode']} --batch-size {constraints['batch_size']}"
        result["prove_there"] = f"{cmd} (on that node, or its tune target with snakemake --profile profiles/slurm)"
    elif qualified:
        top = qualified[0]
        result["winner"] = _winner(top, constraints, root, predicted=False) | _au_figures(top.measured, constraints)
        if top.key in held:  # what it states is what was measured with the step held; the free run is its bound
            w, h = result["winner"], held[top.key]
            w |= {"au_bound": w["au"], "gpus_fed_bound": w["gpus_fed"], **h}
            if h.get("au_measured") is not None:
                w |= {"au": h["au_measured"], "gpus_fed": trainer.gpus_at_step(h["au_measured"], constraints["gpus"])}
        result["trust"] = _trust(top, cal.cores)
    else:
        nearest = max(proven, key=lambda c: c.measured.get("shuffle_effective_batch") or 0.0, default=None)
        budget = f" within {memory_mb / 1024:g} GB" if memory_mb else ""
        what = f"effective batch size {floor.get('effective_batch', 0):g}{budget}"
        near = (f"; the nearest is {nearest.key}: {nearest.measured.get('frames_per_s_node', 0):,.0f} frames/s, "
                f"{meets(nearest.measured, floor, memory_mb)}") if nearest else ""  # fmt: skip
        result["unmet"] = f"no configuration reaches {what} on this node{near}"
    if peers:
        p = peers[0]
        result["lerobot_best"] = {"loader": p.loader, "settings": p.settings, **p.measured,
                                  **_au_figures(p.measured, constraints),
                                  "lerobot_train": lerobot_train_command(p, constraints, root)}  # fmt: skip
        if "winner" in result and not predicted_only:
            result["switching_gain"] = result["winner"]["frames_per_s_node"] / p.measured["frames_per_s_node"]
    elif lerobot_best:
        result["lerobot_best"] = {"note": "LeRobot's loaders did not qualify or were not proven within the budget"}
    else:
        from ..peer import CREATE_COMMAND, peer_python

        result["lerobot_best"] = {
            "note": f"LeRobot's loaders do not read {root} (local datasets and Hub repos; buckets: its stream)"
            if peer_python()
            else f"LeRobot's environment is not here; create it with {CREATE_COMMAND.strip()}"
        }
    return result


def _in_lerobot_train(winner: dict, proven: list[Candidate], constraints: dict, meta, cores: int) -> dict:
    """The winner's AU in lerobot-train's loop (`trainer.lerobot_train_au`): the swap as printed, each rank's main
    process converting its batch to float32 before each step (its time measured here on this dataset's frames), and
    waiting each step as long as the winner's run with the step held did."""
    from ..loader.dataset_meta import resolve_windows

    c = next(c for c in proven if c.loader == winner["loader"] and c.settings == winner["settings"])
    windows = resolve_windows(constraints["mode"], constraints["delta_timestamps"], meta)
    per_sample = sum(len(windows.get(cam, [0])) * math.prod(meta.features[cam]["shape"]) for cam in meta.cameras)
    convert = trainer.float_batch_s(constraints["batch_size"], per_sample)
    worker_ms = c.measured.get("worker_cpu_ms_per_sample")
    wait = trainer.wait_per_step_s(winner["au_measured"], constraints["step_ms"]) if winner.get("au_measured") else 0.0
    au = trainer.lerobot_train_au(c.measured.get("samples_per_s_node") or 0.0, constraints["batch_size"],
                                  constraints["step_ms"], constraints["gpus"], convert, cores,
                                  None if worker_ms is None else worker_ms / 1000.0, wait)  # fmt: skip
    return {"au_lerobot_train": au, "lerobot_train_convert_ms": convert * 1000.0}


def _loop_measured(state, winner: dict, constraints: dict, root, work: Path, deadline: float, lerobot: bool) -> dict:
    """The winner's printed swap and flags run in lerobot-train's own loop (`trainer.au_in_lerobot_train`, LOOP_STEPS
    steps held) where LeRobot's environment is here, the dataset local, one GPU a node (G ranks' conversions share
    the cores: one rank cannot stand for them) and the budget has the time: the AU measured there becomes the
    one stated for it, the model's kept beside it; else the model's, with why."""
    why = None
    key = json.dumps([winner["lerobot_swap"], winner["lerobot_flags"], constraints["step_ms"], LOOP_STEPS, LOOP_WARMUP])
    if not lerobot:
        why = "--no-lerobot"
    elif constraints["gpus"] != 1:
        why = f"{constraints['gpus']} GPUs a node: the model's (one rank cannot stand for their conversions)"
    elif time.perf_counter() + LOOP_S > deadline and not state.has_loop(key):
        why = "the time budget was spent"
    if why is None:
        m = state.loop(
            key,
            lambda: trainer.au_in_lerobot_train(
                str(root),
                winner["lerobot_swap"],
                winner["lerobot_flags"],
                constraints["step_ms"],
                work / "lerobot_loop",
                LOOP_STEPS,
                LOOP_WARMUP,
            ),
        )
        if isinstance(m, dict):
            if constraints.get("step_sd_ms"):
                state.note("lerobot-train's loop was run at the mean step (its run holds one step)")
            return {"au_lerobot_train": m["au"], "au_lerobot_train_model": winner["au_lerobot_train"],
                    "au_lerobot_train_steps": m["steps"]}  # fmt: skip
        why = m
    state.note(f"lerobot-train's loop not run ({why}): its AU is the model's")
    return {"au_lerobot_train_model": winner["au_lerobot_train"]}


def _au_figures(measured: dict, constraints: dict) -> dict:
    """AU of the node's GPUs at the step time and the most GPUs kept at AU_TARGET, from a proof (none without a
    step time or a rate)."""
    if not constraints.get("step_ms") or not measured.get("samples_per_s_node"):
        return {}
    rate = measured["samples_per_s_node"]
    return {"au": _au(measured, constraints),
            "gpus_fed": trainer.gpus_fed(rate, constraints["batch_size"], constraints["step_ms"])}  # fmt: skip


def lerobot_train_command(c: Candidate, constraints: dict, root) -> str:
    """The lerobot-train flags of a LeRobot loader's proof: its dataset, policy, batch and workers, streaming for
    its stream; a setting lerobot-train has no flag for is named after it."""
    url = str(root)
    repo = url.removeprefix("hf://datasets/").split("@")[0] if url.startswith("hf://datasets/") else None
    flags = [f"--dataset.repo_id={repo}"] if repo else ["--dataset.repo_id=local/dataset", f"--dataset.root={url}"]
    if constraints.get("policy"):
        flags.append(f"--policy.type={constraints['policy']}")
    flags += [f"--batch_size={constraints['batch_size']}", f"--num_workers={c.settings.get('num_workers', 0)}"]
    if c.loader == "lerobot_stream":
        flags.append("--dataset.streaming=true")
    extra = {k: v for k, v in c.settings.items() if k != "num_workers"}
    tail = f"   # {extra}: not lerobot-train flags (StreamingLeRobotDataset's arguments, in code)" if extra else ""
    return "lerobot-train " + " ".join(flags) + tail


def _winner(c: Candidate, constraints: dict, root, predicted: bool) -> dict:
    """The winning candidate in the user's terms: the dataset class and its keyword arguments, the DataLoader's,
    the figures (measured, or predicted), what bounds it, and the code to paste."""
    cls = "LeRobotStreamingDataset" if c.loader == "dlbench_stream" else "LeRobotMapDataset"
    dataset_kwargs = {"root": str(root)}
    if constraints["delta_timestamps"]:
        dataset_kwargs["delta_timestamps"] = constraints["delta_timestamps"]
    else:
        dataset_kwargs["mode"] = constraints["mode"]
    dataset_kwargs |= {k: v for k, v in c.settings.items() if k != "num_workers"}  # every knob tune moved
    workers = c.settings["num_workers"]
    loader_kwargs = {"batch_size": constraints["batch_size"], "num_workers": workers}
    if workers:  # what the proof's DataLoader ran with (`bench.measure.make_dataloader`; RunSpec's defaults)
        loader_kwargs |= {"persistent_workers": True, "prefetch_factor": 2, "in_order": False}
    if cls == "LeRobotMapDataset":
        loader_kwargs["shuffle"] = True
    args = ", ".join(f"{k}={v!r}" for k, v in dataset_kwargs.items())
    # pinned where there is a GPU, as the proof copies batches to it
    largs = ", ".join(f"{k}={v!r}" for k, v in loader_kwargs.items()) + ", pin_memory=torch.cuda.is_available()"
    code = (f"import torch\nfrom dlbench.loader import DataLoader, {cls}\n\n"
            f"dataset = {cls}({args})\n"
            f"loader = DataLoader(dataset, {largs})\n")  # fmt: skip
    if cls == "LeRobotStreamingDataset":
        code += "# each epoch: dataset.set_epoch(epoch) before iterating\n"
    # into LeRobot's own training: its factory builds the class with LeRobot's arguments, the tuned ones bound first
    factory_name = "StreamingLeRobotDataset" if cls == "LeRobotStreamingDataset" else "LeRobotDataset"
    tuned = ", ".join(f"{k}={v!r}" for k, v in c.settings.items() if k != "num_workers")
    swap = (
        f"import functools, lerobot.datasets.factory as factory\nfrom dlbench.loader import {cls}\n"
        f"factory.{factory_name} = functools.partial({cls}{', ' + tuned if tuned else ''})  # before train(cfg)\n"
    )
    flags = f"--batch_size={constraints['batch_size']} --num_workers={workers}"
    if constraints.get("policy"):
        flags = f"--policy.type={constraints['policy']} " + flags
    if cls == "LeRobotStreamingDataset":
        flags += " --dataset.streaming=true"
    figures = (
        {"frames_per_s_node": c.predicted_fps, "peak_pss_mb": c.predicted_pss_mb}
        if predicted
        else {
            k: c.measured.get(k)
            for k in (
                "frames_per_s_node",
                "peak_pss_mb",
                "shuffle_effective_batch",
                "shuffle_effective_window",
                "shuffle_distinct_frames",
                "frames_verified",
                "frames_wrong",
            )
        }  # fmt: skip
    )
    return {
        "loader": c.loader,
        "dataset_class": f"dlbench.loader.{cls}",
        "dataset_kwargs": dataset_kwargs,
        "dataloader_kwargs": loader_kwargs,
        "predicted": predicted,
        "predicted_frames_per_s_node": c.predicted_fps,
        **figures,
        "bound": c.bound,
        "bound_means": BOUNDS.get(c.bound, ""),
        "code": code,
        "settings": c.settings,
        "lerobot_swap": swap,
        "lerobot_flags": flags,
    }


def _trust(c: Candidate, cores: int) -> str:
    """How far to trust the winner's figure: its windows' spread, and other work on the host while it ran."""
    m = c.measured
    lo, hi, mid = m.get("frames_per_s_min"), m.get("frames_per_s_max"), m.get("frames_per_s_node")
    parts = []
    if lo and hi and mid:
        parts.append(f"its windows measured {lo:,.0f}-{hi:,.0f} frames/s ({(hi - lo) / mid:.0%} apart)")
    other, rate = m.get("other_cpu_ms_per_sample"), m.get("samples_per_s_node")
    if other and rate and other == other:
        busy = other * rate / 1000.0
        if busy > OTHER_LOAD * cores:
            parts.append(f"other work held {busy:.1f} of {cores} cores while it ran: measure again on a quiet node")
    return "; ".join(parts) or "one proof"


def _write(out: Path, result: dict, proven: list[Candidate]) -> None:
    """The result as JSON, a short markdown report and one frontier plot, each written whole or not at all."""
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_json(out.with_suffix(".json"), result)
    png = out.with_suffix(".png")
    _plot(result, png)
    with atomic.file(out.with_suffix(".md")) as tmp:
        Path(tmp).write_text(report(result, png.name))


def report(result: dict, plot: str | None = None) -> str:
    """The tune's answer as markdown."""
    c = result["constraints"]
    window = f"policy {c['policy']}'s window" if c.get("policy") else (c["delta_timestamps"] or f"mode {c['mode']}")
    step = f", a {c['step_ms']:g} ms step on {c['gpus']} GPU(s) a node" if c.get("step_ms") else ""
    lines = [f"# Tune: {result['dataset']} ({result['episodes']} episodes, {result['frames']:,} frames)", "",
             f"{str(window)[:200]}, batch {c['batch_size']}{step}, floor {c['floor']}, "
             f"memory {str(c['memory_gb']) + ' GB' if c['memory_gb'] else 'unbounded'}, {c['cores']} cores x "
             f"{c['nodes']} node(s). Phases (s): {result.get('phases', {})}.", ""]  # fmt: skip
    if "winner" in result:
        w = result["winner"]
        how = "predicted (another node: not run here)" if w["predicted"] else "measured"
        lines += ["## Answer", "",
                  f"{w['loader']}: {w['frames_per_s_node']:,.0f} frames/s per node ({how}; {_predicted(w)}), "
                  f"peak memory {w['peak_pss_mb']:,.0f} MB"
                  + (f", bound by {w['bound']}: {w['bound_means']}." if w["bound"] else "."), ""]  # fmt: skip
        if w.get("au") is not None:
            for said in [au_line(w, c)] + ([loop_line(w)] if w.get("au_lerobot_train") is not None else []):
                lines += [said[0].upper() + said[1:] + ".", ""]
        if not w["predicted"]:
            lines += [f"Effective / nominal batch size {w['shuffle_effective_batch']:.2f} over one batch, "
                      f"{_f(w['shuffle_effective_window'])} over 10; distinct frames "
                      f"{_f(w['shuffle_distinct_frames'])}; {w['frames_verified']} frames checked, "
                      f"{w['frames_wrong']} wrong. Trust: {result.get('trust', '')}.", ""]  # fmt: skip
        lines += ["```python", w["code"].rstrip(), "```", "",
                  "In LeRobot's own training (it keeps torch's DataLoader: spawned workers, its prefetch):", "",
                  "```python", w["lerobot_swap"].rstrip(), "```", "", f"with `{w['lerobot_flags']}`.", ""]  # fmt: skip
        if result.get("prove_there"):
            lines += [f"Prove it there: `{result['prove_there']}`", ""]
    else:
        lines += ["## No answer", "", result["unmet"], ""]
    lb = result.get("lerobot_best", {})
    if "frames_per_s_node" in lb:
        gain = result.get("switching_gain")
        au = f", AU {lb['au']:.0%}" if lb.get("au") is not None else ""
        adds = f"; switching adds {gain:.2f}x." if gain else "."
        lines += [f"LeRobot's best here: {lb['loader']} {lb['settings']}: {lb['frames_per_s_node']:,.0f} frames/s"
                  f"{au}{adds}", "", f"`{lb['lerobot_train']}`", ""]  # fmt: skip
    elif lb.get("note"):
        lines += [f"LeRobot: {lb['note'].rstrip('.')}.", ""]
    lines += ["## Proofs", "", "| candidate | predicted | measured | eff. batch 1 / 10 | distinct | PSS MB | AU bound, "
              "GPUs | AU held | verdict |", "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for p in result["proofs"]:
        au = f"{p['au']:.0%}, {p['gpus_fed']}" if p.get("au") is not None else "-"
        said = _f(p["predicted_fps"], 0) if p["predicted_fps"] else "-"  # a knob the model has no term for
        lines.append(f"| {p['candidate']} | {said} | {_f(p.get('frames_per_s_node'), 0)} | "
                     f"{_f(p.get('shuffle_effective_batch'))} / {_f(p.get('shuffle_effective_window'))} | "
                     f"{_f(p.get('shuffle_distinct_frames'))} | {_f(p.get('peak_pss_mb'), 0)} | {au} | "
                     f"{_pct(p.get('au_at_step'))} | {'qualifies' if p['qualifies'] else p['why_not']} |")  # fmt: skip
    lines += _reencode_lines(result.get("reencode"))
    if result["notes"]:
        lines += ["", "Notes: " + "; ".join(result["notes"]) + "."]
    if plot:
        lines += ["", f"![frontier]({plot})"]
    return "\n".join(lines) + "\n"


def _reencode_lines(r: dict | None) -> list[str]:
    """The re-encoding lever (`tune.reencode`), predicted from a probe: what it would give and cost."""
    from .reencode import WORTH

    if not r:
        return []
    if "encoding" not in r:
        return ["", f"Re-encoding: {r['note']}."]
    gains = ", ".join(f"{lo} {g:.2f}x" for lo, g in r["predicted_gain"].items())
    verdict = ""
    if "best_after" in r:
        fps = r["predicted_fps"][r["best_after"]]
        worth = "the bigger lever." if r["bigger_lever"] else f"not worth re-encoding for (under {WORTH:g}x)."
        verdict = (f" Re-encoded, the best proven configuration of {r['best_after']} would reach about {fps:,} "
                   f"frames/s against the fastest proven's {r['answer_fps']:,} now: {worth}")  # fmt: skip
    return ["", "## Re-encoding (predicted from a probe, not measured)", "",
            f"{r['encoding']}: a random frame {r['random_ms_per_frame'][0]:.2f} -> {r['random_ms_per_frame'][1]:.2f} "
            f"ms, in order {r['order_ms_per_frame'][0]:.2f} -> {r['order_ms_per_frame'][1]:.2f} ms; "
            f"{r['bytes_vs_source']:.2f}x the bytes at {r['psnr_db']:.1f} dB PSNR; about "
            f"{r['encode_s_one_process']:,} s of one FFmpeg process for the whole dataset. Predicted gain: "
            f"{gains}.{verdict} Prove it: `{r['command']}`"]  # fmt: skip


def au_line(w: dict, c: dict) -> str:
    """The winner's AU in one line: measured with the step held where it was, its free-running bound beside."""
    gpus = f"{c['gpus']} GPU(s)"
    if w.get("au_measured") is None:
        why = w.get("au_measured_note") or ("another node's" if w.get("predicted") else "the time budget was spent")
        return (f"at a {_step(c)} ms step: AU {w['au']:.0%} on {gpus} by its free-running rate (not measured "
                f"with the step held: {why}); it could feed {w['gpus_fed']} "
                f"GPU(s) a node at >= {trainer.AU_TARGET:.0%}")  # fmt: skip
    verdict = "keeps" if w["au"] >= trainer.AU_TARGET else f"falls short of {trainer.AU_TARGET:.0%}; it keeps"
    return (f"at a {_step(c)} ms step: AU {w['au']:.0%} on {gpus}, measured with the step held (its free-running "
            f"rate's bound {w['au_bound']:.0%}); it {verdict} {w['gpus_fed']} GPU(s) a node at >= "
            f"{trainer.AU_TARGET:.0%}")  # fmt: skip


def _step(c: dict) -> str:
    """The step as given: its mean, and its spread where it is drawn around it."""
    return f"{c['step_ms']:g}" + (f" +/- {c['step_sd_ms']:g}" if c.get("step_sd_ms") else "")


def loop_line(w: dict) -> str:
    """The winner's AU in lerobot-train's loop in one line: measured there, or the model's."""
    how = (f"measured there over {w['au_lerobot_train_steps']} steps (the model: {w['au_lerobot_train_model']:.0%})"
           if w.get("au_lerobot_train_steps") else "by the model")  # fmt: skip
    return (f"in lerobot-train's loop (the swap below): AU {w['au_lerobot_train']:.0%} {how}, its main process "
            f"turning each batch to float32 on the CPU ({w['lerobot_train_convert_ms']:,.0f} ms of a core) before "
            f"each step")  # fmt: skip


def _predicted(w: dict) -> str:
    """What the model said of the winner: its prediction, or that it has no term for a knob the winner moved."""
    if w["predicted_frames_per_s_node"]:
        return f"the model predicted {w['predicted_frames_per_s_node']:,.0f}"
    knobs = ", ".join(k for k in w["settings"] if k != "num_workers")
    return f"not predicted: the model has no term for {knobs}"


def _pct(v) -> str:
    return "-" if v is None or v != v else f"{v:.0%}"


def _f(v, digits: int = 2) -> str:
    if v is None or v != v:
        return "n/a"
    return f"{v:,.{digits}f}"


def _plot(result: dict, png: Path) -> None:
    """Frames/s against effective batch size of every proof, its memory beside it, the floor drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for p in result["proofs"]:
        x, y = p.get("shuffle_effective_batch"), p.get("frames_per_s_node")
        if x is None or y is None or x != x:
            continue
        ax.scatter(x, y, color="tab:green" if p["qualifies"] else "tab:grey", s=40)
        ax.annotate(f"{p['candidate'].replace('num_workers=', 'w')} ({_f(p.get('peak_pss_mb'), 0)} MB)", (x, y),
                    fontsize=6, xytext=(3, 3), textcoords="offset points")  # fmt: skip
    least = result["constraints"]["floor"].get("effective_batch", 0)
    ax.axvline(least, ls="--", color="grey", lw=1)
    ax.set_xlabel("effective / nominal batch size (one batch)")
    ax.set_ylabel("frames/s per node")
    ax.set_title(f"tune: {result['dataset']} (green: qualifies)", fontsize=9)
    with atomic.file(png) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
