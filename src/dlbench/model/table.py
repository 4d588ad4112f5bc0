"""Predictions as tables: one row per run of the matrix (predictions.csv), and the what-if table of `dlbench
predict`, where more workers stop paying."""

from __future__ import annotations

import math

from ..run.spec import windows_s
from .calibration import Calibration
from .equations import BOUNDS, Node, Prediction, predict, saturation, unmeasured

COLUMNS = (
    "predicted_frames_per_s_node",
    "predicted_bound",
    "predicted_busy_workers",
    "predicted_first_batch_s",
    "predicted_peak_pss_mb",
    "predicted_remote_requests_per_kframe",
    "predicted_remote_mb_per_kframe",
)


def predict_run(run: dict, cal: Calibration, cores: int | None = None, hosts: int = 1) -> Prediction | str:
    """The prediction for one run (a run spec as a dict) from its dataset and source's calibration, its ranks spread
    over `hosts` hosts of `cores` cores (default: the calibrated host's); a string saying why there is none."""
    if run["decode_device"] != "cpu":
        return "decoding on the GPU is not calibrated"
    cost = cal.cost(run["loader"], run["mode"])
    if cost is None:
        why = f": {cal.note}" if cal.note else ""
        return f"no calibration of {run['loader']} in mode {run['mode']}{why}"
    why = unmeasured(cost, run["num_workers"])
    if why:
        return why
    if not run.get("verify", True):
        cost = cost.unchecked()
    ranks = run["ranks"]
    node = Node(cores=cores or cal.cores, ranks=math.ceil(ranks / max(hosts, 1)))
    scale = run["batch_size"] / cost.batch_size  # per-sample costs hold; only the batch's size changes
    return predict(
        cost,
        node,
        run["num_workers"],
        batch_size=int(cost.batch_size * scale),
        ranks=ranks,
        step_ms=run.get("step_ms") or 0,
        episodes=cal.episodes,
        samples=cal.samples,
        data_files=cal.data_files,
        fetch_episodes=run.get("fetch_episodes") or 0,
        calibrated_ttfb_ms=cal.ttfb_ms,
        run_s=(run.get("warmup_s") or 0) + windows_s(run),
    )


def row(p: Prediction | str) -> dict:
    """predictions.csv's columns for one run (empty, with the reason, where there is no prediction)."""
    if isinstance(p, str):
        return {**dict.fromkeys(COLUMNS), "prediction_note": p}
    return {
        "predicted_frames_per_s_node": p.frames_per_s_node,
        "predicted_bound": p.bound,
        "predicted_busy_workers": p.busy_workers,
        "predicted_first_batch_s": p.first_batch_s,
        "predicted_peak_pss_mb": p.peak_pss_mb,
        "predicted_remote_requests_per_kframe": p.requests_per_kframe,
        "predicted_remote_mb_per_kframe": p.mb_per_kframe,
        "prediction_note": "",
    }


def what_if(
    cal: Calibration,
    loaders: list[str] | None,
    modes: list[str] | None,
    workers: list,
    nodes: list[int],
    ranks_per_node: int = 1,
    cores: int | None = None,
    ttfb_ms: float | None = None,
    batch_size: int | None = None,
    step_ms: float = 0.0,
) -> str:
    """The table `dlbench predict` prints: per loader, mode and node count, frames/s per node and in all for each
    worker count, the bound, memory per node, and where more workers stop paying."""
    cores = cores or cal.cores
    node_line = f"nodes of {cores} cores, {ranks_per_node} rank(s) each" + (f", ttfb {ttfb_ms:g} ms" if ttfb_ms else "")
    lines = [
        f"calibration: {cal.dataset} from {cal.source} on {cal.host} ({cal.cores} cores); predicted for {node_line}",
        f"{'loader':<16}{'mode':<8}{'nodes':>6}{'workers':>8}{'frames/s/node':>15}{'frames/s all':>14}"
        f"{'PSS/node MB':>12}  bound",
    ]
    for cost in cal.costs:
        if (loaders and cost.loader not in loaders) or (modes and cost.mode not in modes):
            continue
        for n in nodes:
            curve = []
            for w in workers:
                if unmeasured(cost, w):
                    lines.append(f"{cost.loader:<16}{cost.mode:<8}{n:>6}{w:>8}{'-':>15}{'-':>14}{'-':>12}  "
                                 "not calibrated without workers (dlbench calibrate --root measures it)")  # fmt: skip
                    continue
                p = predict(
                    cost,
                    Node(cores, ranks_per_node, ttfb_ms),
                    w,
                    batch_size=batch_size or cost.batch_size,
                    ranks=n * ranks_per_node,
                    step_ms=step_ms,
                    episodes=cal.episodes,
                    samples=cal.samples,
                    data_files=cal.data_files,
                    calibrated_ttfb_ms=cal.ttfb_ms,
                )
                resolved = max(1, cores // ranks_per_node) if w == "auto" else w
                curve.append((resolved, p.frames_per_s_node))
                lines.append(
                    f"{cost.loader:<16}{cost.mode:<8}{n:>6}{str(w):>8}{p.frames_per_s_node:>15.0f}"
                    f"{p.frames_per_s_node * n:>14.0f}{p.peak_pss_mb:>12.0f}  {p.bound}"
                )
            stop = saturation(sorted(set(curve)))
            if stop is not None:
                lines.append(f"{'':<30}more workers stop paying past {stop} (under 5% more frames/s each)")
    lines.append("bounds: " + "; ".join(f"{k}: {v}" for k, v in BOUNDS.items()))
    return "\n".join(lines)
