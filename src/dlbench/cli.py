"""`dlbench <step> ...`: one subcommand per workflow step; each parses arguments and calls the library."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from .errors import UserError


def say(message: str) -> None:
    """One line of the command's log, stamped with the local time (a workflow's logs are read long after)."""
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {message}", flush=True)


def _camera(spec: str):
    from .synth import Camera

    try:
        key, size = spec.rsplit("=", 1)
        h, w = size.lower().split("x")
        return Camera(key, int(h), int(w))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"camera {spec!r}: expected KEY=HEIGHTxWIDTH, e.g. observation.images.front=96x128"
        ) from None


def _source_report(spec: str) -> tuple[str, str]:
    source, sep, report = spec.partition("=")
    if not sep or not source or not report:
        raise argparse.ArgumentTypeError(
            f"--prewarm {spec!r}: expected SOURCE=REPORT, e.g. stream_bucket=results/prewarm/stream_bucket.json"
        )
    return source, report


def cmd_synth(a) -> None:
    from .config import synth_defaults
    from .synth import Camera, SynthConfig, synthesize

    cfg = SynthConfig(
        episodes=a.episodes,
        length_min=a.length_min,
        length_max=a.length_max,
        cameras=tuple(a.camera)
        if a.camera
        else tuple(Camera(c["key"], c["height"], c["width"]) for c in synth_defaults()["cameras"]),
        fps=a.fps,
        codec=a.codec,
        content=a.content,
        gop=a.gop,
        crf=a.crf,
        preset=a.preset,
        tasks=a.tasks,
        state_dim=a.state_dim,
        action_dim=a.action_dim,
        seed=a.seed,
        chunks_size=a.chunks_size,
    )
    out = synthesize(cfg, a.out, overwrite=a.overwrite, workers=a.workers, progress=a.bars)
    say(f"wrote v2.1 dataset {out}")


def _plan_options(a):
    from .convert.plan import PlanOptions

    return PlanOptions(
        episodes_per_batch=a.episodes_per_batch,
        data_file_size_in_mb=a.data_file_size_in_mb,
        video_file_size_in_mb=a.video_file_size_in_mb,
        chunks_size=a.chunks_size,
    )


def cmd_convert_plan(a) -> None:
    from .convert.plan import plan

    m = plan(a.src, a.work, _plan_options(a))
    say(f"planned {m['units']} units over {m['total_episodes']} episodes in {a.work}")


def cmd_convert_work(a) -> None:
    from .convert.work import work

    ran = work(
        a.work,
        lease_timeout_s=a.lease_timeout_s,
        progress=(lambda u: say(f"unit {u} done")) if not a.quiet else None,
    )
    say(f"this worker ran {ran} units; all units of {a.work} are done")
    if a.done_marker:
        from . import atomic

        atomic.write_json(a.done_marker, {"units_run": ran})


def cmd_convert_finalize(a) -> None:
    from .convert.finalize import finalize

    say(f"published v3.0 dataset {finalize(a.work, a.dst)}")


def cmd_convert_run(a) -> None:
    import socket

    from . import atomic
    from .convert.run import run
    from .format.meta import read_info
    from .procstat import MemorySampler

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
                "peak_pss_mb": rss.peak / 2**20,
                "host": socket.gethostname(),
                "window_start_unix": start_unix,
                "window_end_unix": start_unix + seconds,
            },
        )


def cmd_validate(a) -> None:
    from . import atomic
    from .validate import validate

    if a.on_unreachable == "skip" and "://" in a.dataset:
        from .sources import check_reachable

        try:
            check_reachable(a.dataset)
        except UserError as e:
            if a.report:
                atomic.write_json(a.report, {"dataset": a.dataset, "ok": False, "reachable": False, "reason": str(e)})
            say(f"{a.dataset}: not reachable, validation skipped: {e}")
            return
    report = validate(a.dataset, sample_episodes=a.sample_episodes)
    if a.report:
        atomic.write_json(a.report, report)
    say(
        f"{a.dataset}: valid v3.0 ({report['episodes']} episodes, {report['frames']} frames, "
        f"{report['frames_decoded']} edge frames decoded, {report['frames_wrong']} wrong)"
    )


def _run_from_args(a) -> dict:
    """The run spec: `--spec FILE` (as the workflow writes it), with any option given here on top; without a
    spec file, the config schema's defaults under the options."""
    from . import spec as runspec

    given = {k: getattr(a, k) for k in RUN_OPTIONS if getattr(a, k, None) is not None}
    if a.no_verify:
        given["verify"] = False
    if a.delta_timestamps:
        given["delta_timestamps"] = _read_deltas(a.delta_timestamps)
        given.setdefault("mode", Path(a.delta_timestamps).stem)
    if a.endpoint_url:
        from .sources import spec_from_endpoint

        given["source_spec"] = spec_from_endpoint(a.endpoint_url)
    if a.spec:
        run = {**runspec.read(a.spec), **given}
        run["run_id"] = runspec.run_id(run) if given else run["run_id"]
        return run
    return runspec.make_run(given)


