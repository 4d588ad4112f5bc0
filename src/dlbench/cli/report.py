"""`dlbench aggregate`, `conversion-table` and `plot`: records -> CSV tables -> PNG plots. The workflow's rules run
these same commands."""

from __future__ import annotations

import argparse

from .common import comma_list, command, out_option, say


def _source_report(spec: str) -> tuple[str, str]:
    source, sep, report = spec.partition("=")
    if not sep or not source or not report:
        raise argparse.ArgumentTypeError(
            f"--prewarm {spec!r}: expected SOURCE=REPORT, e.g. stream_bucket=results/prewarm/stream_bucket.json"
        )
    return source, report


def _baseline(text: str) -> str:
    """A value config.yaml's baseline_loader allows (a named peer's loader too: the summary holds its runs)."""
    import re

    from ..config import schema

    forms = schema()["properties"]["baseline_loader"]["anyOf"]
    if text in forms[0]["enum"] or re.match(forms[1]["pattern"], text):
        return text
    raise argparse.ArgumentTypeError(f"{text!r} is not {', '.join(forms[0]['enum'])} or {forms[1]['title']}")


def _mode_target(text: str) -> tuple[str, float]:
    mode, _, fps = text.partition("=")
    try:
        return mode, float(fps)
    except ValueError:
        raise argparse.ArgumentTypeError(f"target {text!r}: expected MODE=FRAMES_PER_S, e.g. sarm=320") from None


def add(sub) -> None:
    _add_aggregate(sub)
    p = command(sub, "conversion-table", help="conversion records (convert run --out) -> CSV")
    p.add_argument("records", nargs="+", help="JSON records of `convert run --out`")
    p.add_argument("--out", required=True, help="CSV to write")
    p.set_defaults(func=conversion_table)
    _add_advise(sub)
    p = command(sub, "plot", help="summary CSV -> PNG plots")
    p.add_argument("summary", nargs="?", default=None, help="summary.csv (omit to draw only --conversion)")
    p.add_argument("--conversion", default=None, help="conversion table CSV: adds conversion.png")
    out_option(p, "outdir", "directory for the PNG files", "--outdir", flag="--out-dir")
    p.add_argument(
        "--thrash-hit-rate-below", type=float, default=None, help="the cache plot's thrash line (default: as aggregate)"
    )
    p.add_argument("--thrash-p99-ms-above", type=float, default=None, help="(default: as aggregate)")
    p.add_argument(
        "--only",
        type=comma_list(str),
        default=None,
        metavar="P1,P2",
        help="draw these plots only (e.g. throughput.png,nodes.png)",
    )
    p.set_defaults(func=plot)


def _add_aggregate(sub) -> None:
    from ..config import defaults, schema

    p = command(sub, "aggregate", help="rank records -> summary CSV")
    p.add_argument("runs", nargs="+", help="run directories (with run.json) or rank record JSON files")
    p.add_argument(
        "--out", required=True, help="summary CSV to write (and its headline table, .md and .html, beside it)"
    )
    p.add_argument(
        "--target",
        action="append",
        default=[],
        metavar="MODE=FPS",
        type=_mode_target,
        help="frames/s per node a run of MODE must reach to pass, e.g. sarm=320 (repeatable; default: "
        + ", ".join(f"{m}={v}" for m, v in schema()["properties"]["targets"]["default"].items())
        + ")",
    )
    baseline = schema()["properties"]["baseline_loader"]
    p.add_argument(
        "--baseline",
        default=baseline["default"],
        type=_baseline,
        help="loader the ratio_to_baseline column compares with; lerobot: LeRobot's loader of the run's own kind; "
        f"one of {', '.join(baseline['anyOf'][0]['enum'])}, or LOADER@PEER (e.g. lerobot_map@old)",
    )
    thrash, floor = defaults("thrash"), defaults("shuffle_floor")
    for flag, default, text in (
        ("--thrash-hit-rate-below", thrash["hit_rate_below"], "decoder thrash: cache hit rate under this..."),
        ("--thrash-p99-ms-above", thrash["p99_ms_above"], "...and p99 item latency over this"),
        ("--floor-effective-batch", floor["effective_batch"], "a run whose batches are worth less fails"),
        ("--floor-effective-window", floor["effective_window"], "...and over 10 consecutive batches"),
        ("--floor-distinct-frames", floor["distinct_frames"], "...and one whose batches repeat more of their frames"),
    ):
        p.add_argument(flag, type=float, default=default, help=text)
    p.add_argument(
        "--prewarm",
        action="append",
        default=[],
        metavar="SOURCE=REPORT",
        type=_source_report,
        help="a source's prewarm check report: its runs get source_verdict (repeatable)",
    )
    p.add_argument("--predictions", default=None, help="predictions.csv: each run gets its prediction, bound and error")
    p.set_defaults(func=aggregate)


