"""`dlbench convert plan|work|finalize|run`: v2.1 -> v3.0, on one machine or on any hosts sharing a work directory."""

from __future__ import annotations

import socket
import time
from pathlib import Path

from .common import command, out_option, say


def _megabytes(text: str) -> int | float:
    """A size in MB as info.json records it: an integer when it is one (LeRobot writes 100, not 100.0)."""
    value = float(text)
    return int(value) if value.is_integer() else value


def _add_plan_args(p) -> None:
    from ..convert.plan import PlanOptions

    d = PlanOptions()
    p.add_argument(
        "--episodes-per-batch", type=int, default=d.episodes_per_batch, help="episodes per work unit (whole files)"
    )
    p.add_argument(
        "--data-file-size-in-mb",
        type=_megabytes,
        default=d.data_file_size_in_mb,
        help="a data file is closed before it grows past this",
    )
    p.add_argument(
        "--video-file-size-in-mb",
        type=_megabytes,
        default=d.video_file_size_in_mb,
        help="a video file is closed before it grows past this",
    )
    p.add_argument("--chunks-size", type=int, default=d.chunks_size, help="files per chunk directory")


def _add_lease_timeout(p) -> None:
    from ..convert.lease import LEASE_TIMEOUT_S

    p.add_argument(
        "--lease-timeout-s", type=float, default=LEASE_TIMEOUT_S, help="a lease not renewed for this long is taken over"
    )


def add(sub) -> None:
    conv = command(sub, "convert", help="convert v2.1 to v3.0").add_subparsers(
        dest="step", required=True, help="plan, work and finalize run on any hosts sharing WORK; run does all three"
    )
    p = command(conv, "plan", help="write the manifest of work units")
    p.add_argument("src", help="the v2.1 dataset: local path or URL")
    p.add_argument("work", help="work directory, shared by every worker (a path all hosts see)")
    _add_plan_args(p)
    p.set_defaults(func=plan)

    p = command(conv, "work", help="lease and run units until all are done")
    p.add_argument("work", help="the work directory `convert plan` wrote")
    _add_lease_timeout(p)
    p.add_argument("--done-marker", default=None, help="file to write when this worker returns")
    p.set_defaults(func=work)

    p = command(conv, "finalize", help="write v3.0 metadata and publish")
    p.add_argument("work", help="the work directory, every unit done")
    p.add_argument("dst", help="where the v3.0 dataset is published (must not exist or be empty)")
    p.set_defaults(func=finalize)

    p = command(conv, "run", help="plan, work with a local pool, finalize")
    p.add_argument("src", help="the v2.1 dataset: local path or URL")
    p.add_argument("dst", help="where the v3.0 dataset is published (must not exist or be empty)")
    p.add_argument("--workers", type=int, default=1, help="worker processes on this machine")
    p.add_argument("--work", default=None, help="work directory (default: hidden sibling of DST, removed at the end)")
    _add_lease_timeout(p)
    out_option(p, "record", "write the timing (seconds, bytes, peak PSS) as JSON here", "--record")
    p.add_argument("--name", default=None, help="dataset name in the record (default: SRC's parent directory)")
    _add_plan_args(p)
    p.set_defaults(func=run)


def _plan_options(a):
    from ..convert.plan import PlanOptions

    return PlanOptions(
        episodes_per_batch=a.episodes_per_batch,
        data_file_size_in_mb=a.data_file_size_in_mb,
        video_file_size_in_mb=a.video_file_size_in_mb,
        chunks_size=a.chunks_size,
    )


def plan(a) -> None:
    from ..convert.plan import plan

    m = plan(a.src, a.work, _plan_options(a))
    say(f"planned {m['units']} units over {m['total_episodes']} episodes in {a.work}")


def work(a) -> None:
    from .. import atomic
    from ..convert.work import work

    progress = (lambda u: say(f"unit {u} done")) if not a.quiet else None
    ran = work(a.work, lease_timeout_s=a.lease_timeout_s, progress=progress)
    say(f"this worker ran {ran} units; all units of {a.work} are done")
    if a.done_marker:
        atomic.write_json(a.done_marker, {"units_run": ran})


def finalize(a) -> None:
    from ..convert.finalize import finalize

    say(f"published v3.0 dataset {finalize(a.work, a.dst)}")


def run(a) -> None:
    from ..convert.run import run
    from ..procstat import MemorySampler

    t0, start_unix = time.perf_counter(), time.time()
    rss = MemorySampler(every_s=0.05)  # this process and its worker processes
    try:  # the sampler thread starts once the workers are forked (forking beside a live thread is unsafe)
        out = run(
            a.src,
            a.dst,
            workers=a.workers,
            work_dir=a.work,
            options=_plan_options(a),
            lease_timeout_s=a.lease_timeout_s,
            progress=a.bars,
            on_workers_started=rss.start,
        )
    finally:
        rss.stop()
    seconds = time.perf_counter() - t0
    say(f"published v3.0 dataset {out} in {seconds:.1f} s")
    if a.record:
        _write_record(a, out, seconds, start_unix, rss.peak)


def _write_record(a, out: Path, seconds: float, start_unix: float, peak_bytes: int) -> None:
    from .. import atomic
    from ..format.meta import read_info

    def tree_bytes(root):
        return sum(p.stat().st_size for p in Path(root).rglob("*") if p.is_file())

    atomic.write_json(
        a.record,
        {
            "dataset": a.name or Path(a.src).resolve().parent.name,
            "src": str(a.src),
            "workers": a.workers,
            "seconds": seconds,
            "episodes": read_info(str(out))["total_episodes"],
            "input_bytes": tree_bytes(a.src),
            "output_bytes": tree_bytes(out),
            "peak_pss_mb": peak_bytes / 2**20,
            "host": socket.gethostname(),
            "window_start_unix": start_unix,
            "window_end_unix": start_unix + seconds,
        },
    )