def _read_deltas(path: str) -> dict:
    """A delta_timestamps file (YAML or JSON): seconds per feature key, as a `modes:` entry of config.yaml."""
    import yaml

    from .config import check_deltas

    try:
        deltas = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as e:
        raise UserError(f"--delta-timestamps {path}: cannot read it ({e})") from None
    check_deltas(deltas, f"--delta-timestamps {path}")
    return deltas


def cmd_bench(a) -> None:
    from . import spec as runspec
    from .bench.launch import needs_peer, rank_command, run_rank
    from .loader.stream import rank_and_world

    run = runspec.read(a.spec)
    if needs_peer(run["loader"]):  # run this rank in the LeRobot peer environment
        import subprocess

        cmd, env = rank_command(run["loader"], run["root"])
        code = subprocess.run([*cmd, *sys.argv[sys.argv.index("bench") + 1 :]], env=env).returncode
        if code:
            raise UserError(f"bench rank in the LeRobot peer environment failed (exit {code}); see the messages above")
        return
    from .bench.runner import BenchConfig
    from .sources import apply_env

    apply_env(run.get("source_spec"))
    rank, world = rank_and_world(a.rank, run["ranks"])
    rec = run_rank(BenchConfig.from_spec(run, rank=rank), a.out_dir)
    if rec["status"] not in ("ok", "unverified"):
        say(f"rank {rank} of {world}: {rec['status']}: {rec['reason']}")
        return
    m = rec["metrics"]
    say(
        f"rank {rank} of {world}: {m['frames_per_s_node']:.1f} frames/s, {m['samples_per_s']:.1f} samples/s, "
        f"p99 {m['latency_p99_ms']:.1f} ms, {m['frames_wrong']} wrong of {m['frames_verified']} verified"
    )


def cmd_bench_run(a) -> None:
    from .bench.launch import bench_run

    m = bench_run(_run_from_args(a), a.out_dir)
    say(f"{a.out_dir}: {m['world_size']} rank(s) via {m['launcher']}, status {m['status']}")


def cmd_stage(a) -> None:
    from .sources import apply_env, spec_from_endpoint, stage

    apply_env(spec_from_endpoint(a.endpoint_url))
    bar = None
    if a.bars:
        from fsspec.callbacks import TqdmCallback

        bar = TqdmCallback(tqdm_kwargs={"desc": "stage", "unit": "file"})
    info = stage(a.local, a.url, a.marker, callback=bar)
    say(f"staged {info['files']} files ({info['bytes'] / 2**20:.1f} MB) to {a.url}")


def cmd_prewarm(a) -> None:
    from . import prewarm
    from .sources import apply_env, spec_from_endpoint

    apply_env(spec_from_endpoint(a.endpoint_url))
    report = prewarm.check(
        a.url, files=a.files, range_mb=a.range_mb, ttfb_p50_ms_max=a.ttfb_ms_max, throughput_mbps_min=a.mbps_min
    )
    prewarm.write(report, a.out)
    say(f"{prewarm.explain(report)} (check took {report['check_seconds']:.1f} s)")


