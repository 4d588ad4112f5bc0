"""`dlbench bench-run` (every rank of one benchmark run at once, checked, with its run.json) and the internal
`dlbench bench-rank` (one rank; bench-run and the SLURM launcher start them)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from ..errors import UserError
from .common import ENDPOINT_HELP, command, say

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
    "step_ms",
    "duration_s",
    "warmup_s",
    "repeats",
    "num_batches",
    "decoder_cache_size",
    "decoder_cache_mb",
    "remote_block_kb",
    "fetch_episodes",
    "pool_size",
    "buffer_size",
    "probe_samples",
    "check_frames",
    "resume_check",
    "seed",
    "ranks",
    "nodes",
    "data_files_root",
    "on_unavailable",
    "on_unreachable",
    "require_warm",
    "on_cold",
)
RANK_COMMAND = "bench-rank"


def add(sub) -> None:
    p = command(sub, "bench-run", help="run all ranks of one benchmark run at once, check them, write run.json")
    p.add_argument(
        "--spec",
        default=None,
        help="run spec JSON (the workflow's results/specs/...); options given here override its values",
    )
    p.add_argument("--out-dir", required=True, help="writes rank{r}of{W}.json/.csv/.samples.npy and run.json here")
    _add_run_options(p)
    p.set_defaults(func=bench_run)

    p = command(sub, RANK_COMMAND, help="(internal) one rank of a run; bench-run starts them")
    p.add_argument("--spec", required=True, help="run spec JSON, the same for every rank")
    p.add_argument("--out-dir", required=True, help="writes this rank's record here")
    p.add_argument("--rank", type=int, default=None, help="default: RANK, then SLURM_PROCID, then 0")
    p.set_defaults(func=bench_rank)
    sub._choices_actions = [a for a in sub._choices_actions if a.dest != RANK_COMMAND]  # internal: not listed


def _workers(text: str) -> int | str:
    return text if text == "auto" else int(text)


def _enum(prop: dict) -> list | None:
    """The allowed values of a run property (a scalar's enum, or the scalar branch of a scalar-or-list axis)."""
    return prop.get("enum") or next((b["enum"] for b in prop.get("oneOf", []) if "enum" in b), None)


def _add_run_options(p) -> None:
    """A run's options; unset ones take the spec file's value, else the config schema's default (shown)."""
    from ..config import BUILTIN_MODES, defaults, schema

    d = defaults("bench", "defaults")
    run = schema()["definitions"]["run"]["properties"]
    types = {
        "num_workers": _workers,
        "duration_s": float,
        "warmup_s": float,
        "decoder_cache_mb": float,
        "remote_block_kb": float,
    }
    helps = {
        "root": "the v3.0 dataset: local path or URL (s3://, hf://datasets/ORG/NAME@REV)",
        "dataset": "the dataset's name in records (default: the root's last path component)",
        "scenario": "scenario name in records (default: adhoc)",
        "data_files_root": "where data/ and videos/ are when not under --root (which then holds meta/)",
        "on_unreachable": "a remote dataset that cannot be reached: fail, or write skipped records (default: error)",
        "require_warm": "a prewarm report (dlbench prewarm-check) that must say warm",
        "on_cold": "a cold prewarm report: stop, or measure anyway (default: error)",
    }
    choices = {
        "mode": list(BUILTIN_MODES),
        "num_workers": None,  # a number or auto
        "on_unreachable": ["error", "skip"],
        "on_cold": ["error", "warn"],
    }
    for name in RUN_OPTIONS:
        prop = run.get(name, {})
        integer = prop.get("type") == "integer" or prop.get("$ref", "").endswith(("axis_int", "axis_count"))
        text = helps.get(name) or prop.get("description", "")
        shown = f" (default: {d[name]})" if name in d else ""
        if prop.get("type") == "boolean":  # a flag: given, it turns the check on
            p.add_argument(f"--{name.replace('_', '-')}", action="store_true", default=None, help=text)
            continue
        p.add_argument(
            f"--{name.replace('_', '-')}",
            type=types.get(name, int if integer else str),
            choices=choices[name] if name in choices else _enum(prop),
            default=None,
            help=f"{text}{shown}".strip(),
        )
    p.add_argument("--endpoint-url", default=None, help=ENDPOINT_HELP)
    p.add_argument(
        "--max-requests-per-s",
        type=float,
        default=None,
        help="with --endpoint-url: each rank's requests per second at most, backing off on 429/503",
    )
    p.add_argument(
        "--delta-timestamps",
        metavar="FILE",
        default=None,
        help="a YAML/JSON file of LeRobot delta_timestamps (seconds per feature key; `cameras` means every camera), "
        "in place of --mode; the records' mode is the file's name",
    )
    p.add_argument("--no-verify", action="store_true", help="check no frame (the run is then 'unverified')")


def run_from_args(a) -> dict:
    """The run spec: `--spec FILE` (as the workflow writes it), with any option given here on top; without a
    spec file, the config schema's defaults under the options."""
    from .. import spec as runspec

    given = {k: getattr(a, k) for k in RUN_OPTIONS if getattr(a, k, None) is not None}
    if a.no_verify:
        given["verify"] = False
    if a.delta_timestamps:
        given["delta_timestamps"] = _read_deltas(a.delta_timestamps)
        given.setdefault("mode", Path(a.delta_timestamps).stem)
    if a.endpoint_url:
        from ..sources import spec_from_endpoint

        given["source_spec"] = spec_from_endpoint(a.endpoint_url)
        if a.max_requests_per_s:
            given["source_spec"]["max_requests_per_s"] = a.max_requests_per_s
    elif a.max_requests_per_s:
        raise UserError("--max-requests-per-s applies to a source named by --endpoint-url")
    if a.spec:
        run = {**runspec.read(a.spec), **given}
        run["run_id"] = runspec.run_id(run) if given else run["run_id"]
        runspec.check_run(run, a.spec, label=_labels(given, a.spec))  # the rules the workflow checked, once more
        return run
    return runspec.make_run(given, label=_labels(given, None))


OPTION_OF = {"verify": "--no-verify", "source_spec": "--endpoint-url"}  # run keys set by an option of another name


def _labels(given: dict, spec_path: str | None):
    """How a run's error messages name a key: the option that set it, else the key in the spec file."""

    def label(key: str) -> str:
        if key in given or spec_path is None:
            return OPTION_OF.get(key, f"--{key.replace('_', '-')}")
        return f"{spec_path}: {key}"

    return label


def _read_deltas(path: str) -> dict:
    """A delta_timestamps file (YAML or JSON): seconds per feature key, as a `modes:` entry of config.yaml."""
    import yaml

    from ..config import check_deltas

    try:
        deltas = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as e:
        raise UserError(f"--delta-timestamps {path}: cannot read it ({e})") from None
    check_deltas(deltas, f"--delta-timestamps {path}")
    return deltas


def bench_run(a) -> None:
    from ..bench.launch import bench_run

    m = bench_run(run_from_args(a), a.out_dir)
    say(f"{a.out_dir}: {m['world_size']} rank(s) via {m['launcher']}, status {m['status']}")


def bench_rank(a) -> None:
    from .. import spec as runspec
    from ..bench.launch import needs_peer, rank_command, run_rank
    from ..loader.world import rank_and_world

    run = runspec.read(a.spec)
    if needs_peer(run["loader"]):  # run this rank in the LeRobot peer environment
        cmd, env = rank_command(run["loader"], run["root"])
        own = ["--spec", a.spec, "--out-dir", a.out_dir, *(["--rank", str(a.rank)] if a.rank is not None else [])]
        code = subprocess.run([*cmd, *own], env=env).returncode
        if code:
            raise UserError(f"bench rank in the LeRobot peer environment failed (exit {code}); see the messages above")
        return
    from ..bench.runner import BenchConfig
    from ..sources import apply_env

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
