"""Compare two benchmark results (base and new) run by run: what got slower beyond the noise.

Runs are matched by KEY. For each metric in METRICS the change is `new / base - 1` (for `data_wait_frac`, a
fraction already, `new - base`), and the verdict is one of:
- `regression` / `improvement`: the change is worse / better than `threshold` (and than the metric's `floor`, its
  resolution) AND beyond the noise;
- `within noise`: anything else.

Beyond the noise, by what the runs hold:
- metrics measured per window (frames/s per node; data wait and latency percentiles where the windows carry
  them): a one-sided exact
  permutation test of the windows' ranks (Mann-Whitney U) in the direction of the change, p <= `alpha`. With 3
  windows a side its smallest p is 1/20 = 0.05, so at the default alpha it says "beyond the noise" only when every
  window of one run lies beyond every window of the other. With too few windows for the test to reach `alpha`,
  the rule below applies;
- metrics with one value per run (first batch, peak memory, remote requests; latency percentiles of summaries
  from before their windows were kept): their own
  noise is unknown, so the change must also exceed the larger relative spread ((max - min) / median) of either
  run's frames/s windows: how noisy the machine was while these runs ran, a proxy stated in the `test` column.

A run ok in base that failed in new, or that delivers wrong frames where base delivered none, is a regression
whatever the numbers. Runs on one side only are listed (verdict `only in base` / `only in new`). Environment rows
(metric `env:<name>`, verdict `differs`) name the versions, hosts and cores that differ between the two sides.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .. import atomic
from ..errors import UserError
from ..run.spec import IDENTITY

if TYPE_CHECKING:  # pandas (the workflow extra) only when comparing: `dlbench --help` lists this command without it
    import pandas as pd

KEY = ["scenario", *IDENTITY, "world_size", "nodes"]  # a run, matched across the two results
LATER_AXES = ("ray_shuffle", "daft_shuffle", "policy")  # axes added after summaries were written: absent there, unset
COLUMNS = [*KEY, "run_id", "metric", "base", "new", "change", "noise", "p_value", "test", "verdict"]
THRESHOLD = 0.10  # a 10% change; below it nothing is flagged however clean the runs
ALPHA = 0.05
REGRESSION, IMPROVEMENT, WITHIN = "regression", "improvement", "within noise"
PERMUTATIONS = 20_000  # above this many rank splits, a seeded random sample of them


@dataclass(frozen=True)
class Metric:
    name: str  # summary.csv column
    higher_is_better: bool = False
    absolute: bool = False  # change as new - base (a fraction), not new / base - 1
    floor: float = 0.0  # changes smaller than this (in the metric's unit) are below its resolution
    windows: str | None = None  # summary.csv column with its per-window values (JSON list)


METRICS = (
    Metric("frames_per_s_node", higher_is_better=True, windows="window_frames_per_s"),
    # a streaming loader's p50 is near zero: its relative change is noise
    Metric("latency_p50_ms", floor=0.1, windows="window_latency_p50_ms"),
    Metric("latency_p95_ms", floor=0.1, windows="window_latency_p95_ms"),
    Metric("latency_p99_ms", floor=0.1, windows="window_latency_p99_ms"),
    Metric("first_batch_latency_s", floor=0.05),
    Metric("peak_pss_mb", floor=16.0),
    Metric("data_wait_frac", absolute=True, windows="window_data_wait_frac"),
    Metric("remote_requests_per_kframe", floor=0.5),
)
ENV_KEYS = ("dlbench", "lerobot", "torch", "torchcodec", "ffmpeg", "python", "cores")


# ------------------------------------------------------------------------------------------------ reading
def load(path: str | Path) -> dict[tuple, pd.Series]:
    """Summary rows, by their KEY, from a summary CSV, a results directory (its runs' rank records, aggregated
    here) or one run directory; errors name the path."""
    import pandas as pd

    from .aggregate import aggregate

    path = Path(path)
    if path.is_file():
        try:
            df = pd.read_csv(path)
        except (ValueError, OSError) as e:
            raise UserError(f"{path}: not a readable summary CSV ({e})") from None
    elif path.is_dir():
        runs = sorted({p.parent for p in (path / "runs" if (path / "runs").is_dir() else path).rglob("run.json")})
        if runs:
            df = aggregate(runs, None)
        elif (path / "summary.csv").is_file():
            return load(path / "summary.csv")
        else:
            raise UserError(f"{path}: no run directories (with run.json) and no summary.csv; give a results directory")
    else:
        raise UserError(f"{path}: no such file or directory; give a summary CSV or a results directory")
    for axis in LATER_AXES:  # an axis added later: a summary written before it ran every run with it unset
        if axis not in df:
            df[axis] = None
    missing = [k for k in [*KEY, "status", "frames_per_s_node"] if k not in df]
    if missing:
        raise UserError(f"{path}: lacks the columns {missing}; give a summary.csv written by `dlbench aggregate`")
    runs = {}
    for _, row in df.iterrows():
        key = tuple(_norm(row[k]) for k in KEY)
        if key in runs:
            raise UserError(f"{path}: two runs share the key {dict(zip(KEY, key))}; keep one of them")
        runs[key] = row
    return runs


def _norm(v) -> str:
    """A key value as text, so 4, 4.0 and "4" (CSV vs records) match."""
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if v is None or v != v:  # NaN: an empty CSV cell
        return ""
    return str(v)


def windows(row: pd.Series, metric: Metric) -> np.ndarray | None:
    """The metric's per-window values of a run (None where there are none). A summary from before the window
    columns holds, for 3 repeats, all three frames/s windows as min, median and max."""
    text = row.get(metric.windows) if metric.windows else None
    if isinstance(text, str) and text.strip():
        try:
            return np.asarray(json.loads(text), dtype=float)
        except (ValueError, TypeError):
            raise UserError(f"summary column {metric.windows}: {text!r} is not a JSON list of numbers") from None
    if metric.name == "frames_per_s_node" and row.get("repeats") == 3 and "frames_per_s_min" in row:
        return np.array([row["frames_per_s_min"], row["frames_per_s_node"], row["frames_per_s_max"]], dtype=float)
    return None


# ------------------------------------------------------------------------------------------------ the test
def permutation_p(base: np.ndarray, new: np.ndarray, new_lower: bool) -> float:
    """One-sided exact permutation p of the rank sum of `new` (Mann-Whitney U; ties get mid-ranks): the chance that
    a random split of the pooled windows puts `new` as low (`new_lower`) or as high as observed."""
    pooled = np.concatenate([base, new])
    ranks = _midranks(pooled)
    n, total = len(new), len(pooled)
    observed = ranks[len(base) :].sum()
    if math.comb(total, n) <= PERMUTATIONS:
        sums = np.array([ranks[list(c)].sum() for c in itertools.combinations(range(total), n)])
    else:
        rng = np.random.default_rng(0)
        sums = np.array([rng.permutation(ranks)[:n].sum() for _ in range(PERMUTATIONS)])
    eps = 1e-9
    return float(np.mean(sums <= observed + eps) if new_lower else np.mean(sums >= observed - eps))


def _midranks(values: np.ndarray) -> np.ndarray:
    """Ranks from 1; tied values share the mean of their ranks."""
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values))
    ranks[order] = np.arange(1, len(values) + 1)
    for v in np.unique(values):
        tied = values == v
        ranks[tied] = ranks[tied].mean()
    return ranks


def _float(v) -> float:
    """A summary cell as a number (NaN where empty or not numeric)."""
    try:
        return float(v)
    except (TypeError, ValueError):
        return float("nan")


def spread(values: np.ndarray | None, absolute: bool = False) -> float:
    """(max - min) of the windows, over their median unless `absolute`; NaN without two windows."""
    if values is None or len(values) < 2:
        return float("nan")
    width = float(values.max() - values.min())
    if absolute:
        return width
    median = float(np.median(values))
    return width / median if median else float("nan")


def judge(
    metric: Metric,
    base: float,
    new: float,
    base_w: np.ndarray | None,
    new_w: np.ndarray | None,
    machine_noise: float,
    threshold: float,
    alpha: float = ALPHA,
) -> dict:
    """change, noise, p_value, test and verdict of one metric of one run (see the module docstring)."""
    if metric.absolute:
        change = new - base
    elif base:
        change = new / base - 1
    else:
        change = 0.0 if new == base else math.copysign(math.inf, new - base)
    worse = -change if metric.higher_is_better else change
    p = float("nan")
    testable = (
        base_w is not None
        and new_w is not None
        and min(len(base_w), len(new_w)) >= 2
        and 1 / math.comb(len(base_w) + len(new_w), len(new_w)) <= alpha
    )
    if testable:
        noise = max(spread(base_w, metric.absolute), spread(new_w, metric.absolute))
        p = permutation_p(base_w, new_w, new_lower=change < 0)
        beyond_noise = p <= alpha
        test = f"permutation (Mann-Whitney) {len(base_w)}v{len(new_w)} windows, p <= {alpha:g}"
    elif not metric.absolute and not math.isnan(machine_noise):
        noise = machine_noise
        beyond_noise = abs(change) > noise
        test = "threshold + frames/s window spread (one value per run: own noise unknown)"
    else:
        noise = float("nan")
        beyond_noise = True
        test = "threshold only (noise unknown)"
    flagged = abs(change) > threshold and abs(new - base) > metric.floor and beyond_noise
    verdict = WITHIN if not flagged else REGRESSION if worse > 0 else IMPROVEMENT
    return {"change": change, "noise": noise, "p_value": p, "test": test, "verdict": verdict}


# ------------------------------------------------------------------------------------------------ the table
def compare(
    base: str | Path,
    new: str | Path,
    out_csv: str | Path | None = None,
    plot_path: str | Path | None = None,
    threshold: float = THRESHOLD,
    alpha: float = ALPHA,
    thresholds: dict[str, float] | None = None,
) -> pd.DataFrame:
    """The comparison table (COLUMNS) of two results (summary CSVs, results or run directories); writes `out_csv`
    and the plot `plot_path` where given. `thresholds` overrides `threshold` per metric name."""
    import pandas as pd

    if not 0 <= threshold:
        raise UserError(f"--threshold {threshold}: must be >= 0 (a fraction: 0.1 is 10%)")
    known = {m.name for m in METRICS}
    unknown = sorted(set(thresholds or {}) - known)
    if unknown:
        raise UserError(f"--metric-threshold {unknown[0]}: not a compared metric; choose one of {sorted(known)}")
    b, n = load(base), load(new)
    rows = []
    for key in [k for k in b if k in n]:
        rows += _compare_run(b[key], n[key], threshold, alpha, thresholds or {})
    for side, runs, other in (("only in base", b, n), ("only in new", n, b)):
        rows += [{**_key_cols(row), "metric": "", "verdict": side} for key, row in runs.items() if key not in other]
    rows += [{**dict.fromkeys(KEY, ""), **env} for env in environment_diff(b, n)]
    table = pd.DataFrame(rows, columns=COLUMNS)
    if out_csv is not None:
        with atomic.file(out_csv) as tmp:
            table.to_csv(tmp, index=False)
    if plot_path is not None:
        plot(table, plot_path, f"{base}  →  {new}", threshold)
    return table


def _key_cols(row: pd.Series) -> dict:
    return {**{k: row[k] for k in KEY}, "run_id": row.get("run_id", "")}


def _compare_run(b: pd.Series, n: pd.Series, threshold: float, alpha: float, thresholds: dict) -> list[dict]:
    from .aggregate import VERIFIED_STATUSES

    head = _key_cols(n)
    ok_b, ok_n = b["status"] in VERIFIED_STATUSES, n["status"] in VERIFIED_STATUSES
    if not (ok_b and ok_n):
        verdict = REGRESSION if ok_b else IMPROVEMENT if ok_n else WITHIN
        return [{**head, "metric": "status", "base": b["status"], "new": n["status"], "verdict": verdict}]
    rows = []
    wrong_b, wrong_n = (_float(r.get("frames_wrong")) for r in (b, n))
    wrong_b, wrong_n = (0 if math.isnan(w) else int(w) for w in (wrong_b, wrong_n))
    if wrong_n and not wrong_b:
        rows.append({**head, "metric": "frames_wrong", "base": wrong_b, "new": wrong_n, "verdict": REGRESSION})
    fps = METRICS[0]
    machine_noise = max(spread(windows(b, fps)), spread(windows(n, fps)))  # NaN where neither has windows
    for m in METRICS:
        vb, vn = _float(b.get(m.name)), _float(n.get(m.name))
        if math.isnan(vb) and math.isnan(vn):
            continue  # not measured on either side (an unmetered source)
        row = {**head, "metric": m.name, "base": vb, "new": vn}
        if math.isnan(vb) or math.isnan(vn):
            rows.append({**row, "verdict": "measured on one side only"})
            continue
        t = thresholds.get(m.name, threshold)
        rows.append({**row, **judge(m, vb, vn, windows(b, m), windows(n, m), machine_noise, t, alpha)})
    return rows


def _environments(runs: dict[tuple, pd.Series]) -> dict[str, set[str]]:
    """Every value each environment key (and `host`) takes over a side's runs."""
    seen: dict[str, set[str]] = {}
    for row in runs.values():
        text = row.get("environment")
        try:
            env = json.loads(text) if isinstance(text, str) and text else {}
        except ValueError:
            env = {}
        for k in ENV_KEYS:
            seen.setdefault(k, set()).add(str(env.get(k, "unknown")))
        for host in str(row.get("hosts", "") or "").split(";"):
            if host and host != "nan":
                seen.setdefault("host", set()).add(host)
    return seen


