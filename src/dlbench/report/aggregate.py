"""Aggregate rank records into `summary.csv`: one row per run (a scenario and its run id).

Totals are the sum over ranks; per-node figures are the totals over the distinct hosts the ranks ran on (`hosts`),
so two ranks that shared one machine count as one node; a run that got fewer hosts than its configured `nodes` says
so in `notes`. Each rank measures `repeats` windows back to back: `frames_per_s_node` is the median window (summed
over ranks) where the windows agree, else what they delivered in all (`bench.rates.ranks_rate`),
`frames_per_s_min` and `frames_per_s_max` the spread. Derived columns:
- `scaling_efficiency`: per-node frames/s of a run over that of the 1-rank run with the same source, loader,
  mode, batch size, workers and decode device (1.0 is perfect scaling across nodes; with several ranks on one
  node it says how much the node gains from them);
- `data_wait_frac`: the share of the steady windows the slowest rank's consumer spent blocked on its next batch,
  holding each batch for `step_ms` (a training step); `data_wait_frac_median` is the median rank's;
- `ratio_to_baseline`: frames/s per node over that of the baseline loader on the same dataset, source, mode, step
  and world size (`baseline_run` names the run compared with); by default LeRobot's loader of the run's own
  kind, so map-style runs are compared with lerobot_map and streaming runs with lerobot_stream;
  `effective_frames_per_s_node` (frames/s x effective / nominal batch size over one batch, at most 1: what
  training gets) and `effective_ratio_to_baseline` (the same over the baseline run's);
- `shuffle_effective_batch`, `shuffle_effective_window`: effective / nominal batch size over one batch and over 10
  consecutive batches (Kish's design effect on the delivered frames' thumbnails and numeric features, the lower of
  the two; `bench.checks.effective`), `shuffle_distinct_frames` (distinct frames over frames held in a batch); the
  diagnostics `shuffle_randomness` (distinct episodes per batch) and `shuffle_spread` (how far apart one
  episode's items in a batch are); `baseline_shuffle`: beside the ratio, what the run gave up (or gained) against
  its baseline run where a measure differs by more than 0.1; `shuffle_floor` is the floor a run must reach to pass;
- `decoder_thrash`: the decoder cache hit rate is low and p99 latency high at once (decoders reopened and
  re-seeked instead of reused);
- `worker_bound`: the DataLoader delivers at least 80% of `num_workers` x the single-process probe rate, so every
  worker is busy and more workers (or faster decoding) would raise throughput;
- `remote_requests_per_kframe`, `remote_mb_per_kframe`, `read_amplification`, `remote_throttled`: what the storage
  served over the steady windows, counted at each rank's metering proxy (`bench.remote`), per 1,000 delivered
  frames; amplification is bytes read over the bytes an ideal reader needs;
- `source_verdict`: the prewarm check's verdict (warm or cold) for runs on a checked source;
- `predicted_frames_per_s_node`, `bound`, `prediction_error`: the model's prediction of the run from its dataset
  and source's calibration (results/predictions.csv, made before the bench jobs; docs/model.md), what it says sets
  the rate, and (predicted - measured) / measured; a miss over 25% says so in `notes`;
- `window_frames_per_s`, `window_data_wait_frac`, `window_latency_p50_ms` (p95, p99): the per-window values behind
  the run's figures (JSON lists), so `dlbench compare` can test a change against the windows' noise from a summary
  alone; `environment`: the
  versions (and cores, where records carry them) of the run's first rank (JSON);
- `pass`: per-node decoded frames/s reaches the mode's target with no wrong frame, shuffling above the floor;
  `notes` says why a run fails or what limits it (below target, wrong frames, shuffle below the floor or against
  its baseline, decoder thrash, worker-bound, measured on a cold source).

Conversion timings (`dlbench convert run --record`) aggregate into their own table, `conversion_table`.
"""

from __future__ import annotations

import json
from collections import defaultdict
from functools import lru_cache
from pathlib import Path
from statistics import fmean

import jsonschema
import numpy as np
import pandas as pd

from .. import atomic
from .. import floor as shortfalls
from ..bench import record as recordmod
from ..bench.checks.effective import WINDOW_BATCHES, effective_ratio, lowest, pooled
from ..bench.rates import ranks_rate, window_totals
from ..config import defaults, schema
from ..errors import UserError
from ..model.equations import BOUNDS
from ..run.loaders import SAME_KIND, baseline_loader
from ..run.spec import IDENTITY

