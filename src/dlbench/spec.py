"""Run specs: the benchmark matrix of a validated config expanded into runs, each resolved once and whole.

A run spec is a flat dict: what is measured (dataset, loader, mode, batch size, workers, decode device, window...),
where it is read from (`root`, `source`, `source_spec`) and how the run treats a missing GPU, a cold or unreachable
source. The workflow writes one spec file per run, the bench job hands that file to every rank unchanged, and the
rank records carry it as their `config`. Torch-free, so that parsing the workflow stays fast; every default comes
from the config schema (`dlbench.config`).
"""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

from . import atomic
from .config import BUILTIN_MODES, DATASET_KINDS, LEROBOT_LOADERS, check_deltas, check_run_values, defaults
from .errors import UserError
from .format.paths import is_remote

AXES = ("dataset", "loader", "mode", "batch_size", "num_workers", "decode_device", "step_ms")
# run keys without a schema default: None is "not set"
UNSET = {"num_batches": None, "decoder_cache_size": None, "decoder_cache_mb": None, "remote_block_kb": None}


def run_id(run: dict) -> str:
    """`<dataset>-<loader>-<mode>-b<batch>-w<workers>[-s<step ms>]-<decode device>`: unique within a scenario
    (the device last: the workflow sends `-cuda` runs to their own rule)."""
    step = f"-s{run['step_ms']}" if run.get("step_ms") else ""
    return (
        f"{run['dataset']}-{run['loader']}-{run['mode']}-b{run['batch_size']}-w{run['num_workers']}{step}-"
        f"{run['decode_device']}"
    )


# ------------------------------------------------------------------------------------------------- datasets
def dataset_kind(config: dict, name: str) -> str:
    """synth, v21 or v30: how the DAG gets the dataset's v3.0 form."""
    ds = config["datasets"][name]
    return next(k for k in DATASET_KINDS if k in ds)


def converted_root(name: str) -> str:
    return f"results/datasets/{name}/v30"


def dataset_root(config: dict, name: str) -> str:
    """Where the dataset's v3.0 form lives: a v30 dataset where it is, the others where the DAG converts them."""
    ds = config["datasets"][name]
    return ds["v30"] if "v30" in ds else converted_root(name)


def dataset_source(config: dict, name: str) -> str | None:
    """The v2.1 dataset the DAG converts (a synth dataset's is written by the DAG), or None for v30."""
    ds = config["datasets"][name]
    if "v21" in ds:
        return ds["v21"]
    return f"results/datasets/{name}/v21" if "synth" in ds else None


def check_local_dataset(config: dict, name: str) -> None:
    """A v21 or v30 dataset on local disk must exist and be that version: one line naming the key otherwise.

    URLs are checked by the jobs that read them (validate, bench), where the network is."""
    from .format import meta

    kind = dataset_kind(config, name)
    if kind == "synth":
        return
    path = config["datasets"][name][kind]
    if is_remote(path):
        return
    key = f"datasets.{name}.{kind}"
    want = "v2.1" if kind == "v21" else "v3.0"
    if not (Path(path) / "meta" / "info.json").exists():
        what = "does not exist" if not Path(path).exists() else "has no meta/info.json"
        raise UserError(
            f"{key}: {path} {what}; give the root of a LeRobot {want} dataset (the directory holding "
            f"meta/, data/ and videos/)"
        )
    found = meta.read_info(path).get("codebase_version")
    if found != want:
        other = {"v2.1": "v21", "v3.0": "v30"}.get(found)
        hint = f"; list it as {other}: {path}" if other else ""
        raise UserError(f"{key}: {path} holds a {found!r} dataset, not {want}{hint}")


