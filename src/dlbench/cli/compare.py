"""`dlbench compare BASE NEW`: what got slower (or faster) beyond the noise between two results; exit status 1 with
--fail-on-regression when anything did, so CI can gate a pull request on it."""

from __future__ import annotations

import argparse

from .common import command, say


def _metric_threshold(text: str) -> tuple[str, float]:
    metric, _, frac = text.partition("=")
    try:
        return metric, float(frac)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--metric-threshold {text!r}: expected METRIC=FRACTION, e.g. latency_p99_ms=0.25"
        ) from None


def add(sub) -> None:
    from ..report.compare import ALPHA, METRICS, THRESHOLD

    p = command(
        sub,
        "compare",
        help="two results (summary CSVs or results directories) -> compare.csv, plot; what regressed",
        description="Match the runs of BASE and NEW by scenario, dataset, source, loader, mode, batch size, workers, "
        "decode device, step, ranks and nodes; for each metric, the change and a verdict (regression, improvement, "
        "within noise): beyond --threshold and beyond the noise (a permutation test over the windows where a metric "
        "has them, else the runs' frames/s window spread). docs/compare.md.",
    )
    p.add_argument("base", help="the reference: summary.csv, a results directory, or a run directory")
    p.add_argument("new", help="the candidate, as BASE")
    p.add_argument("--out", default=None, help="compare.csv to write (default: none)")
    p.add_argument("--plot", default=None, help="PNG to draw the comparison into (default: none)")
    p.add_argument(
        "--threshold", type=float, default=THRESHOLD, help="smallest change flagged, as a fraction (0.1: 10%%)"
    )
    p.add_argument(
        "--metric-threshold",
        action="append",
        default=[],
        type=_metric_threshold,
        metavar="METRIC=FRAC",
        help="a metric's own threshold (repeatable); metrics: " + ", ".join(m.name for m in METRICS),
    )
    p.add_argument("--alpha", type=float, default=ALPHA, help="significance level of the windows' permutation test")
    p.add_argument("--all", action="store_true", help="print every run and metric, not only the flagged ones")
    p.add_argument("--fail-on-regression", action="store_true", help="exit with status 1 if anything regressed")
    p.set_defaults(func=compare)


def compare(a) -> int:
    from ..report.compare import compare, describe, regressions

    table = compare(
        a.base,
        a.new,
        a.out,
        a.plot,
        threshold=a.threshold,
        alpha=a.alpha,
        thresholds=dict(a.metric_threshold),
    )
    print(describe(table, every=a.all), flush=True)
    for path in (a.out, a.plot):
        if path:
            say(f"wrote {path}")
    found = regressions(table)
    if found.empty:
        return 0
    say(f"{len(found)} regression(s) beyond {a.threshold:.0%} and the noise")
    return 1 if a.fail_on_regression else 0
