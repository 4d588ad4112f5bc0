# Config validation (defaults come from the schema), the run specs, and the helpers that build target lists.
import os
import re
import shlex
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.logging import logger

import dlbench.report.failed
import dlbench.loopback
from dlbench.run import matrix
from dlbench.config import SCHEMA_PATH, validate_config
from dlbench.run.loaders import LoaderName
from dlbench.errors import UserError
from dlbench.format.paths import is_remote
from dlbench.peer import DEFAULT_PEER, named_peer_ready
from dlbench.report.outputs import plots_for
from dlbench.run.spec import resolve_workers


def config_error(message):
    """Stop parsing the workflow: a mistake in the config is one line on stderr naming the key and what to do,
    without the frame list Snakemake prints for an exception (it is no bug)."""
    print(f"invalid configuration: {message}", file=sys.stderr)
    sys.exit(1)


def configured(fn, *args):
    """Run a parse-time check of the config (or a step that reads it); a user mistake stops the workflow here."""
    try:
        return fn(*args)
    except UserError as e:
        config_error(e)


def checked(fn, *args, what):
    """Run a start-up step (onstart); a user mistake stops the workflow with its one line."""
    try:
        return fn(*args)
    except UserError as e:
        raise WorkflowError(f"{what}: {e}") from None


CONFIG_FILES = ", ".join(map(str, workflow.configfiles)) or "config.yaml"
configured(validate_config, config, SCHEMA_PATH, CONFIG_FILES)
configured(matrix.complete_sources, config)

# Rules call the `dlbench` CLI. The directory of the interpreter running Snakemake goes at the end of PATH, so a
# venv works without activating it, while an activated environment (conda, modules) still comes first.
shell.prefix(f'export PATH="$PATH:{os.path.dirname(sys.executable)}"; ')

# every run of the matrix (dlbench.run.spec.RunSpec), each checked by dlbench.run.spec.check: a mistake in any stops `snakemake -n` already
RUNS = {(r.scenario, r.run_id): r for r in configured(matrix.expand_runs, config)}
READ_DATASETS = sorted({r.dataset for r in RUNS.values()})
SCALING_WORKERS = config["convert"]["scaling_workers"]


def _scaling_datasets():
    named = config["convert"].get("scaling_datasets")
    if named is None:  # a user's dataset is converted once, in the DAG; timing it twice more is opt-in
        named = [d for d in READ_DATASETS if matrix.dataset_kind(config, d) == "synth"]
    for d in named:
        if d not in config["datasets"] or matrix.dataset_kind(config, d) not in ("synth", "v21"):
            config_error(
                f"convert.scaling_datasets: {d!r} is not a synth or v21 dataset; datasets: "
                f"{sorted(config['datasets'])}"
            )
    return named if SCALING_WORKERS else []


SCALING_DATASETS = _scaling_datasets()
REENCODE_DATASETS = {n for n, ds in config["datasets"].items() if "reencode" in ds}
for _name in sorted(set(READ_DATASETS) | set(SCALING_DATASETS) | REENCODE_DATASETS):
    configured(matrix.check_local_dataset, config, _name)


def _names(kinds):
    """A wildcard pattern matching the datasets of these kinds (none: a pattern that matches nothing)."""
    names = [n for n in config["datasets"] if matrix.dataset_kind(config, n) in kinds]
    return "|".join(re.escape(n) for n in names) or "(?!)"


SYNTH_DATASETS = _names(("synth",))
CONVERTED_DATASETS = _names(("synth", "v21"))

# the plots this matrix can fill: a plot of runs that differ by one axis only where it holds two (`plots_for`)
PLOT_FILES = plots_for(RUNS.values())
PLOTS = [f"results/plots/{name}" for name in PLOT_FILES]
CONVERSION_TABLE = ["results/tables/conversion.csv"] if SCALING_DATASETS else []
CONVERSION_PLOT = ["results/plots/conversion.png"] if SCALING_DATASETS else []