def environment_diff(base: dict[tuple, pd.Series], new: dict[tuple, pd.Series]) -> list[dict]:
    """`env:<name>` rows for each version, host set or core count that is not the same on both sides."""
    eb, en = _environments(base), _environments(new)
    out = []
    for k in [*ENV_KEYS, "host"]:
        vb, vn = eb.get(k, {"unknown"}), en.get(k, {"unknown"})
        if vb != vn:
            out.append({"metric": f"env:{k}", "base": ";".join(sorted(vb)), "new": ";".join(sorted(vn))})
            out[-1]["verdict"] = "differs"
    return out


def regressions(table: pd.DataFrame) -> pd.DataFrame:
    return table[table["verdict"] == REGRESSION]


def describe(table: pd.DataFrame, every: bool = False) -> str:
    """The table as text: the flagged rows (all rows with `every`), the runs on one side, the environment."""
    metric_rows = table[~table["verdict"].isin(["only in base", "only in new", "differs"])]
    shown = metric_rows if every else metric_rows[metric_rows["verdict"].isin([REGRESSION, IMPROVEMENT])]
    lines = []
    if len(shown):
        view = shown[["scenario", "run_id", "metric", "base", "new", "change", "noise", "p_value", "verdict"]].copy()
        for col in ("base", "new"):
            view[col] = [_num(v) for v in view[col]]
        view["change"] = [_change(c, m) for c, m in zip(view["change"], view["metric"])]
        view["noise"] = [_change(c, m, sign=False) for c, m in zip(view["noise"], view["metric"])]
        view["p_value"] = [_num(v) for v in view["p_value"]]
        lines.append(view.to_string(index=False))
    counts = metric_rows["verdict"].value_counts()
    runs = metric_rows[["scenario", "run_id"]].drop_duplicates()
    lines.append(
        f"{len(runs)} runs matched: "
        + ", ".join(f"{counts.get(v, 0)} {v}" for v in (REGRESSION, IMPROVEMENT, WITHIN))
        + " (run x metric)"
    )
    for side in ("only in base", "only in new"):
        for _, r in table[table["verdict"] == side].iterrows():
            lines.append(f"{side}: {r['scenario']} · {r['run_id']}")
    for _, r in table[table["verdict"] == "differs"].iterrows():
        lines.append(f"environment differs: {r['metric'][4:]} {r['base']} -> {r['new']}")
    return "\n".join(lines)


