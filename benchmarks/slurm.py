"""SLURM scale figures: dry-run time of a large matrix, and per-job overhead on the cluster at hand.

    python -m benchmarks.slurm [--jobs 1000] [--overhead-jobs 3]

1. Writes a config whose matrix expands to `--jobs` bench runs and times `snakemake --profile profiles/slurm -n`
   on it (DAG building, config validation and the executor's checks; nothing is submitted).
2. Per-job overhead, submit to finish, of an empty job: `sbatch --wait --wrap true`, and one trivial Snakemake
   job through the profile (the Snakemake start-up inside the allocation and the status polling included).
   Needs a running cluster (scripts/slurm-up.sh); skipped with a message otherwise.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import Report, parser
from dlbench.peer import REPO_ROOT

SNAKEMAKE = [sys.executable, "-m", "snakemake"]


def matrix_config(jobs: int) -> dict:
    """A config with exactly `jobs` bench runs (batch sizes x workers x modes x loaders x scenarios)."""
    batch = list(range(1, 51))  # 50 batch sizes
    per_scenario = len(batch) * 2 * 2 * 5  # modes x loaders x workers
    scenarios = {}
    for k in range(max(1, -(-jobs // per_scenario))):
        scenarios[f"s{k}"] = {
            "loader": ["dlbench_map", "dlbench_stream"],
            "mode": ["single", "sarm"],
            "batch_size": batch,
            "num_workers": [0, 1, 2, 4, 8],
        }
    # trim the last scenario so the total is exact
    extra = len(scenarios) * per_scenario - jobs
    if extra:
        last = scenarios[f"s{len(scenarios) - 1}"]
        last["batch_size"] = batch[: len(batch) - extra // 20]
    return {"bench": {"scenarios": scenarios}}


def dry_run(jobs: int) -> tuple[float, int]:
    with tempfile.TemporaryDirectory() as d:
        cfg = Path(d) / "big.yaml"
        cfg.write_text(json.dumps(matrix_config(jobs)))
        t0 = time.perf_counter()
        proc = subprocess.run(
            [
                *SNAKEMAKE,
                "-s",
                str(REPO_ROOT / "Snakefile"),
                "-d",
                d,
                "--configfile",
                str(cfg),
                "--profile",
                str(REPO_ROOT / "profiles/slurm"),
                "-n",
                "--quiet",
                "rules",
            ],
            capture_output=True,
            text=True,
        )
        secs = time.perf_counter() - t0
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr[-3000:])
        bench = [line for line in proc.stdout.splitlines() if line.strip().startswith("bench ")]
        count = int(bench[0].split()[1]) if bench else -1
        return secs, count


def overhead(report: Report, n: int) -> None:
    if shutil.which("sbatch") is None or subprocess.run(["sinfo"], capture_output=True).returncode != 0:
        report.line("per-job overhead: skipped (no reachable SLURM cluster; start one with scripts/slurm-up.sh)")
        return
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run(["sbatch", "--wait", "--quiet", "--wrap", "true", "-o", "/dev/null"], check=True)
        times.append(time.perf_counter() - t0)
    times.sort()
    report.line(f"sbatch --wait of an empty job: median {times[len(times) // 2]:.2f} s over {n}")
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "Snakefile").write_text(
            'rule empty:\n    output: "done"\n    log: "empty.log"\n    shell: "touch {output} 2> {log}"\n'
        )
        times = []
        for _ in range(n):
            (Path(d) / "done").unlink(missing_ok=True)
            t0 = time.perf_counter()
            subprocess.run(
                [
                    *SNAKEMAKE,
                    "-d",
                    d,
                    "-s",
                    str(Path(d) / "Snakefile"),
                    "--executor",
                    "slurm",
                    "-j",
                    "1",
                    "--slurm-init-seconds-before-status-checks",
                    "1",
                    "--slurm-status-command",
                    "squeue",
                    "--default-resources",
                    "mem_mb=100",
                    "runtime=5",
                    "--quiet",
                    "all",
                ],
                check=True,
                capture_output=True,
            )
            times.append(time.perf_counter() - t0)
        times.sort()
        report.line(
            f"one empty Snakemake job through the slurm executor: median {times[len(times) // 2]:.2f} s over {n} "
            f"(Snakemake start-up on both sides, sbatch, status polls)"
        )


def main(argv=None) -> None:
    ap = parser(__doc__, workdir=False)
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--overhead-jobs", type=int, default=3)
    a = ap.parse_args(argv)
    report = Report(a, [], "slurm")
    secs, count = dry_run(a.jobs)
    report.goal(f"a dry run of {count} bench jobs with profiles/slurm within 15 s", secs < 15, f"{secs:.1f} s")
    overhead(report, a.overhead_jobs)
    report.close()


if __name__ == "__main__":
    main()