SOURCES = {name: matrix.source(config, name) for name in config["sources"]}  # dlbench.sources.Source
READ_SOURCES = [SOURCES[n] for n in sorted({r.source for r in RUNS.values()})]
# the shaping proxies in front of the S3 server, and in front of the loopback Hub (its cold storage buckets)
LOOPBACK_PROXIES = sorted({s.proxy for s in SOURCES.values() if s.on_loopback_s3 and s.shaped})
HUB_PROXIES = sorted({s.proxy for s in SOURCES.values() if s.on_loopback_hub and s.shaped})
USES_LOOPBACK = any(s.loopback is not None for s in READ_SOURCES)
USES_HUB = any(s.on_loopback_hub for s in READ_SOURCES)


def start_loopback():
    """Start the S3 server of loopback sources (and the loopback Hub, with the shaping proxies of its buckets, if a run
    reads it) where Snakemake runs, on an address every job reaches."""
    server = config["loopback_server"]
    host = dlbench.loopback.server_host(server["host"], local=workflow.local_exec)
    hub_port = server["hub_port"] if USES_HUB else None
    hub_proxies = HUB_PROXIES if USES_HUB else []
    dlbench.loopback.start(server["port"], LOOPBACK_PROXIES, host=host, hub_port=hub_port, hub_proxies=hub_proxies)


def local_input(path):
    """A dataset path as an input: local paths are files Snakemake can track; URLs are read by the job."""
    return [] if path is None or is_remote(path) else [path]


def run_of(wildcards):
    return RUNS[(wildcards.scenario, wildcards.run_id)]


def endpoint_args(name):
    """`--endpoint-url ...` giving a dlbench command this source's S3 settings, or nothing."""
    value = SOURCES[name].endpoint_option()
    return f"--endpoint-url {shlex.quote(value)}" if value else ""


def bench_inputs(wildcards):
    """The run's spec, its dataset's validation report, and for remote sources the staging marker and the prewarm
    report."""
    return bench_inputs_of(run_of(wildcards))


def bench_inputs_of(r):
    source = SOURCES[r.source]
    inputs = {
        "spec": f"results/specs/{r.scenario}/{r.run_id}.json",
        "valid": f"results/validate/{r.dataset}.json",
    }
    if source.stages:
        inputs["staged"] = matrix.staged_marker(r.source, r.dataset)
    if r.require_warm:
        inputs["prewarm"] = r.require_warm
    peer = r.loader_name.peer
    if peer and peer != DEFAULT_PEER:  # the environment of its LeRobot, built once by the peer_env rule
        inputs["peer"] = named_peer_ready(peer)
    if r.loader == "lance_map":  # its Lance copy, made (and staged) by the workflow
        if not source.remote:
            inputs["lance"] = source.lance_url(r.dataset)
        elif source.stages:
            inputs["lance_staged"] = f"results/sources/{r.source}/{r.dataset}.lance.staged.json"
    return inputs


def bench_threads(wildcards):
    return bench_threads_of(run_of(wildcards))


def bench_threads_of(r):
    return (resolve_workers(r.num_workers) + 1) * r.ranks


def measure(wildcards):
    """Jobs that measure (bench runs, conversion timings, prewarm checks) hold one unit of `measure`, which the
    workflow profile caps at 1 (profiles/default): one at a time on this machine. On a cluster each gets nodes of its
    own instead (profiles/slurm: --exclusive), so the cap does not serialize the cluster."""
    return 1 if workflow.local_exec else 0


def loopback_jobs(source):
    """1 for jobs that read or write a loopback source: they share one server (and its bandwidth cap), which the
    workflow profile lets serve one job at a time, on SLURM as well."""
    return int(SOURCES[source].loopback is not None)


def measuring(threads):
    """A measuring job's threads: on this machine, every core Snakemake was given, so that no other job (synth,
    conversion) runs beside it; on a cluster, what the job asks its nodes for."""

    def claim(wildcards):
        if workflow.local_exec:
            return workflow.cores
        return threads(wildcards) if callable(threads) else threads

    return claim


def bench_runtime(wildcards):
    r = run_of(wildcards)
    return int((r.warmup_s + r.repeats * r.duration_s) / 60) + 15


def bench_mem_mb(wildcards):
    r = run_of(wildcards)
    return (2000 + 1000 * resolve_workers(r.num_workers)) * r.ranks


