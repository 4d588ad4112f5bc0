"""`dlbench tune DATASET`: which loader and settings feed training fastest on this node, proven by running them."""

from __future__ import annotations

import os

from ..errors import UserError
from .common import DELTAS_HELP, ENDPOINT_HELP, command, read_deltas, say


def add(sub) -> None:
    p = command(sub, "tune", help="the fastest loader configuration for a dataset that meets your constraints, proven")
    p.add_argument(
        "dataset",
        nargs="?",
        help="the v3.0 dataset: a local path, a Hub repo id (ORG/NAME), or a URL (s3://, hf://datasets/ORG/NAME@REV); "
        "default: the one --config-path trains on",
    )
    p.add_argument("--policy", default=None, help="LeRobot policy type (act, diffusion, smolvla, pi0, ...): its window")
    p.add_argument("--config-path", default=None, help="a train_config.json lerobot-train wrote: policy, batch, ...")
    p.add_argument("--step-ms", type=float, default=None, help="the policy's training step (ms): the verdict in AU")
    p.add_argument(
        "--step-sd-ms",
        type=float,
        default=None,
        help="the step's standard deviation (ms): each held step drawn around --step-ms, as DLIO draws it",
    )
    p.add_argument("--gpus", type=int, default=1, help="GPUs a node, one rank each (default: %(default)s)")
    p.add_argument("--mode", default="single", help="frame mode (single, sarm, ...) without a policy")
    p.add_argument("--delta-timestamps", default=None, help=DELTAS_HELP + ", without a policy")
    p.add_argument("--batch-size", type=int, default=None, help="the training's batch size (default: 16)")
    p.add_argument(
        "--memory-gb", type=float, default=None, help="peak memory of the loading processes (default: half the RAM)"
    )
    from ..config import defaults

    floor = defaults("shuffle_floor")  # the floor the workflow's runs are judged by (config.yaml shuffle_floor)
    for flag, text in (("effective_batch", "effective / nominal batch size, one batch"),
                       ("effective_window", "...over 10 consecutive batches"),
                       ("distinct_frames", "distinct frames over frames in a batch")):  # fmt: skip
        p.add_argument(f"--floor-{flag.replace('_', '-')}", type=float, default=None,
                       help=f"{text} (default: {floor[flag]:g})")  # fmt: skip
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

    from ..procstat import started_unix
    from ..sources import spec_from_endpoint
    from ..tune.run import tune as run_tune
    from ..tune.trainer import dataset_url, train_config

    deltas, notes, policy_config = None, [], None
    if a.config_path:  # what lerobot-train was told, unless given here too
        t = train_config(a.config_path)
        if not a.policy:  # the config's policy with its own fields: its window, not the type's default one
            a.policy, policy_config = t["policy"], t
        a.batch_size = a.batch_size or t["batch_size"]
        a.dataset = a.dataset or t.get("root") or t["repo_id"]
        if t.get("episodes"):
            notes.append(f"the config trains on {len(t['episodes'])} episodes; the proofs read every episode")
        if t.get("image_transforms"):
            notes.append("the config's image transforms are on: their CPU is not in the proofs")
        notes.append(f"the config's loader: LeRobot's {'stream' if t.get('streaming') else 'map-style dataset'} "
                     f"with {t['num_workers']} worker(s)")  # fmt: skip
    if not a.dataset:
        raise UserError("give the dataset (a path, a Hub repo id or a URL) or --config-path")
    a.dataset = dataset_url(a.dataset)
    a.batch_size = a.batch_size or 16
    if a.step_ms is not None and a.step_ms <= 0:
        raise UserError(f"--step-ms must be > 0 (got {a.step_ms:g})")
    if a.step_sd_ms is not None and (a.step_sd_ms < 0 or a.step_ms is None):
        raise UserError(f"--step-sd-ms must be >= 0 and come with --step-ms (got {a.step_sd_ms:g})")
    if a.gpus < 1:
        raise UserError(f"--gpus must be >= 1 (got {a.gpus})")
    if a.delta_timestamps:
        deltas = read_deltas(a.delta_timestamps)
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
        source=a.source, calibration=a.calibration, reencode=not a.no_reencode, policy=a.policy, step_ms=a.step_ms,
        step_sd_ms=a.step_sd_ms,
        gpus=a.gpus, notes=notes, policy_config=policy_config, started_unix=started_unix([os.getpid()]),
    )  # fmt: skip
    if "winner" not in result:
        raise UserError(f"{result['unmet']} ({out}.md)")
    print(answer_screen(result), flush=True)
    say(f"{out}.md: the answer and every proof, in {result['phases']['total_s']:.0f} s")


def answer_screen(result: dict) -> str:
    """The answer on one screen: the figures, the code, LeRobot's best and its lerobot-train flags."""
    from ..tune.run import au_line, loop_line

    w, c = result["winner"], result["constraints"]
    how = "predicted for that node" if w["predicted"] else "measured"
    lines = [f"answer: {w['loader']} with {w['settings']}: {w['frames_per_s_node']:,.0f} frames/s a node ({how}), "
             f"peak {w['peak_pss_mb']:,.0f} MB"]  # fmt: skip
    if not w["predicted"]:
        lines[0] += f", effective batch {w['shuffle_effective_batch']:.2f} / {w['shuffle_effective_window']:.2f}"
    if w.get("au") is not None:
        lines.append(au_line(w, c))
        if w.get("au_lerobot_train") is not None:
            lines.append(loop_line(w))
            if w["lerobot_train_convert_ms"] > c["step_ms"]:
                lines.append(
                    "  that conversion takes longer than the step: there the GPU waits for it, whichever "
                    "loader feeds it (converting on the GPU, after the batch is moved, is LeRobot's change)"
                )
    lines += ["", w["code"].rstrip(), "", "# or in lerobot-train:", w["lerobot_swap"].rstrip(),
              f"# and run: lerobot-train ... {w['lerobot_flags']}"]  # fmt: skip
    lb = result.get("lerobot_best", {})
    if "lerobot_train" in lb:
        gain = result.get("switching_gain")
        lines += ["", f"LeRobot's best: {lb['frames_per_s_node']:,.0f} frames/s"
                  + (f" (dlbench {gain:.2f}x)" if gain else "") + f": {lb['lerobot_train']}"]  # fmt: skip
    return "\n".join(lines)
