"""`dlbench tune DATASET`: which loader and settings feed training fastest on this node, proven by running them."""

from __future__ import annotations

import json

from ..errors import UserError
from .common import ENDPOINT_HELP, command, say


def add(sub) -> None:
    p = command(sub, "tune", help="the fastest loader configuration for a dataset that meets your constraints, proven")
    p.add_argument("dataset", help="the v3.0 dataset: a local path or a URL (s3://, hf://datasets/ORG/NAME@REV)")
    p.add_argument("--mode", default="single", help="frame mode (single, sarm, ...) unless --delta-timestamps")
    p.add_argument("--delta-timestamps", default=None, help="LeRobot delta_timestamps as JSON")
    p.add_argument("--batch-size", type=int, default=16, help="the training's batch size")
    p.add_argument("--memory-gb", type=float, default=None, help="peak memory of the loading processes (default: none)")
    p.add_argument("--floor-effective-batch", type=float, default=None, help="effective batch, one batch")
    p.add_argument("--floor-effective-window", type=float, default=None, help="...over 10 consecutive batches")
    p.add_argument("--floor-distinct-frames", type=float, default=None, help="distinct frames over frames in a batch")
    p.add_argument("--time-budget-s", type=float, default=300.0, help="proofs stop once this is spent (s)")
    p.add_argument("--cores", type=int, default=None, help="cores of the training node, if not this one: predicted")
    p.add_argument("--nodes", type=int, default=1, help="nodes of the training job; other than 1: predicted")
    p.add_argument("--no-lerobot", action="store_true", help="leave LeRobot's loaders out")
    p.add_argument("--no-reencode", action="store_true", help="leave out the re-encoding probe (local datasets)")
    p.add_argument("--endpoint-url", default=None, help=ENDPOINT_HELP)
    p.add_argument("--name", default=None, help="the dataset's name in the result (default: from its path)")
    p.add_argument("--source", default="local", help="the source's name in the result")
    p.add_argument(
        "--calibration",
        default=None,
        help="a calibration of this dataset and source made on this host "
        "(dlbench calibrate; the workflow's results/calibration/...): used where it covers the loaders",
    )
    p.add_argument("--out", default=None, help="result path without suffix (default: results/tune/NAME/SOURCE)")
    p.set_defaults(func=tune)


def tune(a) -> None:
    from pathlib import Path

    from ..sources import spec_from_endpoint
    from ..tune.run import tune as run_tune

    deltas = None
    if a.delta_timestamps:
        try:
            deltas = json.loads(a.delta_timestamps)
        except ValueError as e:
            raise UserError(f"--delta-timestamps: not JSON ({e}); e.g. '{{\"cameras\": [-0.1, 0]}}'") from None
    for name in ("batch_size", "time_budget_s"):
        if getattr(a, name) <= 0:
            raise UserError(f"--{name.replace('_', '-')} must be > 0 (got {getattr(a, name)})")
    floor = {k: getattr(a, f"floor_{k}") for k in ("effective_batch", "effective_window", "distinct_frames")}
    for k, v in floor.items():
        if v is not None and not 0 <= v <= 1:
            raise UserError(f"--floor-{k.replace('_', '-')} must be within 0 and 1 (got {v})")
    name = a.name or Path(str(a.dataset).rstrip("/").split("@")[0]).name or "dataset"
    out = a.out or f"results/tune/{name}/{a.source}"
    result = run_tune(
        a.dataset, out, mode=a.mode, delta_timestamps=deltas, batch_size=a.batch_size, memory_gb=a.memory_gb,
        floor={k: v for k, v in floor.items() if v is not None}, time_budget_s=a.time_budget_s, cores=a.cores,
        nodes=a.nodes, source_spec=spec_from_endpoint(a.endpoint_url), lerobot=not a.no_lerobot, dataset=name,
        source=a.source, calibration=a.calibration, reencode=not a.no_reencode,
    )  # fmt: skip
    if "winner" in result:
        w = result["winner"]
        how = "predicted" if w["predicted"] else "measured"
        say(f"{out}.md: {w['loader']} {result['winner']['dataloader_kwargs']}: {w['frames_per_s_node']:,.0f} "
            f"frames/s per node ({how}) in {result['phases']['total_s']:.0f} s")  # fmt: skip
    else:
        raise UserError(f"{result['unmet']} ({out}.md)")
