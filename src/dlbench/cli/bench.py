"""`dlbench bench-run` (every rank of one benchmark run at once, checked, with its run.json) and the internal
`dlbench bench-rank` (one rank; bench-run and the SLURM launcher start them)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from typing import TYPE_CHECKING

from ..errors import UserError
from .common import DELTAS_HELP, ENDPOINT_HELP, command, deltas_name, read_deltas, say

if TYPE_CHECKING:
    from ..run.spec import RunSpec

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


# how the command line says what the schema's description says for config.yaml
HELP_HERE = {
    "dataset": "the dataset's name in records (default: the root's last path component)",
    "source": "the source's name in records",
    "no_verify": "check no frame (the run is then 'unverified')",
}


def option_of(name: str, kwargs: dict) -> str:
    """The command-line option of run option `name`: --no-NAME for a setting on by default."""
    return f"--{'no-' if kwargs.get('action') == 'store_false' else ''}{name.replace('_', '-')}"


def run_options(spec_class: type | None = None) -> list[tuple[str, dict]]:
    """`bench-run`'s run options, one per `RunSpec` field a user sets: (name, argparse keywords). Unset ones take
    the spec file's value, else the schema's default (shown). A setting on by default is turned off by --no-NAME
    (`option_of`), any other boolean turned on by --NAME."""
    from ..run.spec import RESOLVED, RESOLVED_CHOICES, RunSpec, choices, description, value_type

    resolved = dict(RESOLVED)
    options = []
    for f in dataclasses.fields(spec_class or RunSpec):
        if f.name in resolved and resolved[f.name] is None:
            continue
        if f.name in resolved:
            kind, allowed, text = str, RESOLVED_CHOICES.get(f.name), resolved[f.name]
        else:
            kind, allowed, text = value_type(f.name), choices(f.name), HELP_HERE.get(f.name, description(f.name))
        shown = f" (default: {f.default})" if f.default is not None and f.name != "scenario" else ""
        if kind is bool:  # a flag: given, it turns the setting from its default to the other value
            action = "store_false" if f.default is True else "store_true"
            if f.default is True:
                text = HELP_HERE.get(f"no_{f.name}", f"turn off (on by default): {text}")
            options.append((f.name, dict(action=action, default=None, help=text)))
            continue
        if isinstance(kind, tuple):  # num_workers: a number or auto
            kind, allowed = _workers, None
        if f.name == "loader":  # a name, or lerobot_map@NAME: no list of choices says it
            kind = _loader
        options.append((f.name, dict(type=kind, choices=allowed, default=None, help=f"{text}{shown}".strip())))
    return options


def _loader(text: str) -> str:
    """A loader name as the schema's run `loader` allows it (LeRobot's of a named peer: lerobot_map@NAME)."""
    import re

    from ..config import schema
    from ..run.loaders import LOADERS

    if text in LOADERS or re.match(schema()["definitions"]["loader_name"]["anyOf"][1]["pattern"], text):
        return text
    raise argparse.ArgumentTypeError(
        f"invalid choice: {text!r} (choose from {', '.join(LOADERS)}, LOADER@PEER (e.g. dlbench_map@lerobot))"
    )


def _add_run_options(p) -> None:
    for name, kwargs in run_options():
        p.add_argument(option_of(name, kwargs), dest=name, **kwargs)
    p.add_argument("--endpoint-url", default=None, help=ENDPOINT_HELP)
    p.add_argument(
        "--max-requests-per-s",
        type=float,
        default=None,
        help="with --endpoint-url: each rank's requests per second at most, backing off on 429/503",
    )
    p.add_argument(
        "--delta-timestamps",
        default=None,
        help=DELTAS_HELP + ", in place of --mode; the records' mode is the file's name, or `window` for inline JSON",
    )


def run_from_args(a) -> RunSpec:
    """The run spec: `--spec FILE` (as the workflow writes it), with any option given here on top; without a
    spec file, the config schema's defaults under the options."""
    from ..run import spec as runspec

    given = {k: getattr(a, k) for k, _ in run_options() if getattr(a, k, None) is not None}
    if a.delta_timestamps:
        given["delta_timestamps"] = read_deltas(a.delta_timestamps)
        given.setdefault("mode", deltas_name(a.delta_timestamps))
    if a.endpoint_url:
        from ..sources import spec_from_endpoint

        given["source_spec"] = spec_from_endpoint(a.endpoint_url)
        if a.max_requests_per_s:
            given["source_spec"]["max_requests_per_s"] = a.max_requests_per_s
    elif a.max_requests_per_s:
        raise UserError("--max-requests-per-s applies to a source named by --endpoint-url")
    if a.spec:
        run = runspec.read(a.spec)
        if given:
            run = dataclasses.replace(run, **given).with_id()
        run.check(a.spec, label=_labels(given, a.spec))  # the rules the workflow checked, once more
        return run
    return runspec.make_run(given, label=_labels(given, None))


def _labels(given: dict, spec_path: str | None):
    """How a run's error messages name a key: the option that set it, else the key in the spec file."""

    options = {"source_spec": "--endpoint-url", **{name: option_of(name, kw) for name, kw in run_options()}}

    def label(key: str) -> str:
        if key in given or spec_path is None:
            return options.get(key, f"--{key.replace('_', '-')}")
        return f"{spec_path}: {key}"

    return label


def bench_run(a) -> None:
    import os

    # not from bench.measure, which imports torch: a peer loader's job needs it only in its peer process
    from ..bench.launch import PROGRESS_ENV, run_job

    if not a.quiet:  # each rank says its windows as they end (the ranks run with -q: no bars)
        os.environ[PROGRESS_ENV] = "1"
    m = run_job(run_from_args(a), a.out_dir)
    say(f"{a.out_dir}: {m['world_size']} rank(s) via {m['launcher']}, status {m['status']}")


def bench_rank(a) -> None:
    from ..bench.adapters.daft_data import abandoned
    from ..bench.launch import rank_main

    rec = rank_main(a.spec, a.out_dir, a.rank)
    try:
        _say_rank(rec)
    finally:
        if abandoned():  # its record is written; Daft's threads would finish the query before the exit
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)


def _say_rank(rec: dict | None) -> None:
    if rec is None:  # ran in the peer environment, which said its own line
        return
    rank, world = rec["rank"], rec["world_size"]
    if rec["status"] not in ("ok", "unverified"):
        say(f"rank {rank} of {world}: {rec['status']}: {rec['reason']}")
        return
    m = rec["metrics"]
    say(
        f"rank {rank} of {world}: {m['frames_per_s_node']:.1f} frames/s, {m['samples_per_s']:.1f} samples/s, "
        f"p99 {m['latency_p99_ms']:.1f} ms, {m['frames_wrong']} wrong of {m['frames_verified']} verified"
    )
