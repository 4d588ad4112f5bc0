"""The benchmark matrix: a validated config.yaml expanded into runs (`dlbench.run.spec.RunSpec`), each resolved
once and whole, and where the workflow finds each dataset and source. Torch-free, so that parsing the workflow stays
fast.
"""

from __future__ import annotations

import itertools
from pathlib import Path

from ..config import DATASET_KINDS, check_run_values
from ..errors import UserError
from ..format.paths import is_remote
from ..peer import DEFAULT_PEER
from ..sources import Source
from .loaders import LANCE_LOADERS, LoaderName
from .modes import BUILTIN_MODES
from .spec import AXES, RunSpec, check


# ------------------------------------------------------------------------------------------------- datasets
def dataset_kind(config: dict, name: str) -> str:
    """synth, v21, v30 or reencode: how the DAG gets the dataset's v3.0 form."""
    ds = config["datasets"][name]
    return next(k for k in DATASET_KINDS if k in ds)


def converted_root(name: str) -> str:
    return f"results/datasets/{name}/v30"


def v30_path(config: dict, name: str) -> str:
    """Where the dataset's v3.0 form lives: a v30 dataset where it is, the others where the DAG converts them."""
    ds = config["datasets"][name]
    return ds["v30"] if "v30" in ds else converted_root(name)


def dataset_source(config: dict, name: str) -> str | None:
    """The v2.1 dataset the DAG converts (a synth dataset's is written by the DAG), or None for v30."""
    ds = config["datasets"][name]
    if "v21" in ds:
        return ds["v21"]
    return f"results/datasets/{name}/v21" if "synth" in ds else None


def reencoded_from(config: dict, name: str) -> str | None:
    """The name of the dataset a reencode dataset is made from (None for the other kinds)."""
    return config["datasets"][name].get("reencode", {}).get("from")


def encoding(config: dict, name: str):
    """A reencode dataset's `encoding.options.Encoding`; errors name the config key."""
    from ..encoding.options import from_config

    values = {k: v for k, v in config["datasets"][name]["reencode"].items() if k != "workers"}
    return from_config(values, f"datasets.{name}.reencode")[1]


def encoded_datasets(config: dict) -> list[str]:
    """The datasets encodings.csv describes: every reencode dataset and the dataset it is made from."""
    names = [n for n in config["datasets"] if dataset_kind(config, n) == "reencode"]
    return sorted(set(names) | {reencoded_from(config, n) for n in names})


def _check_reencode(config: dict, name: str) -> None:
    seen = [name]
    while (source := reencoded_from(config, seen[-1])) is not None:
        if source not in config["datasets"]:
            raise UserError(
                f"datasets.{seen[-1]}.reencode.from: {source!r} is not a dataset of this config; "
                f"datasets: {sorted(config['datasets'])}"
            )
        if source in seen:
            raise UserError(f"datasets.{name}.reencode.from: a loop ({' -> '.join([*seen, source])})")
        seen.append(source)
    encoding(config, name)


def check_local_dataset(config: dict, name: str) -> None:
    """A v21 or v30 dataset on local disk must exist and be that version: one line naming the key otherwise; a
    reencode dataset must name a dataset of this config, and an encoding FFmpeg can make.

    URLs are checked by the jobs that read them (validate, bench), where the network is."""
    from ..format import meta

    kind = dataset_kind(config, name)
    if kind == "reencode":
        _check_reencode(config, name)
        return check_local_dataset(config, reencoded_from(config, name))
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
def source(config: dict, name: str) -> Source:
    """The configured source `name`: what the workflow and the runs ask of it."""
    return Source(config["sources"][name], name)


def complete_sources(config: dict) -> None:
    """Each source's rules the schema cannot say (`Source.check`)."""
    for name in config["sources"]:
        source(config, name).check()


def source_url(config: dict, source_name: str, dataset: str) -> str:
    """Where a run reads `dataset` from a source: local reads it where it lives, a remote source under its name."""
    return source(config, source_name).dataset_url(dataset, v30_path(config, dataset))


def lance_url(config: dict, source_name: str, dataset: str) -> str:
    """Where a run of lance_map reads the dataset's Lance copy."""
    return source(config, source_name).lance_url(dataset)


def prewarm_report(source: str, dataset: str) -> str:
    return f"results/prewarm/{source}/{dataset}.json"


def staged_marker(source: str, dataset: str) -> str:
    return f"results/sources/{source}/{dataset}.staged.json"


# ------------------------------------------------------------------------------------------------------ runs
def default_dataset(config: dict) -> str:
    return config["bench"]["defaults"].get("dataset") or next(iter(config["datasets"]))


