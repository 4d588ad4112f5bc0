"""What the benchmark commands share: their options (`parser`), their output (`Report`: a markdown table as rows
are measured, goals with whether they hold, and with --json one JSON document), the `dlbench` command, and one
`dlbench bench-run` (the workflow's harness)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path

WORKDIR = "/tmp/dlbench-model"


def parser(
    doc: str, sets: list[str] | None = None, choices: list[str] | None = None, workdir: str | bool | None = WORKDIR
) -> argparse.ArgumentParser:
    """A benchmark's options, with the ones every benchmark shares: --json (its rows and goals as one JSON
    document), --workdir where it makes sets (where they are made once and kept; None: a new temporary directory
    each time; False: it makes none) and, where it reads the suite's sets (`sets`: its default, of `choices`),
    --sets."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    if workdir is not False:
        ap.add_argument("--workdir", default=workdir, help="keeps the synthesized sets between runs")
    ap.add_argument("--json", default=None, metavar="FILE", help="also write the rows and goals here, as JSON")
    if sets is not None:
        ap.add_argument(
            "--sets", nargs="*", default=sets, choices=choices, help="the sets to measure (none: --sets alone)"
        )
    return ap


class Report:
    """What a benchmark prints: its rows as markdown tables (each row printed as it is measured: a run of minutes
    shows its progress; `table` starts another), lines of its own, and each goal with whether it holds; `close`
    writes all of it to --json."""

    def __init__(self, args: argparse.Namespace, columns: list[str], name: str = "") -> None:
        self.json = getattr(args, "json", None)
        self.tables: list[dict] = []
        self.goals: list[dict] = []
        self.lines: list[str] = []
        self.header = {"benchmark": name, "host": platform.node(), "cores": len(os.sched_getaffinity(0)),
                       "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}  # fmt: skip
        self.table(columns)

    def table(self, columns: list[str]) -> None:
        """Rows from here on go to a new table of these columns."""
        self.tables.append({"columns": list(columns), "rows": []})
        self._printed_head = False

    @property
    def rows(self) -> list[dict]:
        """The current table's rows."""
        return self.tables[-1]["rows"]

    def row(self, **values) -> dict:
        columns = self.tables[-1]["columns"]
        if not self._printed_head:
            print("\n| " + " | ".join(columns) + " |\n|" + "---|" * len(columns), flush=True)
            self._printed_head = True
        self.rows.append(values)
        print("| " + " | ".join(_cell(values.get(c)) for c in columns) + " |", flush=True)
        return values

    def line(self, text: str) -> None:
        self.lines.append(text)
        print(text, flush=True)

    def goal(self, what: str, holds: bool, detail: str = "") -> bool:
        self.goals.append({"goal": what, "holds": bool(holds), "detail": detail})
        print(f"goal {what}: {'holds' if holds else 'misses'}" + (f" ({detail})" if detail else ""), flush=True)
        return holds

    def close(self) -> None:
        if self.json:
            doc = {**self.header, "tables": self.tables, "goals": self.goals, "lines": self.lines}
            Path(self.json).write_text(json.dumps(doc, indent=1, default=str) + "\n")


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}"
    return str(value)


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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def loopback_s3(work: Path, datasets: dict[str, Path], latency_ms: float, bandwidth_mbps: float = 1000.0):
    """SeaweedFS on loopback behind a proxy that adds `latency_ms` to each response (a storage bucket seen from
    compute), with each of `datasets` (URL -> local v3.0 dataset) staged on it; yields the proxy's endpoint URL.
    The server's credentials are set in this process's environment, so that what it starts reads it too. Stopped on
    exit; its data and logs stay in `work`."""
    from dlbench import loopback
    from dlbench.sources import LOOPBACK_CREDENTIALS

    work = Path(work).absolute()
    for key, value in LOOPBACK_CREDENTIALS.items():  # the loopback server accepts any key
        os.environ.setdefault(key, value)
    port, shaped = free_port(), free_port()
    state = work / "loopback.json"
    loopback.start(port, [(shaped, latency_ms, bandwidth_mbps)], state, work / "logs", data_dir=work / "seaweedfs")
    try:
        for i, (url, local) in enumerate(datasets.items()):
            dlbench("stage", str(Path(local).absolute()), url, "--marker", str(work / f"staged{i}.json"),
                    "--endpoint-url", f"http://127.0.0.1:{port}")  # fmt: skip
        yield f"http://127.0.0.1:{shaped}"
    finally:
        loopback.stop(state)
