"""`dlbench validate` beside lerobot-lance-doctor (lerobot-lancedb 0.3.1) on every defect of `benchmarks.defects`.

    python -m benchmarks.doctor --dataset V30_DIR [--dataset ANOTHER ...] [--work DIR]

Each defect is made in a fresh copy of each dataset; both tools run on the copy (the doctor in the LeRobot peer
environment, which `make peer` gives it) and the table says, per defect and tool, whether it was caught, missed,
or ended in a traceback, with the line each printed (shortened; camera names without "observation.images."). A
clean copy comes first: both must pass it. About 14 s per case on 2 cores, most of it the doctor's imports.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.defects import DEFECTS, make
from dlbench import peer

WIDTH = 110  # characters of each tool's line kept in the table
CLEAN = {"missed": "passes", "caught": "false alarm"}  # verdicts on the clean copy
ANSI = re.compile(r"\033\[[0-9;]*m")


def doctor_command() -> list[str]:
    py = peer.require_peer()
    exe = py.parent / "lerobot-lance-doctor"
    if not exe.exists():
        raise SystemExit(f"{exe} is missing: the peer environment predates lerobot-lancedb; run scripts/peer-env.sh")
    return [str(exe)]


def run_doctor(root: Path) -> tuple[str, str]:
    """(verdict, line) of lerobot-lance-doctor on `root`: its exit code counts failed checks."""
    proc = subprocess.run([*doctor_command(), "--root", str(root)], capture_output=True, text=True, timeout=600)
    out = ANSI.sub("", proc.stdout)
    if "Traceback" in proc.stderr:
        return "traceback", proc.stderr.strip().splitlines()[-1]
    if proc.returncode == 0:
        return "missed", ""
    lines = out.splitlines()
    failed = [i for i, line in enumerate(lines) if line.startswith("[FAIL]")]
    checks = ", ".join(lines[i].removeprefix("[FAIL]").strip().split(":")[0] for i in failed)
    first = failed[0]
    if first + 1 < len(lines) and lines[first + 1].startswith(" "):
        detail = lines[first + 1].strip()
    else:
        detail = lines[first].split(":", 1)[1].strip()  # META puts its reason on its own line
    return "caught", f"{checks}: {detail}"


def run_dlbench(root: Path) -> tuple[str, str]:
    """(verdict, line) of `dlbench validate` on `root`: its problems, one per line, after the error line."""
    proc = subprocess.run(
        [sys.executable, "-m", "dlbench", "validate", "-q", str(root)], capture_output=True, text=True, timeout=600
    )
    if "Traceback" in proc.stderr:
        return "traceback", proc.stderr.strip().splitlines()[-1]
    if proc.returncode == 0:
        return "missed", ""
    lines = [line.strip() for line in proc.stderr.strip().splitlines()]
    found = lines[1:] or [lines[0].removeprefix("dlbench validate: error: ").replace(str(root) + "/", "")]
    return "caught", " | ".join(found)


def short(text: str) -> str:
    text = text.replace("|", "/").replace("observation.images.", "")  # a table cell: camera names abridged
    return text if len(text) <= WIDTH else text[: WIDTH - 3] + "..."


def compare(dataset: Path, work: Path) -> list[tuple[str, str]]:
    """Print the table rows of one dataset, the clean copy then every defect; return each row's two verdicts."""
    rows = []
    cases = [(None, "none (the clean copy)")] + [(d, d.what) for d in DEFECTS]
    for defect, what in cases:
        copy = work / dataset.name / (defect.name if defect else "clean")
        shutil.rmtree(copy, ignore_errors=True)
        copy.parent.mkdir(parents=True, exist_ok=True)
        if defect is None:
            shutil.copytree(dataset, copy)
        else:
            make(defect, dataset, copy)
        (dv, dline), (ov, oline) = run_doctor(copy), run_dlbench(copy)
        if defect is None:  # the clean copy: nothing to catch
            dv, ov = (CLEAN.get(v, v) for v in (dv, ov))
        name = defect.name if defect else "clean"
        print(f"| {name} | {what} | {dv} | {short(dline)} | {ov} | {short(oline)} |", flush=True)
        rows.append((dv, ov))
    return rows


def summary(rows: list[tuple[str, str]]) -> str:
    """How many defects each tool caught, and the target: dlbench catches all the doctor catches, passes clean."""
    (clean_d, clean_o), defects = rows[0], rows[1:]
    doctor, ours = (sum(r[k] == "caught" for r in defects) for k in (0, 1))
    met = clean_o == "passes" and all(o == "caught" for d, o in defects if d == "caught")
    return (
        f"doctor caught {doctor} of {len(defects)}, dlbench validate {ours}; clean copy: doctor {clean_d}, dlbench "
        f"{clean_o}. Target (dlbench catches every defect the doctor catches, passes the clean copy): "
        f"{'met' if met else 'NOT met'}"
    )


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.doctor", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--dataset", type=Path, action="append", required=True, help="a valid v3.0 dataset (repeatable)")
    ap.add_argument("--work", type=Path, default=None, help="where the copies go (default: a temporary directory)")
    a = ap.parse_args(argv)
    doctor_command()  # fail early without the peer environment
    work = a.work or Path(tempfile.mkdtemp(prefix="dlbench-doctor-"))
    for dataset in a.dataset:
        print(f"\n{dataset}\n")
        print("| defect | what | doctor | doctor's line | dlbench | dlbench's line |")
        print("|---|---|---|---|---|---|")
        print("\n" + summary(compare(dataset, work)))
    if a.work is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
