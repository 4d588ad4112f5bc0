"""`dlbench validate` beside lerobot-lance-doctor (lerobot-lancedb 0.3.1) on every defect of `benchmarks.defects`.

    python -m benchmarks.doctor --dataset V30_DIR [--dataset ANOTHER ...] [--workdir DIR]

Each defect is made in a fresh copy of each dataset; both tools run on the copy (the doctor in the LeRobot peer
environment, which `make peer` gives it) and the table says, per defect and tool, whether it was caught, missed,
or ended in a traceback, with the line each printed (shortened; camera names without "observation.images."). A
clean copy comes first: both must pass it. The doctor runs over all copies in one process (its imports take most
of a run).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.common import Report, parser
from benchmarks.defects import DEFECTS, make
from dlbench import peer

WIDTH = 110  # characters of each tool's line kept in the table
CLEAN = {"missed": "passes", "caught": "false alarm"}  # verdicts on the clean copy
ANSI = re.compile(r"\033\[[0-9;]*m")


# lerobot-lance-doctor's main() over many roots in one process: its imports (LeRobot, torch) take most of a run
DOCTOR_MANY = r"""
import contextlib, io, json, sys, traceback
from lerobot_lancedb.doctor import main
for root in sys.argv[1:]:
    sys.argv = ["lerobot-lance-doctor", "--root", root]
    out, error = io.StringIO(), ""
    try:
        with contextlib.redirect_stdout(out):
            code = main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except Exception:
        code, error = 1, traceback.format_exc().strip().splitlines()[-1]
    print(json.dumps({"root": root, "code": code, "stdout": out.getvalue(), "error": error}), flush=True)
"""


def doctor_python() -> str:
    """The peer environment's Python, which has lerobot-lance-doctor; exits saying how to get it otherwise."""
    py = peer.require_peer()
    if not (py.parent / "lerobot-lance-doctor").exists():
        raise SystemExit(
            f"{py.parent}/lerobot-lance-doctor is missing: the peer environment predates lerobot-lancedb;"
            " run scripts/peer-env.sh"
        )
    return str(py)


def run_doctors(roots: list[Path]) -> dict[Path, tuple[str, str]]:
    """root -> (verdict, line) of lerobot-lance-doctor on each root, all in one process: its exit code counts failed
    checks ("caught" when nonzero), "traceback" when it raised."""
    proc = subprocess.run(
        [doctor_python(), "-c", DOCTOR_MANY, *map(str, roots)], capture_output=True, text=True, timeout=1200
    )
    runs = {Path(r["root"]): r for r in map(json.loads, proc.stdout.splitlines()) if r}
    missing = [root for root in roots if root not in runs]
    if missing:
        raise RuntimeError(f"lerobot-lance-doctor stopped before {missing[0]}: {proc.stderr.strip()[-2000:]}")
    return {root: _verdict(runs[root]) for root in roots}


def _verdict(run: dict) -> tuple[str, str]:
    if run["error"]:
        return "traceback", run["error"]
    if run["code"] == 0:
        return "missed", ""
    lines = ANSI.sub("", run["stdout"]).splitlines()
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


def compare(report: Report, dataset: Path, work: Path) -> list[tuple[str, str]]:
    """Print the table rows of one dataset, the clean copy then every defect; return each row's two verdicts."""
    cases = [(None, "none (the clean copy)")] + [(d, d.what) for d in DEFECTS]
    copies = []
    for defect, _ in cases:
        copy = work / dataset.name / (defect.name if defect else "clean")
        shutil.rmtree(copy, ignore_errors=True)
        copy.parent.mkdir(parents=True, exist_ok=True)
        if defect is None:
            shutil.copytree(dataset, copy)
        else:
            make(defect, dataset, copy)
        copies.append(copy)
    doctor = run_doctors(copies)
    rows = []
    for (defect, what), copy in zip(cases, copies):
        (dv, dline), (ov, oline) = doctor[copy], run_dlbench(copy)
        if defect is None:  # the clean copy: nothing to catch
            dv, ov = (CLEAN.get(v, v) for v in (dv, ov))
        name = defect.name if defect else "clean"
        report.row(**{"dataset": dataset.name, "defect": name, "what": what, "doctor": dv,
                      "doctor's line": short(dline), "dlbench": ov, "dlbench's line": short(oline)})  # fmt: skip
        rows.append((dv, ov))
    return rows


def summary(report: Report, dataset: Path, rows: list[tuple[str, str]]) -> None:
    """How many defects each tool caught, and the target: dlbench catches all the doctor catches, passes clean."""
    (clean_d, clean_o), defects = rows[0], rows[1:]
    doctor, ours = (sum(r[k] == "caught" for r in defects) for k in (0, 1))
    met = clean_o == "passes" and all(o == "caught" for d, o in defects if d == "caught")
    report.goal(f"{dataset.name}: dlbench catches every defect the doctor catches and passes the clean copy", met,
                f"doctor caught {doctor} of {len(defects)}, dlbench validate {ours}; clean copy: doctor {clean_d}, "
                f"dlbench {clean_o}")  # fmt: skip


def main(argv=None) -> None:
    ap = parser(__doc__, workdir=None)
    ap.add_argument("--dataset", type=Path, action="append", required=True, help="a valid v3.0 dataset (repeatable)")
    a = ap.parse_args(argv)
    doctor_python()  # fail early without the peer environment
    work = Path(a.workdir or tempfile.mkdtemp(prefix="dlbench-doctor-"))
    report = Report(a, ["dataset", "defect", "what", "doctor", "doctor's line", "dlbench", "dlbench's line"], "doctor")
    for dataset in a.dataset:
        summary(report, dataset, compare(report, dataset, work))
    report.close()
    if a.workdir is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
