# Config validation (defaults come from the schema), the run specs, and the helpers that build target lists.
import json
import os
import re
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError

import dlbench.loopback
from dlbench import spec as runspec
from dlbench.config import validate_config
from dlbench.errors import UserError


def checked(fn, *args):
    """Run a config check; a user mistake stops the workflow with its one line."""
    try:
        return fn(*args)
    except UserError as e:
        raise WorkflowError(f"invalid configuration: {e}") from None


checked(validate_config, config)
checked(runspec.complete_sources, config)

# Rules call the `dlbench` CLI. The directory of the interpreter running Snakemake goes at the end of PATH, so a
# venv works without activating it, while an activated environment (conda, modules) still comes first.
shell.prefix(f'export PATH="$PATH:{os.path.dirname(sys.executable)}"; ')

RUNS = {(r["scenario"], r["run_id"]): r for r in checked(runspec.expand_runs, config)}
READ_DATASETS = sorted({r["dataset"] for r in RUNS.values()})
SCALING_WORKERS = config["convert"]["scaling_workers"]


def _scaling_datasets():
    named = config["convert"].get("scaling_datasets")
    if named is None:  # a user's dataset is converted once, in the DAG; timing it twice more is opt-in
        named = [d for d in READ_DATASETS if runspec.dataset_kind(config, d) == "synth"]
    for d in named:
        if d not in config["datasets"] or runspec.dataset_kind(config, d) == "v30":
            raise WorkflowError(f"invalid configuration: convert.scaling_datasets: {d!r} is not a synth or v21 "
                                f"dataset; datasets: {sorted(config['datasets'])}")
    return named if SCALING_WORKERS else []


SCALING_DATASETS = _scaling_datasets()
for _name in sorted(set(READ_DATASETS) | set(SCALING_DATASETS)):
    checked(runspec.check_local_dataset, config, _name)


def _names(kinds):
    """A wildcard pattern matching the datasets of these kinds (none: a pattern that matches nothing)."""
    names = [n for n in config["datasets"] if runspec.dataset_kind(config, n) in kinds]
    return "|".join(re.escape(n) for n in names) or "(?!)"


SYNTH_DATASETS = _names(("synth",))
CONVERTED_DATASETS = _names(("synth", "v21"))

# dlbench.plots.PLOTS, spelled out so parsing the workflow does not import matplotlib
PLOTS = [f"results/plots/{name}.png" for name in ("throughput", "latency", "decode_device", "workers", "nodes",
                                                   "cache_vs_p99")]
CONVERSION_TABLE = ["results/tables/conversion.csv"] if SCALING_DATASETS else []
CONVERSION_PLOT = ["results/plots/conversion.png"] if SCALING_DATASETS else []

LOOPBACK_STATE = "results/sources/loopback.json"
LOOPBACK_PROXIES = sorted({(s["loopback"]["port"], s["loopback"]["latency_ms"], s["loopback"]["bandwidth_mbps"])
                           for s in config["sources"].values()
                           if s.get("loopback") and (s["loopback"]["latency_ms"] or s["loopback"]["bandwidth_mbps"])})
USES_LOOPBACK = any(s.get("loopback") is not None for s in config["sources"].values())


def local_input(path):
    """A dataset path as an input: local paths are files Snakemake can track; URLs are read by the job."""
    return [] if path is None or runspec.is_url(path) else [path]


def run_of(wildcards):
    return RUNS[(wildcards.scenario, wildcards.run_id)]


def source_spec(name):
    return config["sources"][name]


def bench_inputs(wildcards):
    """The run's spec, its dataset's validation report, and for remote sources the staging marker and the prewarm
    report."""
    r = run_of(wildcards)
    spec = source_spec(r["source"])
    inputs = {"spec": f"results/specs/{r['scenario']}/{r['run_id']}.json",
              "valid": f"results/validate/{r['dataset']}.json"}
    if spec.get("stage"):
        inputs["staged"] = runspec.staged_marker(r["source"], r["dataset"])
    if r["require_warm"]:
        inputs["prewarm"] = r["require_warm"]
    return inputs


def bench_threads(wildcards):
    r = run_of(wildcards)
    workers = r["num_workers"] if r["num_workers"] != "auto" else os.cpu_count() or 1
    return (workers + 1) * r["ranks"]  # a local run caps it at --cores


def bench_mem_mb(wildcards):
    r = run_of(wildcards)
    workers = r["num_workers"] if r["num_workers"] != "auto" else 4
    return (2000 + 1000 * workers) * r["ranks"]


def bench_conda_env(wildcards):
    """cuda runs need the CUDA builds of torch and torchcodec (used with --sdm conda)."""
    return "../envs/cuda.yaml" if run_of(wildcards)["decode_device"] != "cpu" else "../envs/cpu.yaml"


def run_dirs():
    return [f"results/runs/{s}/{rid}" for (s, rid) in RUNS]


def prewarm_reports():
    """The prewarm reports of checked sources the matrix reads (summary.csv's source_verdict)."""
    return sorted({r["require_warm"] for r in RUNS.values() if r["require_warm"]})


def synth_args(wildcards):
    s = config["datasets"][wildcards.dataset]["synth"]
    args = [f"--episodes {s['episodes']}", f"--length-min {s['length_min']}", f"--length-max {s['length_max']}",
            f"--fps {s['fps']}", f"--codec {s['codec']}", f"--tasks {s['tasks']}", f"--seed {s['seed']}",
            f"--state-dim {s['state_dim']}", f"--action-dim {s['action_dim']}", f"--content {s['content']}"]
    args += [f"--camera {c['key']}={c['height']}x{c['width']}" for c in s["cameras"]]
    args += [f"--{k} {s[k]}" for k in ("gop", "crf") if k in s]
    return " ".join(args)


def plan_args():
    c = config["convert"]
    return (f"--episodes-per-batch {c['episodes_per_batch']} --data-file-size-in-mb {c['data_file_size_in_mb']} "
            f"--video-file-size-in-mb {c['video_file_size_in_mb']}")


def validate_args(wildcards):
    """Datasets read where they are (v30) are checked on a sample of episodes; converted ones on every episode."""
    ds = config["datasets"][wildcards.dataset]
    args = ["--sample-episodes 32"] if "v30" in ds else []
    if ds.get("on_unreachable") == "skip":
        args.append("--on-unreachable skip")
    return " ".join(args)


def prewarm_inputs(wildcards):
    spec = source_spec(wildcards.source)
    return [runspec.staged_marker(wildcards.source, wildcards.dataset)] if spec.get("stage") else []


if USES_LOOPBACK:
    # A loopback server holds its data in memory: markers of an earlier server's uploads are stale.
    if not os.path.exists(LOOPBACK_STATE):
        for name, spec in config["sources"].items():
            if spec.get("loopback") is not None:
                for marker in Path(f"results/sources/{name}").glob("*.staged.json"):
                    marker.unlink()