def _mode_target(text: str) -> tuple[str, float]:
    mode, _, fps = text.partition("=")
    try:
        return mode, float(fps)
    except ValueError:
        raise argparse.ArgumentTypeError(f"target {text!r}: expected MODE=FRAMES_PER_S, e.g. sarm=320") from None


def cmd_aggregate(a) -> None:
    from .aggregate import aggregate

    prewarm = dict(a.prewarm)
    df = aggregate(
        a.runs,
        a.out,
        targets=dict(a.target) or None,
        baseline=a.baseline,
        thrash={"hit_rate_below": a.thrash_hit_rate_below, "p99_ms_above": a.thrash_p99_ms_above},
        prewarm=prewarm,
    )
    say(f"wrote {a.out} ({len(df)} runs, {int(df['pass'].sum())} pass their target)")


def cmd_conversion_table(a) -> None:
    from .aggregate import conversion_table

    df = conversion_table(a.records, a.out)
    say(f"wrote {a.out} ({len(df)} conversions)")


def cmd_plot(a) -> None:
    from .plots import plot_all

    for p in plot_all(a.summary, a.outdir, conversion=a.conversion):
        say(f"wrote {p}")


def _megabytes(text: str) -> int | float:
    """A size in MB as info.json records it: an integer when it is one (LeRobot writes 100, not 100.0)."""
    value = float(text)
    return int(value) if value.is_integer() else value


def _add_plan_args(p) -> None:
    from .format import paths

    p.add_argument("--episodes-per-batch", type=int, default=50, help="episodes per work unit (whole files)")
    p.add_argument(
        "--data-file-size-in-mb",
        type=_megabytes,
        default=paths.DEFAULT_DATA_FILE_SIZE_IN_MB,
        help="a data file is closed before it grows past this",
    )
    p.add_argument(
        "--video-file-size-in-mb",
        type=_megabytes,
        default=paths.DEFAULT_VIDEO_FILE_SIZE_IN_MB,
        help="a video file is closed before it grows past this",
    )
    p.add_argument("--chunks-size", type=int, default=paths.DEFAULT_CHUNK_SIZE, help="files per chunk directory")


RUN_OPTIONS = (
    "root",
    "dataset",
    "scenario",
    "source",
    "loader",
    "mode",
    "batch_size",
    "num_workers",
    "decode_device",
    "duration_s",
    "warmup_s",
    "repeats",
    "num_batches",
    "decoder_cache_size",
    "pool_size",
    "buffer_size",
    "probe_samples",
    "check_frames",
    "seed",
    "ranks",
    "nodes",
    "data_files_root",
    "on_unavailable",
    "on_unreachable",
    "require_warm",
    "on_cold",
)
ENDPOINT_HELP = (
    "the S3 endpoint of an s3:// source (e.g. http://host:9000), or loopback[:PORT] for the workflow's own S3 server "
    "(through its shaping proxy on PORT)"
)


def _workers(text: str) -> int | str:
    return text if text == "auto" else int(text)


