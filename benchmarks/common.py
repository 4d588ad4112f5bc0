"""What the benchmark commands share: the `dlbench` command, and one `dlbench bench-run` (the workflow's harness)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def dlbench(*args: str, cwd: Path | None = None, env: dict | None = None, cpus: int | None = None) -> str:
    """`dlbench -q ARGS` in its own process (`cpus`: held to the first that many cores, as a job's CPU affinity is
    set by SLURM); its stdout. Exits with the command's last output where it fails."""
    pin = None if cpus is None else (lambda: os.sched_setaffinity(0, range(cpus)))
    proc = subprocess.run(
        [sys.executable, "-m", "dlbench", "-q", *args], cwd=cwd, env=env, capture_output=True, text=True,
        preexec_fn=pin,
    )  # fmt: skip
    if proc.returncode:
        sys.exit(f"dlbench {' '.join(args[:3])} failed:\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}")
    return proc.stdout


def flags(**settings) -> list[str]:
    """bench-run options from run settings: key_name=value gives --key-name value; True a bare --key-name, False
    --no-key-name (verify=False: --no-verify); None leaves the option out."""
    out: list[str] = []
    for key, value in settings.items():
        name = key.replace("_", "-")
        if value is None:
            continue
        if value is True:
            out.append(f"--{name}")
        elif value is False:
            out.append(f"--no-{name}")
        else:
            out += [f"--{name}", str(value)]
    return out


def bench_run(
    out: Path, *extra: str, cwd: Path | None = None, env: dict | None = None, cpus: int | None = None, **settings
) -> dict:
    """One `dlbench bench-run` into `out` with these settings (`flags`; `extra`: options as given, e.g. --spec or
    --endpoint-url; `cpus`: on that many cores); rank 0's record."""
    dlbench("bench-run", "--out-dir", str(out), *flags(**settings), *extra, cwd=cwd, env=env, cpus=cpus)
    return json.loads((Path(cwd or ".") / out / "rank0of1.json").read_text())
