"""Bench runs that did not finish, recorded as `failed` with the reason, so that a summary can list them beside the
runs that did (the workflow writes it to `results/failed/summary.csv` when a run of it fails).

A job whose node died writes nothing, so the reason comes from outside the job: SLURM's state for its last job
(`squeue` remembers finished jobs for MinJobAge), else the last line of the job's SLURM log, else the last line of
the rule's own log. Records go to `results/failed/<scenario>/<run_id>.json`, apart from the run directories, so
that Snakemake still sees the run as missing and a rerun redoes only it.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from pathlib import Path

from .. import atomic
from ..bench.record import SCHEMA_VERSION

FAILED_DIR = "failed"
SUMMARY = f"results/{FAILED_DIR}/summary.csv"  # the workflow's summary of finished and failed runs


def slurm_logs(results: Path, scenario: str, run_id: str) -> list[Path]:
    """The SLURM logs of a run's jobs (snakemake-executor-plugin-slurm's layout), oldest job first."""
    logs = []
    for rule in ("bench", "bench_cuda"):
        logs += (results / "logs/slurm" / f"rule_{rule}" / f"{scenario}_{run_id}").glob("*.log")
    return sorted(logs, key=lambda p: int(p.stem) if p.stem.isdigit() else -1)


def _last_line(path: Path) -> str:
    lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def _slurm_state(jobid: str) -> tuple[str, str, str] | None:
    """(state, reason, nodes) of a SLURM job that squeue still remembers, else None."""
    try:
        out = subprocess.run(
            ["squeue", "-h", "--states=all", "-j", jobid, "-o", "%T|%r|%N"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    line = out.stdout.strip().splitlines()[-1] if out.returncode == 0 and out.stdout.strip() else ""
    parts = line.split("|")
    return (parts[0], parts[1], parts[2]) if len(parts) == 3 else None


def why(results: Path, scenario: str, run_id: str) -> tuple[str, str] | None:
    """(reason, host) for a run that was tried and did not finish; None if no job of it left a log."""
    slurm = slurm_logs(results, scenario, run_id)
    rule_log = results / "logs/bench" / scenario / f"{run_id}.log"
    if slurm:
        log = slurm[-1]
        state = _slurm_state(log.stem)
        if state:
            status, reason, nodes = state
            detail = f" ({reason})" if reason and reason != "None" else ""
            return f"SLURM job {log.stem} on {nodes or '?'}: {status}{detail}; see {log}", nodes
        return f"SLURM job {log.stem}: {_last_line(log) or 'no output'}; see {log}", ""
    if rule_log.exists():
        return f"{_last_line(rule_log) or 'the job wrote nothing'}; see {rule_log}", ""
    return None


def record(spec: dict, reason: str, host: str = "") -> dict:
    """A run-level failure record (rank 0 standing for the run) in the rank-record schema."""
    return {
        "schema_version": SCHEMA_VERSION,
        "status": "failed",
        "reason": reason,
        "config": spec,
        "versions": {},
        "host": host,
        "rank": 0,
        "world_size": spec.get("world_size") or spec.get("ranks", 1),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "metrics": {},
    }


def record_missing(results: str | Path, runs: list[tuple[str, str]]) -> list[Path]:
    """Write a failure record for each run of `runs` that has no run.json but whose job left a log; remove the
    records of runs that finished since. Returns the failure records now present."""
    results = Path(results)
    written = []
    for scenario, run_id in runs:
        path = results / FAILED_DIR / scenario / f"{run_id}.json"
        spec_path = results / "specs" / scenario / f"{run_id}.json"
        finished = (results / "runs" / scenario / run_id / "run.json").exists()
        found = None if finished or not spec_path.exists() else why(results, scenario, run_id)
        if found is None:
            path.unlink(missing_ok=True)
            continue
        reason, host = found
        atomic.write_json(path, record(json.loads(spec_path.read_text()), reason, host))
        written.append(path)
    return written


def clear_finished(results: str | Path, runs: list[tuple[str, str]]) -> None:
    """Remove the failure records of runs that have finished since, and the failure summary once none is left."""
    results = Path(results)
    for scenario, run_id in runs:
        if (results / "runs" / scenario / run_id / "run.json").exists():
            (results / FAILED_DIR / scenario / f"{run_id}.json").unlink(missing_ok=True)
    for scenario in {s for s, _ in runs}:
        with contextlib.suppress(OSError):  # gone, or still holds a record
            (results / FAILED_DIR / scenario).rmdir()
    if not any((results / FAILED_DIR).glob("*/*.json")):
        (results / FAILED_DIR / "summary.csv").unlink(missing_ok=True)