def _add_run_options(p) -> None:
    """A run's options; unset ones take the spec file's value, else the config schema's default (shown)."""
    from .config import BUILTIN_MODES, defaults, schema

    d = defaults("bench", "defaults")
    run = schema()["definitions"]["run"]["properties"]

    def opt(name, type_=str, choices=None, help_=None):
        text = help_ or run.get(name, {}).get("description", "")
        shown = f" (default: {d[name]})" if name in d else ""
        p.add_argument(
            f"--{name.replace('_', '-')}", type=type_, choices=choices, default=None, help=f"{text}{shown}".strip()
        )

    opt("root", help_="the v3.0 dataset: local path or URL (s3://, hf://datasets/ORG/NAME@REV)")
    opt("dataset", help_="the dataset's name in records (default: the root's last path component)")
    opt("scenario", help_="scenario name in records (default: adhoc)")
    opt("source")
    opt("loader", choices=["dlbench_map", "dlbench_stream", "lerobot_map", "lerobot_stream"])
    opt("mode", choices=list(BUILTIN_MODES))
    opt("batch_size", int)
    opt("num_workers", _workers)
    opt("decode_device", choices=["cpu", "cuda"])
    opt("duration_s", float)
    opt("warmup_s", float)
    opt("repeats", int)
    opt("num_batches", int)
    opt("decoder_cache_size", int)
    opt("pool_size", int)
    opt("buffer_size", int)
    opt("probe_samples", int)
    opt("check_frames", int)
    opt("seed", int)
    opt("ranks", int)
    opt("nodes", int)
    opt("data_files_root", help_="where data/ and videos/ are when not under --root (which then holds meta/)")
    opt("on_unavailable", choices=["skip", "error"])
    opt(
        "on_unreachable",
        choices=["error", "skip"],
        help_="a remote dataset that cannot be reached: fail, or write skipped records (default: error)",
    )
    opt("require_warm", help_="a prewarm report (dlbench prewarm-check) that must say warm")
    opt("on_cold", choices=["error", "warn"], help_="a cold prewarm report: stop, or measure anyway (default: error)")
    p.add_argument("--endpoint-url", default=None, help=ENDPOINT_HELP)
    p.add_argument(
        "--delta-timestamps",
        metavar="FILE",
        default=None,
        help="a YAML/JSON file of LeRobot delta_timestamps (seconds per feature key; `cameras` means every camera), "
        "in place of --mode; the records' mode is the file's name",
    )
    p.add_argument("--no-verify", action="store_true", help="check no frame (the run is then 'unverified')")


class _Help(argparse.HelpFormatter):
    """Every option's default in its help, unless the help already says it."""

    def _get_help_string(self, action):
        text = action.help or ""
        if "%(default)" in text or "default:" in text or action.default in (None, False, argparse.SUPPRESS):
            return text
        if action.option_strings or action.nargs in ("?", "*"):
            return f"{text} (default: %(default)s)".strip()
        return text


# -q is taken before or after the subcommand; SUPPRESS keeps a subcommand from resetting what the top level set
_QUIET = argparse.ArgumentParser(add_help=False)
_QUIET.add_argument(
    "-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help="no progress bars or per-unit lines"
)


def _command(sub, name: str, **kw) -> argparse.ArgumentParser:
    return sub.add_parser(name, formatter_class=_Help, parents=[_QUIET], **kw)