def _num(v) -> str:
    if isinstance(v, str):
        return v
    return "" if math.isnan(_float(v)) else f"{_float(v):.4g}"


def _change(c, metric: str, sign: bool = True) -> str:
    if math.isnan(_float(c)):
        return ""
    absolute = any(m.absolute for m in METRICS if m.name == metric)
    fmt = ("{:+.3f}" if sign else "{:.3f}") if absolute else ("{:+.1%}" if sign else "{:.1%}")
    return fmt.format(c)


# ------------------------------------------------------------------------------------------------ the plot
VERDICT_COLORS = {REGRESSION: "#d62728", IMPROVEMENT: "#2ca02c", WITHIN: "#e8e8e8"}


def plot(table: pd.DataFrame, path: str | Path, title: str, threshold: float) -> Path:
    """A grid: one row per matched run, one column per metric; each cell the change, coloured by its verdict.
    Runs on one side only and environment differences are listed under it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    cells = table[table["metric"].isin([m.name for m in METRICS])]
    runs = list(dict.fromkeys(zip(cells["scenario"], cells["run_id"])))
    metrics = [m.name for m in METRICS if m.name in set(cells["metric"])]
    notes = [f"{r['verdict']}: {r['scenario']} · {r['run_id']}" for _, r in table.iterrows() if "only" in r["verdict"]]
    notes += [
        f"environment: {r['metric'][4:]} {r['base']} → {r['new']}"
        for _, r in table.iterrows()
        if r["verdict"] == "differs"
    ]
    notes += [
        f"{r['scenario']} · {r['run_id']}: {r['metric']} {r['base']} → {r['new']} (regression)"
        for _, r in table.iterrows()
        if r["metric"] in ("status", "frames_wrong")
    ]
    height = 1.6 + 0.42 * max(len(runs), 1) + 0.22 * len(notes)
    fig, ax = plt.subplots(figsize=(2.2 + 1.25 * max(len(metrics), 1) + 2.5, height))
    full = (
        f"{title}\nchange per run and metric: red regression, green improvement (beyond {threshold:.0%} "
        f"and the noise), grey within noise"
    )
    ax.set_title(full, fontsize=9)
    by = {(r["scenario"], r["run_id"], r["metric"]): r for _, r in cells.iterrows()}
    for i, run in enumerate(runs):
        for j, metric in enumerate(metrics):
            r = by.get((*run, metric))
            if r is None:
                continue
            ax.add_patch(Rectangle((j, i), 1, 1, color=VERDICT_COLORS.get(r["verdict"], "white"), ec="white"))
            ax.text(
                j + 0.5, i + 0.5, _change(r["change"], metric) or r["verdict"], ha="center", va="center", fontsize=8
            )
    ax.set_xlim(0, max(len(metrics), 1))
    ax.set_ylim(max(len(runs), 1), 0)
    ax.set_xticks([j + 0.5 for j in range(len(metrics))], metrics, rotation=30, ha="right", fontsize=8)
    ax.set_yticks([i + 0.5 for i in range(len(runs))], [f"{s} · {r}" for s, r in runs], fontsize=8)
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    if not runs:
        ax.text(0.5, 0.5, "no run is on both sides", ha="center", va="center", transform=ax.transAxes)
    if notes:
        fig.text(0.01, 0.0, "\n".join(notes[:20]), ha="left", va="top", fontsize=8)
    path = Path(path)
    atomic.make_dir(path.parent)
    with atomic.file(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path
