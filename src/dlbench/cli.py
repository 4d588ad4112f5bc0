"""`dlbench <step> ...`: one subcommand per workflow step; each parses arguments and calls the library."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .errors import UserError


def _camera(spec: str):
    from .synth import Camera

    try:
        key, size = spec.rsplit("=", 1)
        h, w = size.lower().split("x")
        return Camera(key, int(h), int(w))
    except ValueError:
        raise argparse.ArgumentTypeError(f"camera {spec!r}: expected KEY=HEIGHTxWIDTH, e.g. observation.images.front=96x128")


def _source_report(spec: str) -> tuple[str, str]:
    source, sep, report = spec.partition("=")
    if not sep or not source or not report:
        raise argparse.ArgumentTypeError(f"--prewarm {spec!r}: expected SOURCE=REPORT, e.g. "
                                         f"stream_bucket=results/prewarm/stream_bucket.json")
    return source, report


def cmd_synth(a) -> None:
    from .synth import SynthConfig, synthesize

    cfg = SynthConfig(
        episodes=a.episodes, length_min=a.length_min, length_max=a.length_max,
        cameras=tuple(a.camera) if a.camera else SynthConfig().cameras, fps=a.fps, codec=a.codec, gop=a.gop,
        crf=a.crf, preset=a.preset, tasks=a.tasks, state_dim=a.state_dim, action_dim=a.action_dim, seed=a.seed,
        chunks_size=a.chunks_size,
    )
    out = synthesize(cfg, a.out, overwrite=a.overwrite, workers=a.workers, progress=not a.quiet)
    print(f"wrote v2.1 dataset {out}")


def _plan_options(a):
    from .convert.plan import PlanOptions

    return PlanOptions(episodes_per_batch=a.episodes_per_batch, data_file_size_in_mb=a.data_file_size_in_mb,
                       video_file_size_in_mb=a.video_file_size_in_mb, chunks_size=a.chunks_size)


def cmd_convert_plan(a) -> None:
    from .convert.plan import plan

    m = plan(a.src, a.work, _plan_options(a))
    print(f"planned {m['units']} units over {m['total_episodes']} episodes in {a.work}")


def cmd_convert_work(a) -> None:
    from .convert.work import work

    ran = work(a.work, lease_timeout_s=a.lease_timeout_s,
               progress=(lambda u: print(f"unit {u} done", flush=True)) if not a.quiet else None)
    print(f"this worker ran {ran} units; all units of {a.work} are done")
    if a.done_marker:
        from . import io

        io.write_json(a.done_marker, {"units_run": ran})


def cmd_convert_finalize(a) -> None:
    from .convert.finalize import finalize

    print(f"published v3.0 dataset {finalize(a.work, a.dst)}")


def cmd_convert_run(a) -> None:
    import time

    from . import io
    from .convert.run import run
    from .format.meta import read_info
    from .procstat import RssSampler

    t0 = time.perf_counter()
    rss = RssSampler(every_s=0.05)  # this process and its worker processes
    try:  # the sampler thread starts once the workers are forked (forking beside a live thread is unsafe)
        out = run(a.src, a.dst, workers=a.workers, work_dir=a.work, options=_plan_options(a),
                  lease_timeout_s=a.lease_timeout_s, progress=not a.quiet, on_workers_started=rss.start)
    finally:
        rss.stop()
    seconds = time.perf_counter() - t0
    print(f"published v3.0 dataset {out} in {seconds:.1f} s")
    if a.record:

        def tree_bytes(root):
            return sum(p.stat().st_size for p in Path(root).rglob("*") if p.is_file())

        io.write_json(a.record, {
            "dataset": a.name or Path(a.src).resolve().parent.name, "src": str(a.src), "workers": a.workers,
            "seconds": seconds, "episodes": read_info(str(out))["total_episodes"],
            "input_bytes": tree_bytes(a.src), "output_bytes": tree_bytes(out), "peak_rss_mb": rss.peak / 2**20,
        })


def cmd_validate(a) -> None:
    from . import io
    from .validate import validate

    report = validate(a.dataset)
    if a.report:
        io.write_json(a.report, report)
    print(f"{a.dataset}: valid v3.0 ({report['episodes']} episodes, {report['frames']} frames, "
          f"{report['frames_decoded']} edge frames decoded, {report['frames_wrong']} wrong)")


BENCH_FIELDS = ("loader", "mode", "batch_size", "num_workers", "decode_device", "duration_s", "warmup_s",
                "num_batches", "decoder_cache_size", "pool_size", "buffer_size", "probe_samples", "seed", "scenario",
                "source", "nodes", "data_files_root")


def _bench_config(a, rank: int, world: int):
    from .bench.runner import BenchConfig

    return BenchConfig(dataset=a.dataset, verify=not a.no_verify, rank=rank, world_size=world,
                       **{k: getattr(a, k) for k in BENCH_FIELDS})


def cmd_bench(a) -> None:
    from .bench.launch import needs_peer, rank_command, run_rank
    from .loader.stream import rank_and_world

    if needs_peer(a.loader):  # run this rank in the LeRobot peer environment
        import subprocess

        cmd, env = rank_command(a.loader)
        code = subprocess.run([*cmd, *sys.argv[sys.argv.index("bench") + 1:]], env=env).returncode
        if code:
            raise UserError(f"bench rank in the LeRobot peer environment failed (exit {code}); see the messages above")
        return
    from .sources import apply_env

    apply_env(a.source_spec)
    rank, world = rank_and_world(a.rank, a.world_size)
    rec = run_rank(_bench_config(a, rank, world), a.out_dir, on_unavailable=a.on_unavailable)
    if rec["status"] != "ok":
        print(f"rank {rank} of {world}: {rec['status']}: {rec['reason']}")
        return
    m = rec["metrics"]
    print(f"rank {rank} of {world}: {m['frames_per_s_node']:.1f} frames/s, {m['samples_per_s']:.1f} samples/s, "
          f"p99 {m['latency_p99_ms']:.1f} ms, {m['frames_wrong']} wrong of {m['frames_verified']} verified")


def _gate_on_prewarm(a) -> None:
    """A run that requires a warm source stops (or warns) when the prewarm check said cold."""
    if not a.require_warm:
        return
    from .prewarm import explain

    report = json.loads(Path(a.require_warm).read_text())
    if report["verdict"] == "warm":
        return
    message = (f"{explain(report)}. Prewarm the bucket near this compute (hf.co/storage) and rerun the check "
               f"(delete {a.require_warm}), or set on_cold: warn for this source to measure anyway")
    if a.on_cold == "error":
        raise UserError(message)
    print(f"warning: {message}", file=sys.stderr)


def cmd_bench_run(a) -> None:
    from .bench.launch import launch, skip_run
    from .sources import apply_env, check_reachable

    apply_env(a.source_spec)
    _gate_on_prewarm(a)
    if "://" in a.dataset:
        try:
            check_reachable(a.dataset)
        except UserError as e:
            if a.on_unreachable != "skip":
                raise
            skip_run(_bench_config(a, 0, a.world_size), a.out_dir, f"source not reachable from this machine: {e}")
            print(f"{a.out_dir}: skipped: {e}")
            return

    argv = ["--dataset", a.dataset, "--on-unavailable", a.on_unavailable]
    if a.source_spec:
        argv += ["--source-spec", a.source_spec]
    for k in BENCH_FIELDS:
        v = getattr(a, k)
        if v is not None:
            argv += [f"--{k.replace('_', '-')}", str(v)]
    if a.no_verify:
        argv.append("--no-verify")
    m = launch(_bench_config(a, 0, a.world_size), argv, a.out_dir, on_unavailable=a.on_unavailable)
    print(f"{a.out_dir}: {m['world_size']} rank(s) via {m['launcher']}, status {m['status']}")


def cmd_stage(a) -> None:
    from .sources import apply_env, stage

    apply_env(a.source_spec)
    info = stage(a.local, a.url, a.marker)
    print(f"staged {info['files']} files ({info['bytes'] / 2**20:.1f} MB) to {a.url}")


def cmd_prewarm(a) -> None:
    from . import prewarm
    from .sources import apply_env

    apply_env(a.source_spec)
    report = prewarm.check(a.url, files=a.files, range_mb=a.range_mb, ttfb_p50_ms_max=a.ttfb_ms_max,
                           throughput_mbps_min=a.mbps_min)
    prewarm.write(report, a.out)
    print(f"{prewarm.explain(report)} (check took {report['check_seconds']:.1f} s)")


def cmd_aggregate(a) -> None:
    from .aggregate import aggregate

    prewarm = dict(a.prewarm)
    df = aggregate(a.runs, a.out, targets=json.loads(a.targets) if a.targets else None, baseline=a.baseline,
                   thrash=json.loads(a.thrash) if a.thrash else None, prewarm=prewarm)
    print(f"wrote {a.out} ({len(df)} runs, {int(df['pass'].sum())} pass their target)")


def cmd_conversion_table(a) -> None:
    from .aggregate import conversion_table

    df = conversion_table(a.records, a.out)
    print(f"wrote {a.out} ({len(df)} conversions)")


def cmd_plot(a) -> None:
    from .plots import plot_all

    for p in plot_all(a.summary, a.outdir, conversion=a.conversion):
        print(f"wrote {p}")


def _megabytes(text: str) -> int | float:
    """A size in MB as info.json records it: an integer when it is one (LeRobot writes 100, not 100.0)."""
    value = float(text)
    return int(value) if value.is_integer() else value


def _add_plan_args(p) -> None:
    from .format import paths

    p.add_argument("--episodes-per-batch", type=int, default=50, help="episodes per work unit (whole files)")
    p.add_argument("--data-file-size-in-mb", type=_megabytes, default=paths.DEFAULT_DATA_FILE_SIZE_IN_MB)
    p.add_argument("--video-file-size-in-mb", type=_megabytes, default=paths.DEFAULT_VIDEO_FILE_SIZE_IN_MB)
    p.add_argument("--chunks-size", type=int, default=paths.DEFAULT_CHUNK_SIZE, help="files per chunk directory")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dlbench", description="Prepare LeRobot datasets and benchmark loading them.")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("synth", help="write a synthetic LeRobot v2.1 dataset with barcoded video")
    p.add_argument("out")
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--length-min", type=int, default=30)
    p.add_argument("--length-max", type=int, default=90)
    p.add_argument("--camera", type=_camera, action="append", help="KEY=HEIGHTxWIDTH (repeat for more cameras)")
    p.add_argument("--fps", type=int, default=30)
    p.add_argument("--codec", default="h264", help="h264, hevc or av1")
    p.add_argument("--gop", type=int, default=None, help="keyframe interval (default: 30; av1: 2)")
    p.add_argument("--crf", type=int, default=None)
    p.add_argument("--preset", default=None)
    p.add_argument("--tasks", type=int, default=2)
    p.add_argument("--state-dim", type=int, default=6)
    p.add_argument("--action-dim", type=int, default=6)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--chunks-size", type=int, default=1000, help="episodes per chunk directory")
    p.add_argument("--workers", type=int, default=None, help="encoding processes (default: all cores)")
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty output directory")
    p.set_defaults(func=cmd_synth)

    conv = sub.add_parser("convert", help="convert v2.1 to v3.0").add_subparsers(dest="step", required=True)
    p = conv.add_parser("plan", help="write the manifest of work units")
    p.add_argument("src")
    p.add_argument("work")
    _add_plan_args(p)
    p.set_defaults(func=cmd_convert_plan)
    p = conv.add_parser("work", help="lease and run units until all are done")
    p.add_argument("work")
    p.add_argument("--lease-timeout-s", type=float, default=60.0)
    p.add_argument("--done-marker", default=None, help="file to write when this worker returns")
    p.set_defaults(func=cmd_convert_work)
    p = conv.add_parser("finalize", help="write v3.0 metadata and publish")
    p.add_argument("work")
    p.add_argument("dst")
    p.set_defaults(func=cmd_convert_finalize)
    p = conv.add_parser("run", help="plan, work with a local pool, finalize")
    p.add_argument("src")
    p.add_argument("dst")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--work", default=None, help="work directory (default: hidden sibling of DST, removed at the end)")
    p.add_argument("--lease-timeout-s", type=float, default=60.0)
    p.add_argument("--record", default=None, help="write the timing (seconds, bytes, peak RSS) as JSON here")
    p.add_argument("--name", default=None, help="dataset name in the record (default: SRC's parent directory)")
    _add_plan_args(p)
    p.set_defaults(func=cmd_convert_run)

    p = sub.add_parser("validate", help="check a v3.0 dataset")
    p.add_argument("dataset")
    p.add_argument("--report", default=None, help="write the report as JSON here")
    p.set_defaults(func=cmd_validate)

    for name, func, text in (("bench", cmd_bench, "run one rank of a benchmark (rank from RANK or SLURM_PROCID)"),
                             ("bench-run", cmd_bench_run, "run all ranks of a benchmark at once, check, write run.json")):
        p = sub.add_parser(name, help=text)
        p.add_argument("--dataset", required=True)
        p.add_argument("--out-dir", required=True, help="writes rank{r}of{W}.json/.csv/.samples.npy here")
        p.add_argument("--world-size", type=int, default=None if name == "bench" else 1)
        if name == "bench":
            p.add_argument("--rank", type=int, default=None, help="default: RANK, then SLURM_PROCID, then 0")
        p.add_argument("--loader", default="dlbench_map")
        p.add_argument("--mode", default="single")
        p.add_argument("--batch-size", type=int, default=8)
        p.add_argument("--num-workers", type=int, default=2)
        p.add_argument("--decode-device", default="cpu")
        p.add_argument("--duration-s", type=float, default=10.0)
        p.add_argument("--warmup-s", type=float, default=2.0)
        p.add_argument("--num-batches", type=int, default=None)
        p.add_argument("--decoder-cache-size", type=int, default=None)
        p.add_argument("--pool-size", type=int, default=8, help="streaming: live episodes per shard")
        p.add_argument("--buffer-size", type=int, default=256, help="streaming: shuffle buffer")
        p.add_argument("--probe-samples", type=int, default=32)
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--scenario", default="adhoc")
        p.add_argument("--source", default="local")
        p.add_argument("--nodes", type=int, default=1, help="nodes the ranks run on (per-node figures)")
        p.add_argument("--data-files-root", default=None,
                       help="where data/ and videos/ are when not under --dataset (which then holds meta/)")
        p.add_argument("--on-unavailable", choices=("skip", "error"), default="skip",
                       help="a cuda run without CUDA: write a skipped record, or fail")
        p.add_argument("--no-verify", action="store_true", help="skip barcode checks of decoded frames")
        p.add_argument("--source-spec", default=None, help="the source's config (JSON): sets its fsspec settings")
        if name == "bench-run":
            p.add_argument("--require-warm", default=None, help="prewarm report that must say warm")
            p.add_argument("--on-cold", choices=("error", "warn"), default="error")
            p.add_argument("--on-unreachable", choices=("error", "skip"), default="error",
                           help="a remote dataset that cannot be reached: fail, or write skipped records")
        p.set_defaults(func=func)

    p = sub.add_parser("stage", help="upload a local dataset to a source URL (s3://, ...)")
    p.add_argument("local")
    p.add_argument("url")
    p.add_argument("--marker", required=True, help="written when the upload is complete")
    p.add_argument("--source-spec", default=None)
    p.set_defaults(func=cmd_stage)

    p = sub.add_parser("prewarm-check", help="measure whether a remote source behaves warm")
    p.add_argument("url")
    p.add_argument("--out", required=True)
    p.add_argument("--files", type=int, default=8)
    p.add_argument("--range-mb", type=float, default=4.0)
    p.add_argument("--ttfb-ms-max", type=float, default=50.0)
    p.add_argument("--mbps-min", type=float, default=400.0)
    p.add_argument("--source-spec", default=None)
    p.set_defaults(func=cmd_prewarm)

    p = sub.add_parser("aggregate", help="rank records -> summary CSV")
    p.add_argument("runs", nargs="+", help="run directories (with run.json) or rank record JSON files")
    p.add_argument("--out", required=True)
    p.add_argument("--targets", default=None, help='JSON, e.g. {"single": 120, "sarm": 320} frames/s/node')
    p.add_argument("--baseline", default="lerobot_stream", help="loader the ratio_to_baseline column compares with")
    p.add_argument("--thrash", default=None, help='JSON, e.g. {"hit_rate_below": 0.5, "p99_ms_above": 100}')
    p.add_argument("--prewarm", action="append", default=[], metavar="SOURCE=REPORT", type=_source_report,
                   help="a source's prewarm check report: its runs get source_verdict (repeatable)")
    p.set_defaults(func=cmd_aggregate)

    p = sub.add_parser("conversion-table", help="conversion records (convert run --record) -> CSV")
    p.add_argument("records", nargs="+")
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_conversion_table)

    p = sub.add_parser("plot", help="summary CSV -> PNG plots")
    p.add_argument("summary", nargs="?", default=None, help="summary.csv (omit to draw only --conversion)")
    p.add_argument("--conversion", default=None, help="conversion table CSV: adds conversion.png")
    p.add_argument("--outdir", required=True)
    p.set_defaults(func=cmd_plot)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except UserError as e:
        print(f"dlbench {args.command}: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
