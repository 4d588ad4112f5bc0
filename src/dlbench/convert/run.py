"""`dlbench convert run`: plan, a local pool of workers, finalize; with a progress bar."""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import shutil
import sys
from pathlib import Path

from ..errors import UserError
from ..workers import ParentSettings, start_method
from . import finalize as finalizemod
from . import plan as planmod
from . import work as workmod
from .lease import LEASE_TIMEOUT_S


def _worker(work_dir: str, lease_timeout_s: float) -> None:
    try:
        # a worker with nothing left to lease ends at once instead of polling for the others' last units; the
        # parent checks that every unit got done
        workmod.work(work_dir, lease_timeout_s=lease_timeout_s, wait_for_others=False)
    except UserError as e:
        print(f"dlbench convert worker: {e}", file=sys.stderr)
        sys.exit(2)


def run(
    src: str,
    dst: str | Path,
    workers: int = 1,
    work_dir: str | Path | None = None,
    options: planmod.PlanOptions = planmod.PlanOptions(),
    lease_timeout_s: float = LEASE_TIMEOUT_S,
    progress: bool = True,
    on_workers_started=None,
) -> Path:
    """Convert `src` (v2.1) to `dst` (v3.0) on this machine with `workers` processes.

    The work directory defaults to a hidden sibling of `dst`, so a rerun after an interruption resumes; it is
    removed after a successful publish only when it was the default. `on_workers_started()`, if given, is called
    once the worker processes exist (start threads there, not before: workers fork only while no other thread runs).
    """
    dst = Path(dst)
    if dst.exists() and (not dst.is_dir() or any(dst.iterdir())):
        raise UserError(f"{dst} is not empty; choose an empty destination")
    default_work = work_dir is None
    work = Path(work_dir) if work_dir else dst.with_name(f".{dst.name}.convert-work")
    manifest = planmod.plan(src, work, options)
    # forked where that is safe, a worker starts in milliseconds with the converter imported (spawn re-imports
    # pyarrow, ~0.3 s per worker); PyAV is imported only by a worker that has to remux
    ctx = multiprocessing.get_context(start_method())
    target = ParentSettings(_worker)  # a fork server started earlier would give them its old environment
    procs = [ctx.Process(target=target, args=(str(work), lease_timeout_s)) for _ in range(max(1, workers))]
    for p in procs:
        p.start()
    if on_workers_started is not None:
        on_workers_started()
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=manifest["units"], desc="convert units", unit="unit", mininterval=1.0)
    try:
        # a worker's sentinel is ready as soon as it exits, while is_alive() can stay True until it is reaped: wait
        # on the sentinels not yet seen (polling is_alive() spun here, then waited a whole timeout on no sentinel)
        running = {p.sentinel for p in procs}
        while running:
            if bar is not None:
                bar.n = sum(workmod.is_done(work, u) for u in range(manifest["units"]))
                bar.refresh()
            running -= set(multiprocessing.connection.wait(list(running), timeout=0.5))  # or one ends
    finally:
        for p in procs:
            p.join()
        if bar is not None:
            bar.n = sum(workmod.is_done(work, u) for u in range(manifest["units"]))
            bar.close()
    failed = [p.exitcode for p in procs if p.exitcode != 0]
    if failed:
        # a worker's UserError has been printed by it; the plan and finished units are kept for a rerun
        raise UserError(
            f"{len(failed)} convert worker(s) failed (see the messages above); fix the cause and rerun "
            f"the same command to resume from {work}"
        )
    # units still held elsewhere (a `convert work` on another host sharing the work directory): wait for them, and
    # take over any whose owner dies
    workmod.work(work, lease_timeout_s=lease_timeout_s)
    out = finalizemod.finalize(work, dst)
    if default_work:
        shutil.rmtree(work, ignore_errors=True)
    return out