# -------------------------------------------------------------------------------------------------- sources
def complete_sources(config: dict) -> None:
    """A remote source needs its address; a shaped loopback source its proxy's port (jobs find the server's address
    in its state file, `dlbench.loopback.endpoint`, as it may run on another machine than the job)."""
    for name, spec in config["sources"].items():
        lb = spec.get("loopback")
        if lb is not None and (lb.get("latency_ms") or lb.get("bandwidth_mbps")) and not lb.get("port"):
            raise UserError(f"sources.{name}.loopback: a shaped source needs a port")
        if spec["type"] in ("s3", "http") and not spec.get("url"):
            raise UserError(f"sources.{name}: type {spec['type']} needs a url")
        if spec["type"] == "bucket" and not spec.get("bucket"):
            raise UserError(f"sources.{name}: type bucket needs bucket: OWNER/NAME")
        if spec["type"] == "hub" and (
            lb is None or lb.get("latency_ms") or lb.get("bandwidth_mbps") or not spec.get("stage")
        ):
            raise UserError(
                f"sources.{name}: type hub is the loopback Hub: give it `loopback: {{}}` (unshaped) and `stage: true`; "
                f"a dataset on the real Hub is a dataset (v30: hf://datasets/ORG/NAME@REV) read with source: local"
            )


def source_base(spec: dict) -> str:
    """The URL under which a remote source holds datasets by name."""
    if spec["type"] in ("s3", "http"):
        return spec["url"].rstrip("/")
    if spec["type"] == "bucket":
        return f"hf://buckets/{spec['bucket']}/{spec.get('prefix', '')}".rstrip("/")
    raise UserError(f"source type {spec['type']!r} has no base URL")


def source_url(config: dict, source: str, dataset: str) -> str:
    """Where a run reads `dataset` from `source`: local reads it where it lives, a remote source under its name."""
    spec = config["sources"][source]
    if spec["type"] == "local":
        return dataset_root(config, dataset)
    if spec["type"] == "hub":  # the tag LeRobot looks for; the loopback Hub serves one tree under every revision
        from .loopback import HUB_ORG

        return f"hf://datasets/{HUB_ORG}/{dataset}@v3.0"
    return f"{source_base(spec)}/{dataset}"


def prewarm_report(source: str, dataset: str) -> str:
    return f"results/prewarm/{source}/{dataset}.json"


def staged_marker(source: str, dataset: str) -> str:
    return f"results/sources/{source}/{dataset}.staged.json"


# ------------------------------------------------------------------------------------------------------ runs
def default_dataset(config: dict) -> str:
    return config["bench"]["defaults"].get("dataset") or next(iter(config["datasets"]))


def expand_runs(config: dict) -> list[dict]:
    """Every run of the matrix (a validated config): each scenario's axes over bench.defaults, expanded and
    resolved. Raises `UserError` naming the scenario for runs no loader can measure honestly."""
    runs = []
    for scenario, overrides in config["bench"]["scenarios"].items():
        merged = {**config["bench"]["defaults"], **overrides}
        merged.setdefault("dataset", default_dataset(config))
        lists = {k: (v if isinstance(v, list) else [v]) for k, v in merged.items() if k in AXES}
        fixed = {k: v for k, v in merged.items() if k not in AXES}
        for combo in itertools.product(*lists.values()):
            runs.append(resolve(config, {**fixed, **dict(zip(lists, combo))}, scenario))
    ids = [(r["scenario"], r["run_id"]) for r in runs]
    dup = next((i for i in ids if ids.count(i) > 1), None)
    if dup:
        raise UserError(f"bench.scenarios.{dup[0]}: run {dup[1]} appears twice; remove the repeated axis value")
    return runs


def resolve(config: dict, run: dict, scenario: str) -> dict:
    """One run's spec: its values plus where it reads from and how it treats an unreachable or cold source."""
    where = f"bench.scenarios.{scenario}"
    check_run(run, where, config)
    src = config["sources"][run["source"]]
    ds = config["datasets"][run["dataset"]]
    remote = src["type"] != "local"
    spec = {
        **UNSET,
        **run,
        "scenario": scenario,
        "root": source_url(config, run["source"], run["dataset"]),
        "data_files_root": _data_files_root(src, run["dataset"]),
        "source_spec": src if remote else None,
        "delta_timestamps": config["modes"].get(run["mode"]),
        "on_unreachable": ds.get("on_unreachable") or (src["on_unreachable"] if remote else "error"),
        "require_warm": prewarm_report(run["source"], run["dataset"]) if src.get("require_warm") else None,
        "on_cold": src.get("on_cold", "error"),
    }
    spec["run_id"] = run_id(spec)
    return spec


