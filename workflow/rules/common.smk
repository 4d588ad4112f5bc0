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


def resolve_workers(value):
    """`auto`: one DataLoader worker per (cores / cameras), at least one."""
    if value != "auto":
        return value
    cameras = len(config["dataset"]["synth"]["cameras"])
    return max(1, (os.cpu_count() or 1) // cameras)


def bench_runs():
    """Every (scenario, run) of the matrix: the scenario's axes over bench.defaults, expanded."""
    runs = []
    for scenario, overrides in config["bench"]["scenarios"].items():
        merged = {**config["bench"]["defaults"], **overrides}
        lists = {k: (v if isinstance(v, list) else [v]) for k, v in merged.items() if k in AXES}
        fixed = {k: v for k, v in merged.items() if k not in AXES}
        for combo in itertools.product(*lists.values()):
            run = {**fixed, **dict(zip(lists, combo)), "scenario": scenario}
            run["num_workers"] = resolve_workers(run["num_workers"])
            run["run_id"] = run_id(run)
            runs.append(run)
    return runs


RUNS = {(r["scenario"], r["run_id"]): r for r in bench_runs()}


def run_of(wildcards):
    return RUNS[(wildcards.scenario, wildcards.run_id)]


BENCH_FLAGS = ("source", "loader", "mode", "batch_size", "num_workers", "decode_device", "duration_s", "warmup_s",
               "decoder_cache_size", "probe_samples", "seed", "pool_size", "buffer_size", "on_unavailable",
               "num_batches")


def bench_args(wildcards):
    r = run_of(wildcards)
    args = [f"--scenario {r['scenario']}", f"--world-size {r['ranks']}"]
    args += [f"--{k.replace('_', '-')} {r[k]}" for k in BENCH_FLAGS if r.get(k) is not None]
    return " ".join(args)


def bench_threads(wildcards):
    r = run_of(wildcards)
    return (r["num_workers"] + 1) * r["ranks"]  # a local run caps it at --cores


def run_dirs():
    return [f"results/runs/{s}/{rid}" for (s, rid) in RUNS]


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