def _add_advise(sub) -> None:
    p = command(sub, "advise", help="per run: where the time went, its bound, and what would lift it (Markdown)")
    p.add_argument("results", nargs="?", default="results", help="the results directory (summary.csv, calibration/)")
    p.add_argument("--out", default=None, help="write the advice here (default: print it)")
    p.add_argument(
        "--verify",
        type=int,
        nargs="?",
        const=-1,
        default=None,
        metavar="N",
        help="run the top prescription of N runs (default: every run with one), the largest predicted gains first, "
        "each beside the run as it was in alternating legs on this machine; writes --verified",
    )
    p.add_argument(
        "--verified",
        default=None,
        help="the table of verified prescriptions: written by --verify (default RESULTS/advice/verified.csv), read "
        "without it (where it exists; 'none': not read)",
    )
    p.add_argument("--legs", type=int, default=3, help="--verify: legs each side, alternating (default: 3)")
    p.add_argument("--leg-s", type=float, default=4.0, help="--verify: seconds measured per leg (default: 4)")
    p.set_defaults(func=advise)


def _thrash(a) -> dict:
    given = {"hit_rate_below": a.thrash_hit_rate_below, "p99_ms_above": a.thrash_p99_ms_above}
    return {k: v for k, v in given.items() if v is not None}


def aggregate(a) -> None:
    from ..report.aggregate import SHUFFLE_MEASURES, aggregate

    df = aggregate(
        a.runs,
        a.out,
        targets=dict(a.target),
        baseline=a.baseline,
        thrash=_thrash(a),
        shuffle_floor={name: getattr(a, f"floor_{name}") for name in SHUFFLE_MEASURES},
        prewarm=dict(a.prewarm),
        predictions=a.predictions,
    )
    if str(a.out).endswith(".csv"):  # the headline table beside it (report/headline.py)
        from pathlib import Path

        from ..report import headline

        headline.write(df, Path(a.out).with_suffix(".md"))
    say(f"wrote {a.out} ({len(df)} runs, {int(df['pass'].sum())} pass their target)")


def conversion_table(a) -> None:
    from ..report.aggregate import conversion_table

    df = conversion_table(a.records, a.out)
    say(f"wrote {a.out} ({len(df)} conversions)")


def plot(a) -> None:
    from ..errors import UserError
    from ..report.plots import plot_all

    if a.outdir is None:
        raise UserError("--out-dir is required: the directory for the PNG files")
    for p in plot_all(a.summary, a.outdir, conversion=a.conversion, thrash=_thrash(a), only=a.only):
        say(f"wrote {p}")


def advise(a) -> None:
    from pathlib import Path

    import pandas as pd

    from .. import atomic
    from ..advice.prescribe import advise as write
    from ..advice.prescribe import read_specs
    from ..errors import UserError
    from ..model.calibration import Calibration

    results = Path(a.results)
    if not (results / "summary.csv").exists():
        raise UserError(f"{results}/summary.csv not found; run the workflow first (snakemake -c all)")
    if a.legs < 1 or a.leg_s <= 0:
        raise UserError("--legs must be at least 1 and --leg-s above 0")
    cals = {}
    for path in sorted(results.glob("calibration/*/*.json")):
        cal = Calibration.read(path)
        cals[(cal.dataset, cal.source)] = cal
    table = results / "tables/encodings.csv"
    summary, encodings = pd.read_csv(results / "summary.csv"), pd.read_csv(table) if table.exists() else None
    verified_path = Path(a.verified or results / "advice" / "verified.csv")
    verified = None
    if a.verify is not None:
        from ..advice.prove import verify

        limit = None if a.verify < 0 else a.verify
        verified = verify(results, summary, cals, encodings, legs=a.legs, duration_s=a.leg_s, limit=limit, say=say)
        verified_path.parent.mkdir(parents=True, exist_ok=True)
        with atomic.file(verified_path) as tmp:
            verified.to_csv(tmp, index=False)
        say(f"wrote {verified_path} ({len(verified)} prescription(s) tried)")
    elif a.verified != "none" and verified_path.exists():
        verified = pd.read_csv(verified_path)
    import psutil

    ram_mb = psutil.virtual_memory().total / 1e6  # the runs ran here (a SLURM job's advice: on a node of theirs)
    text = write(summary, cals, encodings, verified, read_specs(results), ram_mb)
    if a.out:
        atomic.write_text(a.out, text)
        say(f"{a.out}: advice on {text.count(chr(10) + '## ')} run(s)")
    else:
        print(text, end="")
