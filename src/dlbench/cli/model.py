"""`dlbench calibrate` (what a dataset costs to load here) and `dlbench predict` (what a configuration will give,
on this node or another, without running it)."""

from __future__ import annotations

from pathlib import Path

from ..errors import UserError
from .common import ENDPOINT_HELP, comma_list, command, say


def add(sub) -> None:
    p = command(sub, "calibrate", help="measure what a dataset costs to load, per loader and mode (seconds)")
    p.add_argument("--spec", action="append", default=[], help="a run spec (results/specs/...); repeat for several")
    p.add_argument("--root", help="the v3.0 dataset (local path or URL), instead of run specs")
    p.add_argument(
        "--loader", type=comma_list(str), default=["dlbench_map", "dlbench_stream"], metavar="L1,L2", help="with --root"
    )
    p.add_argument("--mode", type=comma_list(str), default=["single", "sarm"], metavar="M1,M2", help="with --root")
    p.add_argument("--batch-size", type=int, default=None, help="with --root (default: the schema's)")
    p.add_argument("--warmup-s", type=float, default=None, help="with --root: the runs' warm-up (s)")
    p.add_argument("--duration-s", type=float, default=None, help="with --root: the runs' window (s)")
    p.add_argument("--repeats", type=int, default=None, help="with --root: the runs' windows")
    p.add_argument("--endpoint-url", default=None, help=ENDPOINT_HELP)
    p.add_argument("--dataset", default=None, help="the dataset's name in the record (default: from the root)")
    p.add_argument("--source", default="local", help="the source's name in the record")
    p.add_argument("--out", required=True, help="the calibration record (JSON)")
    p.add_argument("--contention", default=None, help="a local calibration of the dataset on this host: its "
                   "full-width passes stand for this source's (a remote source's calibration measures its one-worker "
                   "passes only)")  # fmt: skip
    p.add_argument("--once", action="store_true", help="measure each one-worker pass once, not again for drift")
    p.set_defaults(func=calibrate)

    p = command(sub, "predict", help="frames/s per node of configurations, from a calibration, without running them")
    p.add_argument("--calibration", help="a calibration record (default: results/calibration/DATASET/SOURCE.json)")
    p.add_argument("--dataset", help="with --source: the workflow's calibration of this dataset")
    p.add_argument("--source", default="local", help="with --dataset: the source it was calibrated on")
    p.add_argument(
        "--loader", type=comma_list(str), default=None, metavar="L1,L2", help="loaders (default: every one calibrated)"
    )
    p.add_argument(
        "--mode", type=comma_list(str), default=None, metavar="M1,M2", help="modes (default: every one calibrated)"
    )
    p.add_argument(
        "--workers",
        type=comma_list(int),
        default=[0, 1, 2, "auto"],
        metavar="W1,W2",
        help="DataLoader workers per rank",
    )
    p.add_argument("--nodes", type=comma_list(int), default=[1], help="nodes, one rank each unless --ranks-per-node")
    p.add_argument("--ranks-per-node", type=int, default=1, help="ranks sharing each node")
    p.add_argument("--cores", type=int, default=None, help="cores per node (default: the calibrated host's)")
    p.add_argument("--ttfb-ms", type=float, default=None, help="the storage's time to first byte (default: measured)")
    p.add_argument("--batch-size", type=int, default=None, help="default: the calibrated one")
    p.add_argument("--step-ms", type=float, default=0.0, help="a training step per batch (ms)")
    p.set_defaults(func=predict)


def calibrate(a) -> None:
    from ..model.calibrate import calibrate as measure
    from ..run import spec as runspec
    from ..sources import spec_from_endpoint

    if a.spec:
        runs = [runspec.read(s) for s in a.spec]
    elif a.root:
        source_spec = spec_from_endpoint(a.endpoint_url)
        given = {"root": a.root, "batch_size": a.batch_size, "warmup_s": a.warmup_s, "source_spec": source_spec}
        given |= {"duration_s": a.duration_s, "repeats": a.repeats}
        given["num_workers"] = 0  # stands for every worker count: `predict` answers for 0 workers too
        runs = [runspec.make_run({**given, "loader": lo, "mode": m}) for lo in a.loader for m in a.mode]
    else:
        raise UserError("calibrate needs --spec FILE (repeatable) or --root PATH_OR_URL")
    dataset = a.dataset or runs[0].dataset
    record = measure(runs, dataset, a.source, a.out, a.contention, a.once)
    say(f"{a.out}: {len(record.costs)} loader x mode pair(s) on {record.cores} cores in {record.seconds:.1f} s")


def predict(a) -> None:
    from ..model.calibration import Calibration
    from ..model.table import what_if

    path = a.calibration or (a.dataset and f"results/calibration/{a.dataset}/{a.source}.json")
    if not path:
        raise UserError("predict needs --calibration FILE, or --dataset NAME (and --source) of the workflow's")
    cal = Calibration.read(Path(path))
    print(
        what_if(
            cal, a.loader, a.mode, a.workers, a.nodes, a.ranks_per_node, a.cores, a.ttfb_ms, a.batch_size, a.step_ms
        )
    )
