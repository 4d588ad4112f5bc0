# Config validation (defaults come from the schema) and the helpers that build target lists.
import itertools
import json
import os
import shlex
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError

import dlbench.loopback
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
LOCAL_V30 = f"results/datasets/{DATASET}/v30"
LOOPBACK_STATE = "results/sources/loopback.json"


def _complete_sources():
    """Loopback sources get their endpoint; every scenario must name a configured source."""
    server = config["loopback_server"]["port"]
    for name, spec in config["sources"].items():
        lb = spec.get("loopback")
        if lb is not None:
            shaped = lb.get("latency_ms") or lb.get("bandwidth_mbps")
            if shaped and not lb.get("port"):
                raise WorkflowError(f"invalid configuration: sources.{name}.loopback: a shaped source needs a port")
            spec["endpoint_url"] = f"http://127.0.0.1:{lb['port'] if shaped else server}"
        if spec["type"] in ("s3", "http") and not spec.get("url"):
            raise WorkflowError(f"invalid configuration: sources.{name}: type {spec['type']} needs a url")
    for scenario, overrides in config["bench"]["scenarios"].items():
        source = {**config["bench"]["defaults"], **overrides}.get("source", "local")
        if source not in config["sources"]:
            raise WorkflowError(f"invalid configuration: bench.scenarios.{scenario}.source: {source!r} is not a "
                                f"configured source; sources: {sorted(config['sources'])}")


_complete_sources()
LOOPBACK_PROXIES = sorted({(s["loopback"]["port"], s["loopback"]["latency_ms"], s["loopback"]["bandwidth_mbps"])
                           for s in config["sources"].values()
                           if s.get("loopback") and (s["loopback"]["latency_ms"] or s["loopback"]["bandwidth_mbps"])})
USES_LOOPBACK = any(s.get("loopback") is not None for s in config["sources"].values())


def source_spec(name):
    return config["sources"][name]


def source_url(name):
    from dlbench.sources import dataset_url

    spec = source_spec(name)
    if spec.get("stage") and spec["type"] in ("s3", "http"):
        return f"{spec['url'].rstrip('/')}/{DATASET}"
    return dataset_url(spec, LOCAL_V30)


def source_spec_arg(name):
    return shlex.quote(json.dumps(source_spec(name)))
CONVERT_WORKERS = config["convert"]["workers"]
AXES = ("loader", "mode", "batch_size", "num_workers", "decode_device")
# dlbench.plots.PLOTS, spelled out so parsing the workflow does not import matplotlib
PLOTS = [f"results/plots/{name}.png" for name in ("throughput", "latency", "decode_device", "workers", "nodes",
                                                   "cache_vs_p99")]
SCALING_WORKERS = config["convert"]["scaling_workers"]
CONVERSION_TABLE = ["results/tables/conversion.csv"] if SCALING_WORKERS else []
CONVERSION_PLOT = ["results/plots/conversion.png"] if SCALING_WORKERS else []


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
            _check_run(run)
            runs.append(run)
    return runs


def _check_run(run):
    """Combinations no loader can measure honestly stop the workflow with one line naming the scenario."""
    where = f"invalid configuration: bench.scenarios.{run['scenario']}"
    if run["loader"].startswith("lerobot_") and run["decode_device"] != "cpu":
        raise WorkflowError(f"{where}: loader {run['loader']} decodes on the CPU only (LeRobot 0.6.1); "
                            f"use decode_device: cpu, or loader dlbench_map / dlbench_stream for cuda")
    if run["loader"] == "lerobot_stream" and run["ranks"] > 1:
        raise WorkflowError(f"{where}: loader lerobot_stream does not split its stream by rank, so {run['ranks']} "
                            f"ranks would read the same frames; use ranks: 1 (or loader dlbench_stream)")
    if run["nodes"] > run["ranks"]:
        raise WorkflowError(f"{where}: nodes ({run['nodes']}) must not exceed ranks ({run['ranks']}): every node "
                            f"runs at least one rank")


def bench_conda_env(wildcards):
    """cuda runs need the CUDA builds of torch and torchcodec (used with --sdm conda)."""
    return "../envs/cuda.yaml" if run_of(wildcards)["decode_device"] != "cpu" else "../envs/cpu.yaml"


RUNS = {(r["scenario"], r["run_id"]): r for r in bench_runs()}


def run_of(wildcards):
    return RUNS[(wildcards.scenario, wildcards.run_id)]


BENCH_FLAGS = ("source", "loader", "mode", "batch_size", "num_workers", "decode_device", "duration_s", "warmup_s",
               "decoder_cache_size", "probe_samples", "seed", "pool_size", "buffer_size", "on_unavailable",
               "num_batches", "nodes")


def bench_inputs(wildcards):
    """The validated dataset, and for remote sources the staging marker and the prewarm report."""
    r = run_of(wildcards)
    spec = source_spec(r["source"])
    inputs = {"dataset": LOCAL_V30, "valid": f"results/validate/{DATASET}.json"}
    if spec.get("stage"):
        inputs["staged"] = f"results/sources/{r['source']}.staged.json"
    if spec.get("require_warm"):
        inputs["prewarm"] = f"results/prewarm/{r['source']}.json"
    return inputs


def bench_args(wildcards):
    r = run_of(wildcards)
    spec = source_spec(r["source"])
    args = [f"--dataset {shlex.quote(source_url(r['source']))}", f"--scenario {r['scenario']}",
            f"--world-size {r['ranks']}"]
    if spec["type"] != "local":
        args.append(f"--source-spec {source_spec_arg(r['source'])}")
    if spec.get("require_warm"):
        args += [f"--require-warm results/prewarm/{r['source']}.json", f"--on-cold {spec['on_cold']}"]
    if spec["type"] != "local":
        args.append(f"--on-unreachable {spec['on_unreachable']}")
    if spec.get("data_files_root"):
        args.append(f"--data-files-root {shlex.quote(spec['data_files_root'])}")
    args += [f"--{k.replace('_', '-')} {r[k]}" for k in BENCH_FLAGS if r.get(k) is not None]
    if not r["verify"]:
        args.append("--no-verify")
    return " ".join(args)


def bench_threads(wildcards):
    r = run_of(wildcards)
    return (r["num_workers"] + 1) * r["ranks"]  # a local run caps it at --cores


def run_dirs():
    return [f"results/runs/{s}/{rid}" for (s, rid) in RUNS]


def prewarm_reports():
    """The prewarm reports of checked sources the matrix reads (summary.csv's source_verdict)."""
    used = {r["source"] for r in RUNS.values()}
    return [f"results/prewarm/{s}.json" for s in sorted(used) if source_spec(s).get("require_warm")]


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


def prewarm_inputs(wildcards):
    spec = source_spec(wildcards.source)
    return [f"results/sources/{wildcards.source}.staged.json"] if spec.get("stage") else []


if USES_LOOPBACK:
    # A loopback server holds its data in memory: markers of an earlier server's uploads are stale.
    if not os.path.exists(LOOPBACK_STATE):
        for name, spec in config["sources"].items():
            if spec.get("loopback") is not None and os.path.exists(f"results/sources/{name}.staged.json"):
                os.remove(f"results/sources/{name}.staged.json")