def _data_files_root(src: dict, dataset: str) -> str | None:
    """Where a source's `data_files_root` puts this dataset's data/ and videos/ (None: under the root)."""
    return f"{src['data_files_root'].rstrip('/')}/{dataset}" if src.get("data_files_root") else None


# ----------------------------------------------------------------------------------------- the rules of a run
def check_run(run: dict, where: str, config: dict | None = None, label=None) -> None:
    """Check every rule of one run, in one place: the workflow calls it for each run of the matrix when it is parsed
    (`snakemake -n` finds every mistake), `make_run` and `dlbench bench-run` for a run given by hand.

    The schema's run definition gives each value's type, bounds and choices; the rules below tie values together
    (what each loader can do). With `config` (a validated config.yaml), the run's dataset, source and mode must be
    defined there; without it, `run` is a whole spec (it has `root`). Raises `UserError`: one line naming the key,
    as `label(key)` writes it (default `<where>.<key>`), and what to do."""
    label = label or (lambda key: f"{where}.{key}")
    check_run_values(run, label)
    if config is not None:
        _check_references(run, config, where, label)
        root = source_url(config, run["source"], run["dataset"])
        data_files_root = _data_files_root(config["sources"][run["source"]], run["dataset"])
    else:
        _check_mode(run, label)
        root, data_files_root = run["root"], run.get("data_files_root")
    _check_lerobot(run, where, root, data_files_root)
    _check_dlbench_only(run, label)
    if run["nodes"] > run["ranks"]:
        raise UserError(
            f"{where}: nodes ({run['nodes']}) must not exceed ranks ({run['ranks']}): every node runs at least one rank"
        )


def _check_references(run: dict, config: dict, where: str, label) -> None:
    """The run's dataset, source and mode are defined in the config, and a staging source has a local dataset."""
    if run["dataset"] not in config["datasets"]:
        raise UserError(
            f"{label('dataset')}: {run['dataset']!r} is not a configured dataset; datasets: "
            f"{sorted(config['datasets'])}"
        )
    if run["source"] not in config["sources"]:
        raise UserError(
            f"{label('source')}: {run['source']!r} is not a configured source; sources: {sorted(config['sources'])}"
        )
    root = dataset_root(config, run["dataset"])
    if config["sources"][run["source"]].get("stage") and is_remote(root):
        raise UserError(
            f"{where}: source {run['source']} stages datasets from local disk, but dataset {run['dataset']} is at "
            f"{root}; read it with source: local (where it lives)"
        )
    if run["mode"] not in BUILTIN_MODES and run["mode"] not in config["modes"]:
        raise UserError(
            f"{label('mode')}: {run['mode']!r} is neither single, sarm nor a key of modes: {sorted(config['modes'])}; "
            f"define it under modes: as delta_timestamps (seconds per feature key)"
        )


def _check_mode(run: dict, label) -> None:
    """A run by hand: its mode is built in, or comes with its delta_timestamps."""
    if run.get("delta_timestamps") is not None:
        check_deltas(run["delta_timestamps"], label("delta_timestamps"))
    elif run["mode"] not in BUILTIN_MODES:
        raise UserError(
            f"{label('mode')}: {run['mode']!r} is neither single nor sarm; give its delta_timestamps "
            f"(--delta-timestamps FILE: seconds per feature key)"
        )


