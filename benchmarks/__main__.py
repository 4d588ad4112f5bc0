"""The benchmark suite's one entry point: every benchmark is a module of this package with `main(argv)`.

    python -m benchmarks                  # each benchmark and what it checks (its docstring's first line)
    python -m benchmarks NAME [OPTIONS]   # run one, after a line naming the machine, date and command;
                                          # `python -m benchmarks NAME --help` lists its options
Every benchmark takes the shared options of `benchmarks.common.parser`: --json FILE (its tables, lines and goals as
one JSON document, beside the markdown it prints), --workdir where it makes sets, --sets where it reads the suite's.
Sets are made once under --workdir by `benchmarks.model.dataset` (the realistic sets, by name) or
`benchmarks.datasets` (the workflow's quick default and config/realistic.yaml's set); runs go through
`benchmarks.common.bench_run`, the workflow's harness; each goal is printed as `goal ...: holds` or `misses`.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import platform
import shlex
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
# what the benchmarks share, not benchmarks themselves (first_batch: what `scale` runs in each loader's environment)
SHARED = {"common", "datasets", "defects", "first_batch"}


def benchmarks() -> dict[str, str]:
    """Each benchmark's name and goal, read from its module docstring without importing it (imports are heavy)."""
    out = {}
    for info in pkgutil.iter_modules([str(HERE)]):
        if info.name.startswith("_") or info.name in SHARED:
            continue
        text = (HERE / f"{info.name}.py").read_text()
        doc = text.split('"""')[1] if text.startswith('"""') else ""
        out[info.name] = doc.strip().splitlines()[0] if doc.strip() else ""
    return dict(sorted(out.items()))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    suite = benchmarks()
    if not argv or argv[0] in ("-h", "--help", "list"):
        print(__doc__.split("\n\n")[0] + "\n")
        for name, goal in suite.items():
            print(f"  {name:12s} {goal}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in suite:
        print(f"benchmarks: no benchmark {name!r}; `python -m benchmarks` lists them", file=sys.stderr)
        return 2
    if not {"-h", "--help"} & set(rest):
        print(f"# {platform.node()}, {len(os.sched_getaffinity(0))} cores, {time.strftime('%Y-%m-%d %H:%M')}: "
              f"python -m benchmarks {shlex.join(argv)}", flush=True)  # fmt: skip
    importlib.import_module(f"benchmarks.{name}").main(rest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