def build_parser() -> argparse.ArgumentParser:
    from . import __version__
    from .config import defaults, synth_defaults

    parser = argparse.ArgumentParser(
        prog="dlbench", description="Prepare LeRobot datasets and benchmark loading them.", formatter_class=_Help
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bars or per-unit lines")
    parser.add_argument("--version", action="version", version=f"dlbench {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", help="one step; COMMAND --help")

    sd = synth_defaults()
    p = _command(sub, "synth", help="write a synthetic LeRobot v2.1 dataset with barcoded video")
    p.add_argument("out", help="directory to write (must be empty unless --overwrite)")
    p.add_argument("--episodes", type=int, default=sd["episodes"], help="(default: %(default)s)")
    p.add_argument("--length-min", type=int, default=sd["length_min"], help="frames (default: %(default)s)")
    p.add_argument("--length-max", type=int, default=sd["length_max"], help="frames (default: %(default)s)")
    p.add_argument(
        "--camera",
        type=_camera,
        action="append",
        help="KEY=HEIGHTxWIDTH, repeat for more cameras (default: "
        + ", ".join(f"{c['key']}={c['height']}x{c['width']}" for c in sd["cameras"])
        + ")",
    )
    p.add_argument("--fps", type=int, default=sd["fps"], help="(default: %(default)s)")
    p.add_argument("--codec", default=sd["codec"], choices=["h264", "hevc", "av1"], help="(default: %(default)s)")
    p.add_argument(
        "--content",
        default=sd["content"],
        choices=["stripes", "camera"],
        help="stripes: quick flat content; camera: texture, motion and sensor noise (default: %(default)s)",
    )
    p.add_argument("--gop", type=int, default=None, help="keyframe interval (default: 30; av1: 2)")
    p.add_argument("--crf", type=int, default=None, help="(default: per codec: h264 23, hevc 28, av1 30)")
    p.add_argument("--preset", default=None, help="encoder preset (default: the encoder's)")
    p.add_argument("--tasks", type=int, default=sd["tasks"], help="(default: %(default)s)")
    p.add_argument("--state-dim", type=int, default=sd["state_dim"], help="(default: %(default)s)")
    p.add_argument("--action-dim", type=int, default=sd["action_dim"], help="(default: %(default)s)")
    p.add_argument("--seed", type=int, default=sd["seed"], help="(default: %(default)s)")
    p.add_argument("--chunks-size", type=int, default=1000, help="episodes per chunk directory (default: %(default)s)")
    p.add_argument("--workers", type=int, default=None, help="encoding processes (default: all cores)")
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty output directory")
    p.set_defaults(func=cmd_synth)

    conv = _command(sub, "convert", help="convert v2.1 to v3.0").add_subparsers(
        dest="step", required=True, help="plan, work and finalize run on any hosts sharing WORK; run does all three"
    )
    p = _command(conv, "plan", help="write the manifest of work units")
    p.add_argument("src", help="the v2.1 dataset: local path or URL")
    p.add_argument("work", help="work directory, shared by every worker (a path all hosts see)")
    _add_plan_args(p)
    p.set_defaults(func=cmd_convert_plan)
    p = _command(conv, "work", help="lease and run units until all are done")
    p.add_argument("work", help="the work directory `convert plan` wrote")
    p.add_argument(
        "--lease-timeout-s", type=float, default=60.0, help="a lease not renewed for this long is taken over"
    )
    p.add_argument("--done-marker", default=None, help="file to write when this worker returns")
    p.set_defaults(func=cmd_convert_work)
    p = _command(conv, "finalize", help="write v3.0 metadata and publish")
    p.add_argument("work", help="the work directory, every unit done")
    p.add_argument("dst", help="where the v3.0 dataset is published (must not exist or be empty)")
    p.set_defaults(func=cmd_convert_finalize)
    p = _command(conv, "run", help="plan, work with a local pool, finalize")
    p.add_argument("src", help="the v2.1 dataset: local path or URL")
    p.add_argument("dst", help="where the v3.0 dataset is published (must not exist or be empty)")
    p.add_argument("--workers", type=int, default=1, help="worker processes on this machine")
    p.add_argument("--work", default=None, help="work directory (default: hidden sibling of DST, removed at the end)")
    p.add_argument(
        "--lease-timeout-s", type=float, default=60.0, help="a lease not renewed for this long is taken over"
    )
    p.add_argument("--record", default=None, help="write the timing (seconds, bytes, peak PSS) as JSON here")
    p.add_argument("--name", default=None, help="dataset name in the record (default: SRC's parent directory)")
    _add_plan_args(p)
    p.set_defaults(func=cmd_convert_run)

    p = _command(sub, "validate", help="check a v3.0 dataset (metadata, and frames decoded at episode edges)")
    p.add_argument("dataset", help="the dataset root: local path or URL")
    p.add_argument("--report", default=None, help="write the report as JSON here")
    p.add_argument(
        "--sample-episodes",
        type=int,
        default=0,
        help="decode the edges of this many episodes spread over the dataset (default: 0, every episode)",
    )
    p.add_argument(
        "--on-unreachable",
        choices=("error", "skip"),
        default="error",
        help="a URL that cannot be reached: fail, or write a report saying so (default: %(default)s)",
    )
    p.set_defaults(func=cmd_validate)

    p = _command(sub, "bench-run", help="run all ranks of one benchmark run at once, check them, write run.json")
    p.add_argument(
        "--spec",
        default=None,
        help="run spec JSON (the workflow's results/specs/...); options given here override its values",
    )
    p.add_argument("--out-dir", required=True, help="writes rank{r}of{W}.json/.csv/.samples.npy and run.json here")
    _add_run_options(p)
    p.set_defaults(func=cmd_bench_run)

    p = _command(sub, "bench", help="(internal) one rank of a run; bench-run starts them")
    p.add_argument("--spec", required=True, help="run spec JSON, the same for every rank")
    p.add_argument("--out-dir", required=True, help="writes this rank's record here")
    p.add_argument("--rank", type=int, default=None, help="default: RANK, then SLURM_PROCID, then 0")
    p.set_defaults(func=cmd_bench)
    sub._choices_actions = [a for a in sub._choices_actions if a.dest != "bench"]  # internal: not listed

    p = _command(sub, "stage", help="upload a local dataset to a source URL (s3://, ...)")
    p.add_argument("local", help="the local dataset directory")
    p.add_argument("url", help="where to upload it (s3://bucket/prefix/name, ...)")
    p.add_argument("--marker", required=True, help="written when the upload is complete")
    p.add_argument("--endpoint-url", default=None, help=ENDPOINT_HELP)
    p.set_defaults(func=cmd_stage)

    p = _command(sub, "prewarm-check", help="measure whether a remote source behaves warm")
    p.add_argument("url", help="the dataset on the source (s3://, hf://buckets/..., https://)")
    p.add_argument("--out", required=True, help="the report (JSON)")
    p.add_argument("--files", type=int, default=8, help="files read, spread over the dataset")
    p.add_argument("--range-mb", type=float, default=4.0, help="bytes per range read (MB)")
    p.add_argument("--ttfb-ms-max", type=float, default=50.0, help="warm: median time to first byte at most this")
    p.add_argument("--mbps-min", type=float, default=400.0, help="warm: range-read throughput at least this")
    p.add_argument("--endpoint-url", default=None, help=ENDPOINT_HELP)
    p.set_defaults(func=cmd_prewarm)

    p = _command(sub, "aggregate", help="rank records -> summary CSV")
    p.add_argument("runs", nargs="+", help="run directories (with run.json) or rank record JSON files")
    p.add_argument("--out", required=True, help="summary CSV to write")
    p.add_argument(
        "--target",
        action="append",
        default=[],
        metavar="MODE=FPS",
        type=_mode_target,
        help="frames/s per node a run of MODE must reach to pass, e.g. sarm=320 (repeatable)",
    )
    p.add_argument("--baseline", default="lerobot_stream", help="loader the ratio_to_baseline column compares with")
    thrash = defaults("thrash")
    p.add_argument(
        "--thrash-hit-rate-below",
        type=float,
        default=thrash["hit_rate_below"],
        help="decoder thrash: cache hit rate under this...",
    )
    p.add_argument(
        "--thrash-p99-ms-above", type=float, default=thrash["p99_ms_above"], help="...and p99 item latency over this"
    )
    p.add_argument(
        "--prewarm",
        action="append",
        default=[],
        metavar="SOURCE=REPORT",
        type=_source_report,
        help="a source's prewarm check report: its runs get source_verdict (repeatable)",
    )
    p.set_defaults(func=cmd_aggregate)

    p = _command(sub, "conversion-table", help="conversion records (convert run --record) -> CSV")
    p.add_argument("records", nargs="+", help="JSON records of `convert run --record`")
    p.add_argument("--out", required=True, help="CSV to write")
    p.set_defaults(func=cmd_conversion_table)

    p = _command(sub, "plot", help="summary CSV -> PNG plots")
    p.add_argument("summary", nargs="?", default=None, help="summary.csv (omit to draw only --conversion)")
    p.add_argument("--conversion", default=None, help="conversion table CSV: adds conversion.png")
    p.add_argument("--outdir", required=True, help="directory for the PNG files")
    p.set_defaults(func=cmd_plot)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.bars = not args.quiet and sys.stderr.isatty()  # progress bars only on a terminal: logs stay readable
    try:
        args.func(args)
    except UserError as e:
        sys.stderr.write(f"dlbench {args.command}: error: {e}\n")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
