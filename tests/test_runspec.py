"""One run spec (`dlbench.run.spec.RunSpec`) made from the config schema, for the workflow, the CLI and the library."""

import json
import os
from dataclasses import fields, replace

import pytest

from dlbench.cli import build_parser
from dlbench.config import defaults, synth_defaults, validate_config
from dlbench.errors import UserError
from dlbench.run import matrix
from dlbench.run import spec as runspec
from dlbench.run.spec import RunSpec

pytestmark = pytest.mark.unit


def test_cli_run_options_default_to_the_schema():
    from dlbench.cli.bench import run_from_args

    args = build_parser().parse_args(["bench-run", "--root", "/data/x", "--out-dir", "out"])
    run = run_from_args(args)
    schema = defaults("bench", "defaults")
    assert schema["batch_size"] == 16 and schema["duration_s"] == 15  # what config.yaml leaves out gets these
    for key, value in schema.items():
        assert getattr(run, key) == value, key
    assert run.dataset == "x" and run.run_id == "x-dlbench_map-single-b16-w2-cpu"


def test_the_run_spec_fields_are_the_schemas_run_properties():
    """RunSpec is written out; its first fields are the schema's run properties, in its order, each with the
    schema's default and a type that admits the schema's types; every one is a bench-run option and a key of the
    written spec. The rest are the resolved fields, each with its help (or none) for bench-run."""
    import typing

    from dlbench import config
    from dlbench.cli.bench import run_options

    props = config.schema()["definitions"]["run"]["properties"]
    names = [f.name for f in fields(RunSpec)]
    assert names[: len(props)] == list(props), "RunSpec's fields and the schema's run properties differ"
    assert names[len(props) :] == [n for n, _ in runspec.RESOLVED]
    schema = defaults("bench", "defaults")
    hints = typing.get_type_hints(RunSpec)
    for name in props:
        assert RunSpec().__getattribute__(name) == schema.get(name), name
        allowed = set(typing.get_args(hints[name])) or {hints[name]}
        wanted = runspec.value_type(name)
        assert set(wanted if isinstance(wanted, tuple) else (wanted,)) <= allowed | {float if int in allowed else None}
        if schema.get(name) is None:
            assert type(None) in allowed, f"{name}: unset by default, so its type must admit None"
    options = {name for name, _ in run_options()}
    assert set(props) <= options  # verify and lookahead, on by default, as --no-verify and --no-lookahead
    assert set(RunSpec(root="/data/x").to_dict()) == set(names) - {"rank"}


def test_every_axis_shows_in_the_run_id():
    """Two runs that differ in one axis have different ids; an axis added later (here `pool_size` as a list-valued
    field) does too, and leaves the ids of runs at its default unchanged."""
    base = RunSpec(dataset="d", root="/d")
    other = {"dataset": "e", "loader": "dlbench_stream", "mode": "sarm", "batch_size": 4, "num_workers": 0}
    other |= {
        "decode_device": "cuda",
        "step_ms": 10,
        "policy": "act",
        "ray_shuffle": "blocks",
        "daft_shuffle": "global",
    }
    assert set(other) == set(runspec.AXES)
    ids = {runspec.run_id(base)} | {runspec.run_id(replace(base, **{k: v})) for k, v in other.items()}
    assert len(ids) == len(other) + 1
    grown = (*runspec.AXES, "pool_size")
    assert runspec.run_id(base, grown) == runspec.run_id(base)
    assert runspec.run_id(replace(base, pool_size=2), grown) != runspec.run_id(replace(base, pool_size=4), grown)


def test_auto_workers_resolve_in_one_place(monkeypatch):
    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    cores = len(os.sched_getaffinity(0))
    assert runspec.resolve_workers("auto") == cores
    assert runspec.resolve_workers("auto", ranks_here=2) == max(1, cores // 2)
    assert runspec.resolve_workers(3) == 3
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "6")
    assert runspec.resolve_workers("auto", ranks_here=2) == 6


def test_synth_cli_defaults_are_the_schemas():
    args = build_parser().parse_args(["synth", "out"])
    sd = synth_defaults()
    for key in (
        "episodes",
        "length_min",
        "length_max",
        "fps",
        "codec",
        "content",
        "tasks",
        "state_dim",
        "action_dim",
        "seed",
    ):
        assert getattr(args, key) == sd[key], key