# ----------------------------------------------------------------------------------------------------- peers
def peer_requirement(config: dict, name: str) -> str:
    """What scripts/peer-env.sh installs for `peers.NAME` (PEER_REQUIREMENT): a pip requirement, or the absolute
    path of a checkout or wheel (checked to exist: one line naming the key otherwise)."""
    spec = config["peers"][name]
    if "pip" in spec:
        return spec["pip"]
    kind = next(iter(spec))
    path = Path(spec[kind]).expanduser()
    ok = path.is_file() if kind == "wheel" else (path / "pyproject.toml").is_file()
    if not ok:
        want = "a LeRobot wheel file" if kind == "wheel" else "a LeRobot checkout (a directory with pyproject.toml)"
        raise UserError(f"peers.{name}.{kind}: {spec[kind]} is not {want}; fix the path")
    return str(path.resolve())


def check_peer(loader: str, config: dict, key: str) -> None:
    """A loader `X@NAME` names a peer defined under `peers:`; `key` names where it was given."""
    name = LoaderName.parse(loader).peer
    if name and name != DEFAULT_PEER and name not in config.get("peers", {}):
        defined = f"; defined: {', '.join(sorted(config['peers']))}" if config.get("peers") else ""
        raise UserError(
            f"{key}: peer {name!r} is not defined under peers:{defined}; add peers: {{{name}: {{pip: "
            f"lerobot==VERSION}}}} (or path: CHECKOUT, wheel: FILE)"
        )


def expand_runs(config: dict) -> list[RunSpec]:
    """Every run of the matrix (a validated config): each scenario's axes over bench.defaults, expanded and
    resolved. Raises `UserError` naming the scenario for runs no loader can measure honestly."""
    for name in config.get("peers", {}):
        peer_requirement(config, name)
    check_peer(config.get("baseline_loader", ""), config, "baseline_loader")
    runs = []
    for scenario, overrides in config["bench"]["scenarios"].items():
        merged = {**config["bench"]["defaults"], **overrides}
        merged.setdefault("dataset", default_dataset(config))
        lists = {k: (v if isinstance(v, list) else [v]) for k, v in merged.items() if k in AXES}
        fixed = {k: v for k, v in merged.items() if k not in AXES}
        for combo in itertools.product(*lists.values()):
            runs.append(resolve(config, {**fixed, **dict(zip(lists, combo))}, scenario))
    ids = [(r.scenario, r.run_id) for r in runs]
    dup = next((i for i in ids if ids.count(i) > 1), None)
    if dup:
        raise UserError(f"bench.scenarios.{dup[0]}: run {dup[1]} appears twice; remove the repeated axis value")
    return runs


def resolve(config: dict, run: dict, scenario: str) -> RunSpec:
    """One run: its values plus where it reads from and how it treats an unreachable or cold source; checked
    (`run.spec.check`), errors naming `bench.scenarios.<scenario>.<key>`."""
    where = f"bench.scenarios.{scenario}"
    check_run_values(run, lambda key: f"{where}.{key}")
    check_peer(run["loader"], config, f"{where}.loader")
    _check_references(run, config, where)
    src = source(config, run["source"])
    ds = config["datasets"][run["dataset"]]
    spec = RunSpec.from_dict(
        {
            **run,
            "scenario": scenario,
            "root": source_url(config, run["source"], run["dataset"]),
            "data_files_root": src.data_files_root(run["dataset"]),
            "lance_root": src.lance_url(run["dataset"]) if run["loader"] in LANCE_LOADERS else None,
            "source_spec": src.spec if src.remote else None,
            "delta_timestamps": config["modes"].get(run["mode"]),
            "on_unreachable": ds.get("on_unreachable") or src.on_unreachable,
            "require_warm": prewarm_report(run["source"], run["dataset"]) if src.gated else None,
            "on_cold": src.on_cold,
        },
        where,
    ).with_id()
    check(spec, where)
    return spec


def _check_references(run: dict, config: dict, where: str) -> None:
    """The run's dataset, source and mode are defined in the config, and a staging source has a local dataset."""
    if run["dataset"] not in config["datasets"]:
        raise UserError(
            f"{where}.dataset: {run['dataset']!r} is not a configured dataset; datasets: {sorted(config['datasets'])}"
        )
    if run["source"] not in config["sources"]:
        raise UserError(
            f"{where}.source: {run['source']!r} is not a configured source; sources: {sorted(config['sources'])}"
        )
    root = v30_path(config, run["dataset"])
    if source(config, run["source"]).stages and is_remote(root):
        raise UserError(
            f"{where}: source {run['source']} stages datasets from local disk, but dataset {run['dataset']} is at "
            f"{root}; read it with source: local (where it lives)"
        )
    if run["loader"] in LANCE_LOADERS and is_remote(root):
        raise UserError(
            f"{where}: loader lance_map reads a Lance copy the workflow converts from a local v3.0 dataset, but "
            f"dataset {run['dataset']} is at {root}; download it and list it as v30: LOCAL_PATH"
        )
    if run["mode"] not in BUILTIN_MODES and run["mode"] not in config["modes"]:
        raise UserError(
            f"{where}.mode: {run['mode']!r} is neither single, sarm nor a key of modes: {sorted(config['modes'])}; "
            f"define it under modes: as delta_timestamps (seconds per feature key)"
        )