BENCH_RESOURCES = dict(
    measure=measure,
    loopback=lambda wildcards: loopback_jobs(run_of(wildcards).source),
    mem_mb=bench_mem_mb,
    runtime=bench_runtime,
    # multi-rank runs on SLURM: one job, `ranks` tasks over `nodes` nodes; the job starts them with srun
    tasks=lambda wildcards: run_of(wildcards).ranks,
    nodes=lambda wildcards: run_of(wildcards).nodes,
    mpi=lambda wildcards: "srun" if run_of(wildcards).ranks > 1 else "",
    cpus_per_task=lambda wildcards, threads: max(1, threads // run_of(wildcards).ranks),
)


def run_dirs():
    return [f"results/runs/{s}/{rid}" for (s, rid) in RUNS]


def redo_removed_runs():
    """A run directory removed by hand is measured again. Snakemake does not remake a missing intermediate whose
    consumer is up to date, so where summary.csv exists and a run it summarizes does not, summary.csv moves aside
    (results/summary.stale.csv, kept whole) and is remade once the missing runs are measured again."""
    summary = "results/summary.csv"
    missing = [d for d in run_dirs() if not os.path.exists(d)]
    if not missing or not os.path.exists(summary) or not workflow.is_main_process:
        return
    os.replace(summary, "results/summary.stale.csv")
    logger.warning(
        f"{len(missing)} run(s) of the matrix are missing (e.g. {missing[0]}): they are measured again and "
        f"{summary} remade; the previous one is results/summary.stale.csv"
    )


def summarize_failures():
    """After a failed run of the workflow: record each bench run that was tried and did not finish, and summarize
    them beside the runs that did in results/failed/summary.csv. Not in results/summary.csv: Snakemake would take
    that as up to date and never redo the missing runs."""
    from dlbench.report.aggregate import aggregate

    failed = dlbench.report.failed.record_missing("results", list(RUNS))
    if not failed:
        return
    done = [d for d in run_dirs() if os.path.exists(f"{d}/run.json")]
    prewarm = {
        str(Path(r).relative_to("results/prewarm").with_suffix("")): r for r in prewarm_reports() if os.path.exists(r)
    }
    try:
        aggregate(
            [*done, *failed],
            dlbench.report.failed.SUMMARY,
            targets=config["targets"],
            baseline=config["baseline_loader"],
            thrash=config["thrash"],
            shuffle_floor=config["shuffle_floor"],
            prewarm=prewarm,
        )
    except UserError as e:
        logger.error(f"{dlbench.report.failed.SUMMARY} not written: {e}")
        return
    logger.error(
        f"{len(failed)} bench run(s) failed; {dlbench.report.failed.SUMMARY} lists them (status failed, with the reason) "
        f"beside the {len(done)} that finished; run the same command again to redo only them"
    )


def prewarm_reports():
    """The prewarm reports of checked sources the matrix reads (summary.csv's source_verdict)."""
    return sorted({r.require_warm for r in RUNS.values() if r.require_warm})


def thrash_args():
    t = config["thrash"]
    return f"--thrash-hit-rate-below {t['hit_rate_below']} --thrash-p99-ms-above {t['p99_ms_above']}"


# `advice: verify` in config.yaml: how many runs' top prescriptions `advice_verify` runs (0: the rule is left out)
VERIFIED = ["results/advice/verified.csv"] if config["advice"]["verify"] else []


def advice_verify_args():
    a = config["advice"]
    return f"{a['verify']} --legs {a['legs']} --leg-s {a['leg_s']}"


def aggregate_args():
    """`dlbench aggregate`'s options from config.yaml: targets, baseline, thrash, each checked source's report."""
    args = [f"--target {mode}={fps}" for mode, fps in config["targets"].items()]
    floor = config["shuffle_floor"]
    args += [f"--baseline {config['baseline_loader']}", thrash_args()]
    args += [f"--floor-{name.replace('_', '-')} {value}" for name, value in sorted(floor.items())]
    for report in prewarm_reports():  # results/prewarm/<source>/<dataset>.json
        args.append(f"--prewarm {Path(report).relative_to('results/prewarm').with_suffix('')}={report}")
    return " ".join(args)


def synth_args(wildcards):
    s = config["datasets"][wildcards.dataset]["synth"]
    args = [
        f"--episodes {s['episodes']}",
        f"--length-min {s['length_min']}",
        f"--length-max {s['length_max']}",
        f"--fps {s['fps']}",
        f"--codec {s['codec']}",
        f"--tasks {s['tasks']}",
        f"--seed {s['seed']}",
        f"--state-dim {s['state_dim']}",
        f"--action-dim {s['action_dim']}",
        f"--content {s['content']}",
    ]
    args += [f"--camera {c['key']}={c['height']}x{c['width']}" for c in s["cameras"]]
    args += [f"--{k} {s[k]}" for k in ("gop", "crf") if k in s]
    return " ".join(args)


def plan_args():
    c = config["convert"]
    return (
        f"--episodes-per-batch {c['episodes_per_batch']} --data-file-size-in-mb {c['data_file_size_in_mb']} "
        f"--video-file-size-in-mb {c['video_file_size_in_mb']}"
    )


def validate_args(wildcards):
    """Datasets read where they are (v30) are checked on a sample of episodes; converted ones on every episode."""
    ds = config["datasets"][wildcards.dataset]
    args = ["--sample-episodes 32"] if "v30" in ds else []
    if ds.get("on_unreachable") == "skip":
        args.append("--on-unreachable skip")
    return " ".join(args)


def prewarm_inputs(wildcards):
    stages = SOURCES[wildcards.source].stages
    return [matrix.staged_marker(wildcards.source, wildcards.dataset)] if stages else []


if USES_LOOPBACK and not os.path.isdir(dlbench.loopback.DATA_DIR):
    # the server's data is gone: markers of uploads to it are stale
    for name, source in SOURCES.items():
        if source.loopback is not None:
            for marker in Path(f"results/sources/{name}").glob("*.staged.json"):
                marker.unlink()


# ------------------------------------------------------------------------------ calibration and predictions
# per (dataset, source) the runs the model predicts: those decoding on the CPU (NVDEC is not calibrated)
CALIBRATED = {}
for _r in RUNS.values():
    if _r.decode_device == "cpu":
        CALIBRATED.setdefault((_r.dataset, _r.source), []).append(_r)


def calibration_file(dataset, source):
    return f"results/calibration/{dataset}/{source}.json"


# Jobs run in this order where several are ready: what any calibration or run waits on (datasets, conversions,
# staging, Lance copies, prewarm checks, peer environments), then each (dataset, source) in turn, its calibration and
# at once its runs. A host's speed drifts by 10-20% over minutes (docs/model.md, "Drift"): a run is measured next to
# the calibration that predicts it, not a quarter of an hour from it.
_PAIR_RANK = {pair: len(CALIBRATED) - k for k, pair in enumerate(CALIBRATED)}
PREPARE_PRIORITY = 2 * len(CALIBRATED) + 1


def calibrate_priority(wildcards):
    return 2 * _PAIR_RANK[(wildcards.dataset, wildcards.source)]


def bench_priority(wildcards):
    """Just under its pair's calibration; 0 for a run with no calibration (decoding on the GPU)."""
    r = run_of(wildcards)
    rank = _PAIR_RANK.get((r.dataset, r.source))
    return 2 * rank - 1 if rank else 0


def calibrate_inputs(wildcards):
    """The specs of the runs a calibration stands for, and what their bench jobs need (validation, staging, the
    Lance copy), but no prewarm gate: a calibration measures whatever the source gives."""
    inputs = {"specs": [], "needs": []}
    for r in CALIBRATED[(wildcards.dataset, wildcards.source)]:
        needs = bench_inputs_of(r)
        inputs["specs"].append(needs.pop("spec"))
        needs.pop("prewarm", None)
        inputs["needs"] += [v for v in needs.values() if v not in inputs["needs"]]
    local = contention_source(wildcards.dataset, wildcards.source)
    if local:
        inputs["contention"] = calibration_file(wildcards.dataset, local)
    return inputs


def contention_source(dataset, source):
    """For a remote source, the local source whose calibration of the same dataset lends it its full-width passes
    (`dlbench calibrate --contention`: the decode's contention does not depend on the source); None for a local one."""
    if config["sources"][source].get("type", "local") == "local":
        return None
    return next(
        (s for d, s in CALIBRATED if d == dataset and config["sources"][s].get("type", "local") == "local"), None
    )


def calibrate_args(wildcards, input):
    once = ["--once"] if config["calibration"]["once"] else []
    return " ".join(once + ([f"--contention {input.contention}"] if "contention" in input.keys() else []))


# re-encoded datasets (workflow/rules/encoding.smk)
REENCODED = sorted(REENCODE_DATASETS)
REENCODED_DATASETS = "|".join(re.escape(n) for n in REENCODED) or "(?!)"
ENCODED_DATASETS = configured(matrix.encoded_datasets, config)
ENCODINGS = ["results/tables/encodings.csv", "results/plots/encodings.png"] if REENCODED else []


def reencode_args(wildcards):
    e = matrix.encoding(config, wildcards.dataset)
    args = [f"--codec {e.codec}", f"--pixel-format {e.pixel_format}"]
    given = (("gop", e.gop), ("crf", e.crf), ("preset", e.preset))
    args += [f"--{k} {shlex.quote(str(v))}" for k, v in given if v is not None]
    args += [f"--height {e.height} --width {e.width}"] if e.height else []
    args += [] if e.faststart else ["--no-faststart"]
    return " ".join(args + (["--fast-decode"] if e.fast_decode else []))


def source_root(wildcards):
    return matrix.v30_path(config, matrix.reencoded_from(config, wildcards.dataset))


def encoding_inputs(wildcards):
    inputs = {"dataset": local_input(matrix.v30_path(config, wildcards.dataset))}
    if wildcards.dataset in REENCODED:
        inputs["reference"] = local_input(source_root(wildcards))
        inputs["record"] = f"results/encodings/{wildcards.dataset}/reencode.json"
    return inputs


def encoding_args(wildcards, input):
    if wildcards.dataset not in REENCODED:
        return ""
    return f"--reference {shlex.quote(source_root(wildcards))} --reencode-record {input.record}"


# ------------------------------------------------------------------------------ tune
TUNED = [(d, s) for d in config["tune"]["datasets"] for s in config["tune"]["sources"]]
TUNE = [f"results/tune/{d}/{s}.md" for d, s in TUNED]
for _d, _s in TUNED:
    if _d not in config["datasets"] or _s not in config["sources"]:
        config_error(f"config.yaml tune: {_d!r} on {_s!r}: name a dataset of datasets: and a source of sources:")


def tune_inputs(wildcards):
    """The dataset's validation report, for a staged source its staging marker, and the matrix's calibration of the
    dataset on the source where there is one (the tune calibrates only the loaders it lacks)."""
    inputs = {"valid": f"results/validate/{wildcards.dataset}.json"}
    if (wildcards.dataset, wildcards.source) in CALIBRATED:
        inputs["calibration"] = calibration_file(wildcards.dataset, wildcards.source)
    if SOURCES[wildcards.source].stages:
        inputs["staged"] = matrix.staged_marker(wildcards.source, wildcards.dataset)
    return inputs


def tune_args(wildcards):
    """`dlbench tune`'s constraints from config.yaml's tune: and shuffle_floor:, and the source's S3 settings."""
    t, floor = config["tune"], config["shuffle_floor"]
    args = [f"--mode {t['mode']} --batch-size {t['batch_size']} --time-budget-s {t['time_budget_s']}"]
    if (wildcards.dataset, wildcards.source) in CALIBRATED:
        args.append(f"--calibration {calibration_file(wildcards.dataset, wildcards.source)}")
    args += [f"--memory-gb {t['memory_gb']}"] if t["memory_gb"] else []
    args += [f"--policy {t['policy']}"] if t["policy"] else []
    args += [f"--step-ms {t['step_ms']} --gpus {t['gpus']}"] if t["step_ms"] else []
    args += [f"--floor-{k.replace('_', '-')} {v}" for k, v in sorted(floor.items())]
    return " ".join(args + [endpoint_args(wildcards.source)])
