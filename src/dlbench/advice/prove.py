"""`dlbench advise --verify`: each run's top prescription, run beside the run as it was, in one job on this machine.

The two settings take turns (A B, B A, A B ...: `legs` windows each, so a drift of the machine falls on both), each
leg a short bench run of its own (`duration_s`, one window, its frames checked as the run's were). The measured gain
is the ratio of the two sides' median frames/s per node; a prescription that measured worse than the run is
withdrawn, one that gained less than the noise is said to be so, and one whose batches shuffle worse than the run's
(by more than 0.1 of effective / nominal batch size, or of distinct frames) is withdrawn whatever its speed. A
prescription that restores shuffle is proven only where its batches reach the floor, at the speed cost it measured.
results/advice/verified.csv; docs/model.md#advice.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import UserError
from ..report.aggregate import SHUFFLE_GAP, SHUFFLE_MEASURES, shuffle_gap, shuffle_low, worth
from ..run.spec import RunSpec
from . import prescribe

NOISE = 0.05  # a measured gain within this of 1.0 is no gain either way
COLUMNS = [
    "scenario",
    "run_id",
    "change",
    "predicted_frames_per_s_node",
    "predicted_gain",
    "before_frames_per_s_node",
    "after_frames_per_s_node",
    "measured_gain",
    "share_of_predicted_gain",
    "before_windows",
    "after_windows",
    *(f"{side}_shuffle_{m}" for m in SHUFFLE_MEASURES for side in ("before", "after")),
    "verdict",
]
SHUFFLE = tuple(f"shuffle_{m}" for m in SHUFFLE_MEASURES)


def changed_spec(
    base: RunSpec, change: dict, results: Path, summary: pd.DataFrame, reencode: dict | None = None
) -> RunSpec:
    """The run with its prescription applied: a run setting, or another dataset (a re-encoded variant: the spec of
    the matrix's run of it with these settings; one the matrix never ran, `reencode`, is re-encoded here first)."""
    if "dataset" in change and reencode is not None:
        root = reencoded(base, change, results, reencode)
        return dataclasses.replace(base, dataset=change["dataset"], root=str(root), data_files_root=None)
    if "dataset" in change:
        ok = summary[(summary["status"] == "ok") & (summary["dataset"] == change["dataset"])]
        same = prescribe._matching(ok, change["dataset"], {**base.to_dict(), "ranks": base.ranks})
        if same.empty:
            raise UserError(f"no run of {change['dataset']} with the settings of {base.run_id}")
        other = read_spec(results, same.iloc[0]["scenario"], same.iloc[0]["run_id"])
        return dataclasses.replace(base, dataset=other.dataset, root=other.root, data_files_root=other.data_files_root)
    settable = {f.name for f in dataclasses.fields(base)}
    if unknown := [k for k in change if k not in settable]:
        raise UserError(f"`{unknown[0]}` is not a run setting (the dataset is made again with it): not run here")
    return dataclasses.replace(base, **change)


def reencoded(base: RunSpec, change: dict, results: Path, entry: dict) -> Path:
    """The probed re-encoding of the run's dataset, whole, under results/advice/reencoded (made once; every frame
    kept, as `dlbench reencode` makes it)."""
    from ..encoding.options import Encoding
    from ..encoding.reencode import reencode

    out = results / "advice" / "reencoded" / change["dataset"]
    if not (out / "meta/info.json").exists():
        shutil.rmtree(out, ignore_errors=True)
        reencode(base.root, out, Encoding(**{k: v for k, v in entry.items() if k != "from"}))
    return out


def read_spec(results: Path, scenario: str, run_id: str) -> RunSpec:
    from ..run import spec as runspec

    return runspec.read(results / "specs" / scenario / f"{run_id}.json")


def leg_rate(run: RunSpec, out_dir: Path) -> tuple[float, dict]:
    """One leg: the run, as a short bench job here; its frames/s per node, checked, and its batches' shuffle
    measures. Raises UserError where it did not finish verified."""
    from ..bench.launch import run_job
    from ..report.aggregate import aggregate

    shutil.rmtree(out_dir, ignore_errors=True)
    run_job(run.with_id(), out_dir)
    row = aggregate([out_dir], None).iloc[0]
    if row["status"] != "ok":
        raise UserError(f"{row['status']}: {row.get('reason') or 'see ' + str(out_dir)}")
    return float(row["frames_per_s_node"]), {k: float(row[k]) for k in SHUFFLE}


def verdict(
    gain: float,
    before: dict | None = None,
    after: dict | None = None,
    restores: bool = False,
    floor: dict | None = None,
) -> str:
    """The measured prescription's verdict: its speed gain, and what it did to what the batches are worth to
    training (`before`, `after`: the legs' median measures, NaN where a leg had too few batches); `restores`: it was
    prescribed to lift them to `floor` (config.yaml's shuffle_floor), not the speed: proven only where it reaches
    it."""
    lost = shuffle_gap(after or {}, before or {}) if before and after else ""
    worse = bool(lost) and any(worth(after[k]) < worth(before[k]) - SHUFFLE_GAP for k in SHUFFLE)
    if restores:
        if not after or worse or not any(worth(after[k]) > worth(before[k]) + SHUFFLE_GAP for k in SHUFFLE):
            return "withdrawn: its batches are worth no more to training than the run's"
        if short := shuffle_low(after, floor or {}):
            return f"withdrawn: still below the floor ({short})"
        return f"proven: reaches the floor ({lost} before), at {gain:.2f}x the frames/s"
    if worse:
        return f"withdrawn: gives up shuffle ({lost} before)"
    if gain < 1.0 - NOISE:
        return "withdrawn: measured worse than the run as it was"
    if gain < 1.0 + NOISE:
        return f"withdrawn: no gain beyond the noise ({NOISE:.0%})"
    return "proven"


def verify_one(base: RunSpec, new: RunSpec, where: Path, legs: int, short: dict) -> tuple[list, list]:
    """Both settings, taking turns: `legs` short runs each, A B then B A and so on; each side's (frames/s, shuffle)
    per leg."""
    base = dataclasses.replace(base, **short)
    new = dataclasses.replace(new, **short)
    before, after = [], []
    for k in range(legs):
        order = [("before", base, before), ("after", new, after)]
        for name, run, rates in order if k % 2 == 0 else order[::-1]:
            rates.append(leg_rate(run, where / f"{name}{k}"))
    return before, after


def proof_order(todo: tuple) -> tuple:
    """Which prescription is proven first: a run below the shuffle floor (it does not pass), the cheapest proof among
    those (their gain is unknown until measured, so `limit` proofs prove as many as they can: the run's own first
    batch is each leg's start-up, 15 s for Ray Data against 1-3 s for the others on 2 cores), then the largest
    predicted gains; several nodes: not here, last."""
    row, p = todo
    start = row.get("first_batch_latency_s")
    start = float(start) if start is not None and pd.notna(start) else float("inf")
    return (int(row.get("nodes") or 1) > 1, not p.shuffle, start if p.shuffle else 0.0, -p.gain)


def verify(
    results: str | Path,
    summary: pd.DataFrame,
    calibrations: dict,
    encodings: pd.DataFrame | None,
    legs: int = 3,
    duration_s: float = 4.0,
    warmup_s: float = 1.5,
    limit: int | None = None,
    say=print,
) -> pd.DataFrame:
    """The top prescription of each run that has one (`prescribe.prescriptions`), measured beside the run; at most
    `limit` runs, those with the largest predicted gain first. One row per run tried."""
    results = Path(results)
    work = results / "advice" / "verify"
    short = {"duration_s": duration_s, "repeats": 1, "warmup_s": warmup_s, "num_batches": None}
    todo = []
    for row, found in prescribe.prescriptions(summary, calibrations, encodings, prescribe.read_specs(results)):
        if found:
            todo.append((row, found[0]))
    todo.sort(key=proof_order)
    rows = []
    for row, p in todo[:limit]:
        out = {
            "scenario": row["scenario"],
            "run_id": row["run_id"],
            "change": prescribe.yaml(p.change),
            "predicted_frames_per_s_node": p.frames_per_s_node,
            "predicted_gain": p.gain,
        }
        try:
            if int(row.get("nodes") or 1) > 1:
                raise UserError("a run of several nodes: verify it with the cluster (snakemake --profile)")
            base = read_spec(results, row["scenario"], row["run_id"])
            new = changed_spec(base, p.change, results, summary, p.reencode)
            new.check(f"{row['run_id']} with {out['change']}")
            say(f"{row['scenario']}/{row['run_id']}: {out['change']}, {legs} legs each")
            before, after = verify_one(base, new, work / row["scenario"] / row["run_id"], legs, short)
        except UserError as e:
            rows.append({**out, "verdict": f"not verified: {e}"})
            say(f"{row['scenario']}/{row['run_id']}: not verified: {e}")
            continue
        shuffled = [{k: float(np.median([m[k] for _, m in side])) for k in SHUFFLE} for side in (before, after)]
        before, after = [f for f, _ in before], [f for f, _ in after]
        gain = float(np.median(after) / np.median(before))
        predicted_gain = p.frames_per_s_node / row["frames_per_s_node"]
        rows.append(
            {
                **out,
                "before_frames_per_s_node": float(np.median(before)),
                "after_frames_per_s_node": float(np.median(after)),
                "measured_gain": gain,
                "share_of_predicted_gain": (gain - 1) / (predicted_gain - 1) if predicted_gain > 1 else float("nan"),
                "before_windows": json.dumps([round(v, 1) for v in before]),
                "after_windows": json.dumps([round(v, 1) for v in after]),
                **{f"before_{k}": shuffled[0][k] for k in SHUFFLE},
                **{f"after_{k}": shuffled[1][k] for k in SHUFFLE},
                "verdict": verdict(gain, *shuffled, restores=p.shuffle, floor=prescribe.floor_of(row)),
            }
        )
        say(f"  {np.median(before):,.0f} -> {np.median(after):,.0f} frames/s: {gain:.2f}x, {rows[-1]['verdict']}")
    shutil.rmtree(work, ignore_errors=True)  # the legs' records: the table keeps their figures
    return pd.DataFrame(rows, columns=COLUMNS)