WORKER_BOUND_FRAC = 0.8  # of num_workers x the single-process probe rate
RECORD_SCHEMA = Path(__file__).parents[1] / "schemas" / "record.schema.json"
RUN_KEYS = ("scenario", *IDENTITY)  # a run in summary.csv: its scenario and the schema's axes, with its source
SCALING_KEY = list(IDENTITY)  # the same run across scenarios
RUN_KEY_DEFAULTS = {"step_ms": 0}  # for records made before the key existed
VERIFIED_STATUSES = ("ok", "unverified")
REMOTE_COLUMNS = (
    "remote_requests_per_kframe",
    "remote_mb_per_kframe",
    "read_amplification",
    "remote_throttled",
)  # measured; "unverified" runs checked no frame and never pass


def run_id(config: dict) -> str:
    """The run id a record was made under (its spec's), or, for records without one, as `dlbench.run.spec` builds it."""
    from ..run.spec import run_id as build

    return config.get("run_id") or build({"dataset": "adhoc", **config})


def load_record(path: str | Path) -> dict:
    """Read a rank record and check it has what aggregation needs; errors name the file."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path}: rank record missing; rerun the bench job that writes it")
    try:
        rec = recordmod.read(path)
    except ValueError as e:
        raise UserError(f"{path}: not a valid record ({e}); delete it and rerun its bench job") from None
    error = jsonschema.exceptions.best_match(_record_validator().iter_errors(rec))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "the record"
        raise UserError(
            f"{path}: {where}: {error.message} (schema {RECORD_SCHEMA.name}); delete it and rerun its bench job"
        )
    return rec


@lru_cache(maxsize=1)
def _record_validator():
    return jsonschema.Draft202012Validator(json.loads(RECORD_SCHEMA.read_text()))


def rank_files(path: str | Path) -> list[Path]:
    """The rank records of a run directory (as listed by its run.json), or `path` itself if it is a record."""
    path = Path(path)
    if not path.is_dir():
        return [path]
    manifest = path / "run.json"
    if not manifest.exists():
        raise UserError(f"{manifest}: missing, so the run did not finish; rerun its bench job")
    try:
        ranks = json.loads(manifest.read_text())["ranks"]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise UserError(f"{manifest}: malformed ({type(e).__name__}: {e}); rerun its bench job") from None
    return [path / name for name in ranks]


def aggregate(
    paths: list[str | Path],
    out: str | Path | None,
    targets: dict | None = None,
    baseline: str = SAME_KIND,
    thrash: dict | None = None,
    prewarm: dict[str, str | Path] | None = None,
    predictions: str | Path | None = None,
    shuffle_floor: dict | None = None,
) -> pd.DataFrame:
    """One summary row per run from run directories (or rank record files); writes `out` (CSV) unless None.

    `prewarm` maps "source/dataset" to its prewarm check report; runs on that pair get `source_verdict`.
    `predictions` (predictions.csv) gives each run its predicted frames/s, bound and the error. `shuffle_floor`
    ({effective_batch, effective_window, distinct_frames}; config.yaml's `shuffle_floor`): a run whose batches
    are worth less to training does not pass."""
    floor = {**defaults("shuffle_floor"), **(shuffle_floor or {})}
    verdicts = {}
    for source, report in (prewarm or {}).items():
        try:
            verdicts[source] = json.loads(Path(report).read_text())["verdict"]
        except (OSError, ValueError, KeyError) as e:
            raise UserError(f"{report}: not a readable prewarm report ({e}); delete it and rerun its check") from None
    targets = {**schema()["properties"]["targets"]["default"], **(targets or {})}
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for p in paths:
        for f in rank_files(p):
            rec = load_record(f)
            groups[(rec["config"]["scenario"], run_id(rec["config"]))].append(rec)
    rows = []
    for (scenario, rid), recs in sorted(groups.items()):
        cfg = recs[0]["config"]
        world = recs[0]["world_size"]
        ok = [r for r in recs if r.get("status", "ok") in VERIFIED_STATUSES]
        statuses = {r.get("status", "ok") for r in recs}
        if len(ok) == world:
            status = "ok" if sum(r["metrics"]["frames_verified"] for r in ok) else "unverified"
        else:
            status = "skipped" if statuses == {"skipped"} else "failed" if "failed" in statuses else "incomplete"
        hosts = sorted({r["host"] for r in ok if r.get("host")})
        configured = cfg.get("nodes") or world
        row = {
            "scenario": scenario,
            "run_id": rid,
            **{k: cfg.get(k, RUN_KEY_DEFAULTS.get(k)) for k in RUN_KEYS[1:]},
            "world_size": world,
            "nodes": configured,
            "hosts": ";".join(hosts),
            "ranks": len(recs),
            "status": status,
            "source_verdict": verdicts.get(f"{cfg.get('source')}/{cfg.get('dataset')}", ""),
            "reason": "; ".join(sorted({r.get("reason", "") for r in recs if r.get("reason")})),
            "environment": json.dumps(_environment(recs[0]), sort_keys=True),
        }
        if ok:
            nodes = len(hosts) or configured
            row.update(_measured(ok, nodes), nodes_used=nodes)
            notes = [r["metrics"]["work_note"] for r in ok if r["metrics"].get("work_note")]
            row["work_note"] = "; ".join(dict.fromkeys(notes))  # each rank's, once
        target = step_target(row) if row["step_ms"] else targets.get(cfg.get("mode"))
        row["target_frames_per_s_node"] = target
        row["pass"] = bool(
            status == "ok"
            and target is not None
            and row["frames_per_s_node"] >= target
            and row["frames_verified"] > 0
            and row["frames_wrong"] == 0
            and not shuffle_shortfall(row, floor)
        )
        row["shuffle_floor"] = json.dumps(floor, sort_keys=True)
        rows.append(row)
    df = derive(with_predictions(pd.DataFrame(rows), predictions), baseline, {**defaults("thrash"), **(thrash or {})})
    if out is not None:
        with atomic.file(out) as tmp:
            df.to_csv(tmp, index=False)
    return df


PREDICTION_MISS = 0.25  # a run the model missed by more than this share says so in its notes


def with_predictions(df: pd.DataFrame, predictions: str | Path | None) -> pd.DataFrame:
    """Each run's prediction (predictions.csv, made from the calibrations before the bench jobs): the predicted
    frames/s, `bound` (what the model says sets the rate) and `prediction_error` ((predicted - measured) /
    measured)."""
    if predictions is None or df.empty:
        return df
    try:
        pred = pd.read_csv(predictions)
    except (OSError, ValueError) as e:
        raise UserError(f"{predictions}: not a readable predictions table ({e}); delete it and rerun") from None
    keep = ["scenario", "run_id", "predicted_frames_per_s_node", "predicted_bound", "prediction_note"]
    df = df.merge(pred[[c for c in keep if c in pred]], on=["scenario", "run_id"], how="left")
    df = df.rename(columns={"predicted_bound": "bound"})
    measured = df["frames_per_s_node"] if "frames_per_s_node" in df else float("nan")
    df["prediction_error"] = (df["predicted_frames_per_s_node"] - measured) / measured
    return df


def _prediction_note(row: pd.Series) -> str:
    """Where the model missed the measured rate by more than PREDICTION_MISS: by how much, and what it said
    bounds the run, beside what the run measured of the same terms."""
    err = row.get("prediction_error")
    if err is None or pd.isna(err) or abs(err) <= PREDICTION_MISS:
        return ""
    cpu = [
        f"{name} {row[col]:.2f} ms/sample"
        for name, col in (("main", "main_cpu_ms_per_sample"), ("workers", "worker_cpu_ms_per_sample"))
        if col in row and pd.notna(row[col])
    ]
    measured = f" (measured CPU: {', '.join(cpu)})" if cpu else ""
    return (
        f"model off by {err:+.0%}: predicted {row['predicted_frames_per_s_node']:.0f} frames/s, bound by "
        f"{row['bound']}{measured}"
    )


def _environment(rec: dict) -> dict:
    """What a rank ran with: its versions (with its usable cores and LeRobot's version, where the record has them)."""
    return dict(rec.get("versions") or {})


def _per_window(recs: list[dict], value, combine=max) -> list[float] | None:
    """`value(window)` in each window, combined over the ranks (the slowest rank's by default); None where a record
    lacks per-window figures (`value` raises KeyError: records from before they were kept)."""
    per_rank = []
    for r in recs:
        windows = r["metrics"].get("windows") or []
        try:
            per_rank.append([float(value(w)) for w in windows])
        except KeyError:
            return None
        if not windows:
            return None
    n = min(len(w) for w in per_rank)
    return [float(combine(w[i] for w in per_rank)) for i in range(n)]


def _window_columns(recs: list[dict]) -> dict:
    """The per-window JSON columns `dlbench compare` tests changes against (empty where the records lack them)."""
    columns = {
        "window_data_wait_frac": (lambda w: w["data_wait_s"] / w["seconds"], max, 5),
        # as the run's own columns: p50 and p95 the ranks' mean, p99 the slowest rank's
        "window_latency_p50_ms": (lambda w: w["latency_p50_ms"], fmean, 4),
        "window_latency_p95_ms": (lambda w: w["latency_p95_ms"], fmean, 4),
        "window_latency_p99_ms": (lambda w: w["latency_p99_ms"], max, 4),
    }
    out = {}
    for name, (value, combine, digits) in columns.items():
        values = _per_window(recs, value, combine)
        out[name] = json.dumps([round(v, digits) for v in values]) if values else ""
    return out


def _window_totals(recs: list[dict]) -> np.ndarray | None:
    """Samples/s of the run in each of its windows, summed over ranks (None for records without windows)."""
    per_rank = [r["metrics"].get("windows") for r in recs]
    return window_totals(per_rank) if all(per_rank) else None


SPLIT_COLUMNS = ("split_fetch_ms", "split_decode_ms", "split_assembly_ms", "split_idle_ms")


def _node_memory(recs: list[dict]) -> float:
    """The most memory (MB) one node's ranks held: each node's ranks' peaks summed (they ran at once; peaks that did
    not coincide make it an upper bound), the largest node's. A loader whose processes serve every rank of a node
    (Ray's) counts them in the node's first rank only (bench/adapters/ray_data.py)."""
    per_host: dict[str, float] = {}
    for r in recs:
        per_host[r.get("host", "")] = per_host.get(r.get("host", ""), 0.0) + float(r["metrics"]["peak_pss_mb"])
    return max(per_host.values())


def _measured(ok: list[dict], nodes: int) -> dict:
    """A run's measured columns from its rank records; per-node figures over `nodes` hosts."""
    m = pd.DataFrame([r["metrics"] for r in ok]).drop(
        columns=[
            "image_shape",
            "worker_start_method",
            "windows",
            "consumer_device",
            "work_note",
            "shuffle_batch_means",
        ],
        errors="ignore",
    )
    m = m.apply(pd.to_numeric, errors="coerce")  # None (a loader without cache counters) -> NaN
    samples = _window_totals(ok)
    fpi = ok[0]["metrics"].get("frames_per_sample", 1)
    if samples is None:  # records without windows: their own headline figures
        samples = np.array([m["samples_per_s"].sum()])
        fpi = m["frames_per_s_node"].sum() / samples[0] if samples[0] else 1
        rate = float(np.median(samples))
    else:  # the windows' median where they agree, else what the windows delivered in all (bench.rates)
        rate = ranks_rate([r["metrics"]["windows"] for r in ok], ok[0]["config"].get("precision") or 0.0)
    frames = samples * fpi
    col = lambda name: m[name] if name in m else pd.Series([float("nan")])  # noqa: E731
    return {
        "frames_per_s_node": rate * fpi / nodes,
        "frames_per_s_min": float(frames.min()) / nodes,
        "frames_per_s_max": float(frames.max()) / nodes,
        "repeats": len(frames),
        "window_frames_per_s": json.dumps([round(float(f) / nodes, 3) for f in frames]),
        **_window_columns(ok),
        "samples_per_s_node": rate / nodes,
        "frames_per_s_total": rate * fpi,
        "samples_per_s_total": rate,
        "first_batch_latency_s": m["first_batch_latency_s"].max(),
        "data_wait_frac": col("data_wait_frac").max(),  # the slowest rank's: the one a synchronous step waits for
        "data_wait_frac_median": col("data_wait_frac").median(),
        "batch_interval_p50_ms": col("batch_interval_p50_ms").mean(),
        "batch_interval_p95_ms": col("batch_interval_p95_ms").mean(),
        "batch_interval_p99_ms": col("batch_interval_p99_ms").max(),
        "latency_p50_ms": m["latency_p50_ms"].mean(),
        "latency_p95_ms": m["latency_p95_ms"].mean(),
        "latency_p99_ms": m["latency_p99_ms"].max(),
        "peak_pss_mb": m["peak_pss_mb"].max(),
        "peak_pss_node_mb": _node_memory(ok),
        **{f"shuffle_{name}": col(f"shuffle_{name}").mean() for name in SHUFFLE_MEASURES + SHUFFLE_DIAGNOSTICS},
        **_pooled_effective(ok),
        "cache_hit_rate": m["cache_hit_rate"].mean(),
        "frames_verified": int(m["frames_verified"].sum()),
        "frames_wrong": int(m["frames_wrong"].sum()),
        "frames_barcode_checked": int(col("frames_barcode_checked").fillna(0).sum()),
        "frames_decode_checked": int(col("frames_decode_checked").fillna(0).sum()),
        "probe_samples_per_s": col("probe_samples_per_s").mean(),
        # where the CPU went, per sample (mean over ranks): the main process, its frame checks, the workers
        "main_cpu_ms_per_sample": col("main_cpu_ms_per_sample").mean(),
        "check_ms_per_sample": col("check_ms_per_sample").mean(),
        "worker_cpu_ms_per_sample": col("worker_cpu_ms_per_sample").mean(),
        "worker_busy_frac": col("worker_busy_frac").mean(),
        "worker_core_wait_ms_per_sample": col("worker_core_wait_ms_per_sample").mean(),
        "other_cpu_ms_per_sample": col("other_cpu_ms_per_sample").mean(),
        # a worker's time per item built, and its decoding part (dlbench's and LeRobot's loaders)
        "worker_item_ms_per_sample": col("worker_item_ms_per_sample").mean(),
        "worker_decode_ms_per_sample": col("worker_decode_ms_per_sample").mean(),
        "worker_fetch_ms_per_sample": col("worker_fetch_ms_per_sample").mean(),
        # a worker's wall time per sample: fetch + decode + assembly + idle (`bench.metrics.time_split`)
        **{k: col(k).mean() for k in SPLIT_COLUMNS},
        **_slowest(ok),
        "peak_pss_workers_mb": col("peak_pss_workers_mb").max(),
        # DataLoader workers with something to read, over the ranks (dlbench_stream says; empty for the others)
        "busy_workers": col("busy_workers").sum(min_count=1),
        # what an item holds (the advice sizes shuffle buffers from them)
        "frames_per_sample": fpi,
        "image_shape": ok[0]["metrics"].get("image_shape"),
        "worker_start_method": ok[0]["metrics"].get("worker_start_method"),
        "consumer_device": ok[0]["metrics"].get("consumer_device"),
        **_remote(m),
        "window_start_unix": min(r["metrics"].get("window_start_unix", float("nan")) for r in ok),
        "window_end_unix": max(r["metrics"].get("window_end_unix", float("nan")) for r in ok),
    }


def _pooled_effective(ok: list[dict]) -> dict:
    """Effective / nominal batch size of the global batch (every rank's batch i together, `checks.effective`),
    with its interval; a single rank's own figures; NaN where a rank kept no batch means (or too few batches)."""
    names = [f"shuffle_effective_{w}{end}" for w in ("batch", "window") for end in ("", "_low", "_high")]
    if len(ok) == 1 or not all(r["metrics"].get("shuffle_batch_means") for r in ok):
        values = lambda n: [v for r in ok if (v := r["metrics"].get(n)) is not None and v == v]  # noqa: E731
        return {n: float(np.mean(values(n))) if values(n) else float("nan") for n in names}
    sizes = [int(r["metrics"].get("shuffle_batch_size") or 0) for r in ok]
    means = pooled([r["metrics"]["shuffle_batch_means"] for r in ok], sizes)
    correction = float(ok[0]["metrics"].get("shuffle_reference_correction") or 0.0)
    out = {}
    for w, window in (("batch", 1), ("window", WINDOW_BATCHES)):
        figure = lowest({g: effective_ratio(p, sum(sizes), window, correction) for g, p in means.items()})
        out.update(dict(zip([f"shuffle_effective_{w}{end}" for end in ("", "_low", "_high")], figure)))
    return out


def _slowest(ok: list[dict]) -> dict:
    """The rank with the fewest samples/s (a synchronous training step waits for it), and its share of the median
    rank's rate; NaN for one rank."""
    rates = [r["metrics"].get("samples_per_s") for r in ok]
    if len(ok) < 2 or any(v is None for v in rates) or not np.median(rates):
        return {"slowest_rank": float("nan"), "slowest_rank_vs_median": float("nan")}
    k = int(np.argmin(rates))
    return {"slowest_rank": ok[k].get("rank", k), "slowest_rank_vs_median": rates[k] / float(np.median(rates))}


def _remote(m: pd.DataFrame) -> dict:
    """Requests and MB per 1,000 delivered frames and read amplification over all ranks (NaN where unmetered)."""
    if "remote_requests" not in m or m["remote_requests"].isna().all():
        return dict.fromkeys(REMOTE_COLUMNS, float("nan"))
    # frames delivered over the ranks' whole runs, as the counts (records before that counted the windows alone)
    frames = m["remote_frames"] if "remote_frames" in m else m["samples"] * m["frames_per_sample"]
    kframes = frames.sum() / 1000.0
    needed = m["remote_bytes_needed"].sum()
    return {
        "remote_requests_per_kframe": m["remote_requests"].sum() / kframes,
        "remote_mb_per_kframe": m["remote_bytes_read"].sum() / 1e6 / kframes,
        "read_amplification": m["remote_bytes_read"].sum() / needed if needed else float("nan"),
        "remote_throttled": int(m["remote_throttled"].sum()),
    }


def derive(df: pd.DataFrame, baseline: str, thrash: dict) -> pd.DataFrame:
    """Add scaling efficiency, the ratio to the baseline loader, the thrash flag and the notes to summary rows."""
    df = df.copy()
    for col in ("frames_per_s_node", "cache_hit_rate", "latency_p99_ms", "frames_wrong"):
        if col not in df:
            df[col] = float("nan")
    if "step_ms" not in df:
        df["step_ms"] = 0
    ok = df["status"].isin(VERIFIED_STATUSES)
    df["scaling_efficiency"] = _scaling_efficiency(df, ok)
    df["ratio_to_baseline"], df["baseline_run"] = zip(*_baseline_ratios(df, ok, baseline)) if len(df) else ((), ())
    # what training gets: frames/s at the batch size the order is worth (a loader that shuffles less gets less)
    eff = df["shuffle_effective_batch"].map(worth) if "shuffle_effective_batch" in df else float("nan")
    df["effective_frames_per_s_node"] = (df["frames_per_s_node"] * eff).round(1)  # NaN where not shown: not 0
    df["effective_ratio_to_baseline"] = _effective_ratios(df)
    df["baseline_shuffle"] = _baseline_shuffle(df)
    df["decoder_thrash"] = (
        ok & (df["cache_hit_rate"] < thrash["hit_rate_below"]) & (df["latency_p99_ms"] > thrash["p99_ms_above"])
    )
    per_rank = df["samples_per_s_total"] / df["ranks"] if "samples_per_s_total" in df else float("nan")
    probe = df["probe_samples_per_s"] if "probe_samples_per_s" in df else float("nan")
    df["worker_bound"] = ok & (per_rank >= WORKER_BOUND_FRAC * df["num_workers"].clip(lower=1) * probe)
    df["notes"] = ["; ".join(_notes(row)) for _, row in df.iterrows()]
    return df


def _scaling_efficiency(df: pd.DataFrame, ok: pd.Series) -> np.ndarray:
    """Per-node frames/s over that of the 1-rank run with the same SCALING_KEY (NaN where there is none)."""
    single = df[ok & (df["world_size"] == 1)].set_index(SCALING_KEY)["frames_per_s_node"]
    single = single[~single.index.duplicated()]
    keys = pd.MultiIndex.from_frame(df[SCALING_KEY])
    ratio = (df["frames_per_s_node"].to_numpy() / single.reindex(keys).to_numpy()).round(4)
    return np.where(ok, ratio, float("nan"))


def _baseline_ratios(df: pd.DataFrame, ok: pd.Series, baseline: str) -> list[tuple[float, str]]:
    """(ratio, "scenario/run_id" of the run compared with) per row; the baseline run has the same dataset, source,
    mode and world size, and the same batch size and workers where such a run exists."""
    same = ["dataset", "source", "mode", "world_size", "step_ms"]
    out = []
    for _, row in df.iterrows():
        base = df[ok & (df["loader"] == baseline_loader(row["loader"], baseline)) & (df[same] == row[same]).all(axis=1)]
        same_knobs = base[(base["batch_size"] == row["batch_size"]) & (base["num_workers"] == row["num_workers"])]
        base = same_knobs if len(same_knobs) else base
        if row["status"] not in VERIFIED_STATUSES or base.empty:
            out.append((float("nan"), ""))
        else:
            ratio = round(row["frames_per_s_node"] / base["frames_per_s_node"].iloc[0], 4)
            out.append((ratio, f"{base['scenario'].iloc[0]}/{base['run_id'].iloc[0]}"))
    return out


def _effective_ratios(df: pd.DataFrame) -> list[float]:
    """effective_frames_per_s_node over that of the run `baseline_run` names (NaN where either is unknown)."""
    by_run = {f"{r['scenario']}/{r['run_id']}": r["effective_frames_per_s_node"] for _, r in df.iterrows()}
    out = []
    for _, row in df.iterrows():
        base = by_run.get(row["baseline_run"], float("nan"))
        out.append(round(row["effective_frames_per_s_node"] / base, 4) if base and base == base else float("nan"))
    return out


SHUFFLE_GAP = 0.1  # two runs whose shuffle measures differ by more are not compared on speed alone
# what a run's batches are worth to training (`bench.checks.effective`): judged, floored, compared
SHUFFLE_MEASURES = ("effective_batch", "effective_window", "distinct_frames")
# what explains them: distinct episodes per batch, and how far apart one episode's items in a batch are
SHUFFLE_DIAGNOSTICS = ("randomness", "spread")


def worth(value) -> float:
    """A measure as judged: NaN where not measured, and at most 1. Above 1 an effective batch size is as good as
    independent draws (sampling without replacement, or an estimate's noise: over 10 batches it is +/-0.5 at 50
    batches), so two such runs are equal, not one better."""
    return float("nan") if value is None or pd.isna(value) else min(float(value), 1.0)


def effective_rate(rate: float, effective_batch) -> float:
    """`rate` (frames or samples per second) at the batch size its order is worth; a figure not shown proves nothing
    and counts nothing (summary.csv's NaN, a benchmark's 0)."""
    w = worth(effective_batch)
    return float(rate) * (0.0 if pd.isna(w) else w)


def shuffle_gap(faster: pd.Series | dict, other: pd.Series | dict) -> str:
    """What shuffle `faster` gives up against `other` (or gains), in words; '' within SHUFFLE_GAP on every
    measure (`worth`), or where either was not measured."""
    parts = []
    for name in SHUFFLE_MEASURES:
        a, b = faster.get(f"shuffle_{name}"), other.get(f"shuffle_{name}")
        if pd.isna(worth(a)) or pd.isna(worth(b)) or abs(worth(a) - worth(b)) <= SHUFFLE_GAP:
            continue
        parts.append(f"{name.replace('_', ' ')} {a:.2f} against {b:.2f}")
    return ", ".join(parts)


def shuffle_low(row: pd.Series | dict, floor: dict) -> str:
    """The shuffle measures of a run below their floor or not shown, e.g. "effective batch 0.11 < 0.5"
    (`dlbench.floor`); '' where every one reaches it."""
    return shortfalls.describe(shortfalls.short(row, floor))


def shuffle_shortfall(row: pd.Series | dict, floor: dict) -> str:
    """Why a run's batches fall below the shuffle floor, in words; '' where they do not (or were not measured)."""
    low = shuffle_low(row, floor)
    return f"shuffles below the floor ({low}; config.yaml shuffle_floor)" if low else ""


def _baseline_shuffle(df: pd.DataFrame) -> list[str]:
    """Beside each ratio to the baseline: the shuffle the run gave up or gained against that baseline run, where
    the two differ by more than SHUFFLE_GAP ('' otherwise)."""
    runs = {f"{r['scenario']}/{r['run_id']}": r for _, r in df.iterrows()}
    return [
        shuffle_gap(row, runs[row["baseline_run"]]) if row["baseline_run"] in runs else "" for _, row in df.iterrows()
    ]


def step_target(row: dict) -> float | None:
    """A run that holds each batch for a training step (`step_ms`) caps its rate by design: its target is the
    frames/s a node's ranks deliver while their accelerators are busy `AU_TARGET` of the time (MLPerf Storage's
    bar), the step's batch of frames each step / AU_TARGET; None where no rank measured."""
    from ..tune.trainer import AU_TARGET

    if "frames_per_sample" not in row or not row.get("nodes_used"):
        return None
    ranks_per_node = row["world_size"] / row["nodes_used"]
    per_step = row["batch_size"] * row["frames_per_sample"] * ranks_per_node
    return AU_TARGET * per_step * 1000.0 / row["step_ms"]


def _notes(row: pd.Series) -> list[str]:
    """Why a run fails its target, or what limits it."""
    if row["status"] not in VERIFIED_STATUSES:
        return [f"{row['status']}: {row['reason']}" if row.get("reason") else row["status"]]
    why = []
    if row["status"] == "unverified":
        why.append(row.get("reason") or "unverified: no frame was checked")
    target = row.get("target_frames_per_s_node")
    if row.get("step_ms") and pd.notna(target):
        low = row["frames_per_s_node"] < target
        why.append(f"at a {row['step_ms']:g} ms training step: {1 - row['data_wait_frac']:.0%} accelerator utilization "
                   f"({row['data_wait_frac']:.1%} of the time waiting for data)"
                   + (f"; below target ({row['frames_per_s_node']:.0f} < {target:.0f} frames/s/node: 90% busy)"
                      if low else ""))  # fmt: skip
    elif pd.notna(target) and row["frames_per_s_node"] < target:
        why.append(f"below target ({row['frames_per_s_node']:.0f} < {target:g} frames/s/node)")
    elif pd.isna(target):
        why.append(f"no target for mode {row['mode']} (config.yaml targets:)")
    if row["frames_wrong"]:
        why.append(f"{int(row['frames_wrong'])} wrong frames")
    floor = json.loads(row["shuffle_floor"]) if isinstance(row.get("shuffle_floor"), str) else {}
    if low := shuffle_shortfall(row, floor):
        why.append(low)
    if isinstance(row.get("baseline_shuffle"), str) and row["baseline_shuffle"]:
        why.append(f"shuffle against its baseline {row['baseline_run']}: {row['baseline_shuffle']}")
    if row["decoder_thrash"]:
        why.append(f"decoder thrash (cache hit rate {row['cache_hit_rate']:.2f}, p99 {row['latency_p99_ms']:.0f} ms)")
    bound = row.get("bound")
    if isinstance(bound, str) and bound in BOUNDS and (row["worker_bound"] or pd.notna(target)):
        why.append(f"bound by {bound}: {BOUNDS[bound]}")  # the model's, from the calibration: never against the cores
    elif row["worker_bound"]:
        why.append(
            f"worker-bound ({row['num_workers']} workers each at their single-process rate of "
            f"{row['probe_samples_per_s']:.0f} samples/s)"
        )
    if pd.notna(row.get("nodes_used")) and row["nodes_used"] < row["nodes"]:
        why.append(
            f"ran on {int(row['nodes_used'])} host(s), not the {row['nodes']} nodes configured: "
            f"per-node figures are per host"
        )
    if row.get("source_verdict") == "cold":
        why.append("measured on a cold source (prewarm check said cold)")
    if isinstance(row.get("work_note"), str) and row["work_note"]:
        why.append(row["work_note"])
    if miss := _prediction_note(row):
        why.append(miss)
    return why


def load_conversion(path: str | Path) -> dict:
    path = Path(path)
    try:
        rec = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"{path}: not a readable conversion record ({e}); delete it and rerun its job") from None
    missing = [k for k in ("workers", "seconds", "input_bytes", "peak_pss_mb", "episodes") if k not in rec]
    if missing:
        raise UserError(f"{path}: conversion record lacks {missing}; delete it and rerun its job")
    return rec


def conversion_table(paths: list[str | Path], out: str | Path) -> pd.DataFrame:
    """One row per timed conversion (`dlbench convert run --record`): seconds, speed-up over the 1-worker run of
    the same dataset, input bytes/s and peak PSS of the process tree. Writes `out` (CSV)."""
    if not paths:
        raise UserError("no conversion records to tabulate; time a conversion with `dlbench convert run --record`")
    df = pd.DataFrame([load_conversion(p) for p in paths]).sort_values(["dataset", "workers"])
    one = df[df["workers"] == 1].drop_duplicates("dataset").set_index("dataset")["seconds"]
    df["speedup_vs_1_worker"] = (df["dataset"].map(one) / df["seconds"]).round(3)
    df["input_mb_per_s"] = (df["input_bytes"] / 2**20 / df["seconds"]).round(3)
    with atomic.file(out) as tmp:
        df.to_csv(tmp, index=False)
    return df