def _check_lerobot(run: dict, where: str, root: str, data_files_root: str | None) -> None:
    """What LeRobot 0.6.1's loaders cannot do: decode on a GPU, read other stores (buckets: the stream only), read
    data files apart from the metadata."""
    loader = run["loader"]
    if loader not in LEROBOT_LOADERS:
        return
    if run["decode_device"] != "cpu":
        raise UserError(
            f"{where}: loader {loader} decodes on the CPU only (LeRobot 0.6.1); use "
            f"decode_device: cpu, or loader dlbench_map / dlbench_stream for cuda"
        )
    # lerobot_stream splits by rank with datasets' split_dataset_by_node (bench.lerobot_buckets) and reads buckets
    bucket_ok = loader == "lerobot_stream" and str(root).startswith("hf://buckets/")
    if is_remote(root) and not str(root).startswith("hf://datasets/") and not bucket_ok:
        raise UserError(
            f"{where}: loader {loader} reads local datasets and Hub repos only (lerobot_stream also hf://buckets), "
            f"not {root}; use dlbench_map or dlbench_stream there"
        )
    if data_files_root:
        raise UserError(
            f"{where}: loader {loader} reads data files under its root only; data_files_root needs a dlbench loader"
        )


# settings only dlbench's loaders have (LeRobot's would ignore them, measuring something else than asked)
DLBENCH_ONLY = ("decoder_cache_size", "decoder_cache_mb", "remote_block_kb")
STREAM_ONLY = ("fetch_episodes", "resume_check")  # dlbench_stream alone fetches ahead and resumes from a state


def _check_dlbench_only(run: dict, label) -> None:
    """Settings a run's loader does not have are refused rather than silently ignored."""
    loader = run["loader"]
    for key in STREAM_ONLY:
        if run.get(key) and loader != "dlbench_stream":
            raise UserError(
                f"{label(key)}: applies to loader dlbench_stream only, not {loader}; turn it off for this run "
                f"(set it only where the loader is dlbench_stream)"
            )
    for key in DLBENCH_ONLY:
        if run.get(key) is not None and loader in LEROBOT_LOADERS:
            raise UserError(
                f"{label(key)}: applies to dlbench_map and dlbench_stream only, not {loader}; leave it unset for "
                f"this run"
            )


def make_run(values: dict, scenario: str = "adhoc", label=None) -> dict:
    """A run spec by hand (the CLI, the library): the schema's run defaults under `values`, which needs `root`;
    checked by `check_run` (`label` names a key in its messages, e.g. as a command-line option)."""
    spec = {
        **defaults("bench", "defaults"),
        **UNSET,
        "data_files_root": None,
        "source_spec": None,
        "delta_timestamps": None,
        "on_unreachable": "error",
        "require_warm": None,
        "on_cold": "error",
        **{k: v for k, v in values.items() if v is not None},
    }
    if not spec.get("root"):
        raise UserError("a run needs the dataset's root (--root PATH_OR_URL)")
    spec.setdefault("dataset", Path(str(spec["root"]).rstrip("/").split("@")[0]).name or "dataset")
    spec["scenario"] = spec.get("scenario") or scenario
    spec["run_id"] = run_id(spec)
    check_run(spec, f"run {spec['run_id']}", label=label)
    return spec


def resolve_workers(num_workers: int | str, ranks_here: int = 1) -> int:
    """`auto`: one worker per core this job may use, shared by the ranks on this host (a worker decodes every
    camera of its items in turn, so dividing by cameras would leave cores idle)."""
    if num_workers != "auto":
        return int(num_workers)
    cores = int(os.environ.get("SLURM_CPUS_PER_TASK", 0)) * ranks_here or len(os.sched_getaffinity(0))
    return max(1, cores // max(1, ranks_here))


def write(spec: dict, path: str | Path) -> None:
    atomic.write_json(path, spec)


def read(path: str | Path) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise UserError(
            f"{path}: run spec not found; build it with the workflow (results/specs/...) or pass the "
            f"run's options instead"
        ) from None
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: not a valid run spec ({e}); delete it and rerun") from None
