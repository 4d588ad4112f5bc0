# Config validation (defaults come from the schema) and the helpers that build target lists.
import itertools
import json
import os
import shlex
import sys

from snakemake.exceptions import WorkflowError

from dlbench.config import validate_config
from dlbench.errors import UserError


try:
    validate_config(config, workflow.source_path("../schemas/config.schema.yaml"))
except UserError as e:
    raise WorkflowError(f"invalid configuration: {e}") from None

# Rules call the `dlbench` CLI. The directory of the interpreter running Snakemake goes at the end of PATH, so a
# venv works without activating it, while an activated environment (conda, modules) still comes first.
shell.prefix(f"export PATH=\"$PATH:{os.path.dirname(sys.executable)}\"; ")
DATASET = config["dataset"]["name"]
CONVERT_WORKERS = config["convert"]["workers"]
AXES = ("loader", "mode", "batch_size", "num_workers", "decode_device")
PLOTS = ["results/plots/throughput.png", "results/plots/latency.png"]


def run_id(run):
    return f"{run['loader']}-{run['mode']}-b{run['batch_size']}-w{run['num_workers']}-{run['decode_device']}"


def bench_runs():
    """Every (scenario, run) of the matrix: the scenario's axes over bench.defaults, expanded."""
    runs = []
    for scenario, overrides in config["bench"]["scenarios"].items():
        merged = {**config["bench"]["defaults"], **overrides}
        lists = {k: (v if isinstance(v, list) else [v]) for k, v in merged.items() if k in AXES}
        fixed = {k: v for k, v in merged.items() if k not in AXES}
        for combo in itertools.product(*lists.values()):
            run = {**fixed, **dict(zip(lists, combo)), "scenario": scenario}
            run["run_id"] = run_id(run)
            runs.append(run)
    return runs


RUNS = {(r["scenario"], r["run_id"]): r for r in bench_runs()}


def run_of(wildcards):
    return RUNS[(wildcards.scenario, wildcards.run_id)]


def bench_args(wildcards):
    r = run_of(wildcards)
    args = [
        f"--scenario {r['scenario']}", f"--source {r['source']}", f"--loader {r['loader']}", f"--mode {r['mode']}",
        f"--batch-size {r['batch_size']}", f"--num-workers {r['num_workers']}",
        f"--decode-device {r['decode_device']}", f"--duration-s {r['duration_s']}", f"--warmup-s {r['warmup_s']}",
        f"--decoder-cache-size {r['decoder_cache_size']}", f"--probe-samples {r['probe_samples']}",
        f"--seed {r['seed']}",
    ]
    if r.get("num_batches"):
        args.append(f"--num-batches {r['num_batches']}")
    return " ".join(args)


def run_records():
    return [f"results/runs/{s}/{rid}/rank0of1.json" for (s, rid) in RUNS]


def synth_args():
    s = config["dataset"]["synth"]
    args = [f"--episodes {s['episodes']}", f"--length-min {s['length_min']}", f"--length-max {s['length_max']}",
            f"--fps {s['fps']}", f"--codec {s['codec']}", f"--tasks {s['tasks']}", f"--seed {s['seed']}",
            f"--state-dim {s['state_dim']}", f"--action-dim {s['action_dim']}"]
    args += [f"--camera {c['key']}={c['height']}x{c['width']}" for c in s["cameras"]]
    args += [f"--{k} {s[k]}" for k in ("gop", "crf") if k in s]
    return " ".join(args)


def plan_args():
    c = config["convert"]
    return (f"--episodes-per-batch {c['episodes_per_batch']} --data-file-size-in-mb {c['data_file_size_in_mb']} "
            f"--video-file-size-in-mb {c['video_file_size_in_mb']}")