def test_the_workflow_spec_and_a_hand_run_agree(tmp_path):
    """A scenario with no overrides and the CLI with no options measure the same thing."""
    config = validate_config({"datasets": {"d": {"synth": {}}}, "bench": {"scenarios": {"s": {}}}})
    matrix.complete_sources(config)
    (from_workflow,) = matrix.expand_runs(config)
    by_hand = runspec.make_run({"root": from_workflow.root, "dataset": "d", "scenario": "s"})
    assert from_workflow == by_hand
    runspec.write(from_workflow, tmp_path / "spec.json")
    cfg = runspec.read(tmp_path / "spec.json")
    assert cfg == from_workflow and "rank" not in json.loads((tmp_path / "spec.json").read_text())
    assert (cfg.rank, cfg.world_size, cfg.root, cfg.dataset) == (0, 1, "results/datasets/d/v30", "d")


def test_a_spec_with_an_unknown_key_is_refused():
    with pytest.raises(UserError, match=r"run spec has unknown key\(s\) \['speed'\]"):
        RunSpec.from_dict({**runspec.make_run({"root": "/x"}).to_dict(), "speed": 1})


def test_remote_sources_hold_datasets_by_name():
    config = validate_config(
        {
            "datasets": {"a": {"synth": {}}, "hubset": {"v30": "hf://datasets/org/name@v3.0"}},
            "sources": {"local": {"type": "local"}, "b": {"type": "s3", "url": "s3://bkt/pre/", "stage": True}},
            "bench": {"scenarios": {"s": {"dataset": "a", "source": ["b"][0]}, "h": {"dataset": "hubset"}}},
        }
    )
    matrix.complete_sources(config)
    runs = {r.scenario: r for r in matrix.expand_runs(config)}
    assert runs["s"].root == "s3://bkt/pre/a" and runs["s"].source_spec["url"] == "s3://bkt/pre/"
    assert runs["h"].root == "hf://datasets/org/name@v3.0" and runs["h"].source_spec is None
    config["bench"]["scenarios"] = {"x": {"dataset": "hubset", "source": "b"}}
    with pytest.raises(UserError, match="bench.scenarios.x: source b stages datasets from local disk"):
        matrix.expand_runs(config)


def test_modes_of_the_config_become_the_runs_delta_timestamps():
    chunk = {"cameras": [-0.5, 0.0], "action": [0.0, 0.1]}
    config = validate_config(
        {
            "datasets": {"d": {"synth": {}}},
            "modes": {"chunk": chunk},
            "bench": {"scenarios": {"s": {"mode": ["single", "chunk"]}}},
        }
    )
    matrix.complete_sources(config)
    runs = {r.mode: r for r in matrix.expand_runs(config)}
    assert runs["chunk"].delta_timestamps == chunk and runs["single"].delta_timestamps is None
    config["bench"]["scenarios"] = {"s": {"mode": "chunky"}}
    with pytest.raises(UserError, match=r"bench.scenarios.s.mode: 'chunky' is neither single, sarm nor a key"):
        matrix.expand_runs(config)
    with pytest.raises(UserError, match="modes.sarm: sarm is built in"):
        validate_config({"datasets": {"d": {"synth": {}}}, "modes": {"sarm": chunk}})


def test_auto_workers_fill_the_cores_of_the_job(monkeypatch):
    from dlbench.run.spec import resolve_workers

    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    assert resolve_workers("auto") == len(os.sched_getaffinity(0))  # every core, however many cameras
    assert resolve_workers("auto", ranks_here=2) == max(1, len(os.sched_getaffinity(0)) // 2)
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "6")  # SLURM's share per rank, whatever the node has
    assert resolve_workers("auto", ranks_here=2) == 6
    assert resolve_workers(3) == 3


def test_loader_names_and_the_baseline_choices_come_from_the_schema():
    from dlbench.config import schema
    from dlbench.run.loaders import LOADERS, SAME_KIND, baseline_loader

    assert schema()["properties"]["baseline_loader"]["anyOf"][0]["enum"] == [SAME_KIND, *LOADERS]
    assert baseline_loader("dlbench_map") == "lerobot_map" and baseline_loader("dlbench_stream") == "lerobot_stream"
    assert baseline_loader("dlbench_map", "lerobot_stream") == "lerobot_stream"
    loader = next(
        a for a in build_parser()._subparsers._group_actions[0].choices["bench-run"]._actions if a.dest == "loader"
    )
    assert loader.choices is None  # lerobot_map@NAME too: the value is checked against the schema with the run's
