"""One source of defaults (the config schema) for the workflow's run specs, the CLI and the library."""

import os
from dataclasses import fields

import pytest

from dlbench import spec
from dlbench.bench.runner import BenchConfig
from dlbench.cli import build_parser
from dlbench.config import defaults, synth_defaults, validate_config
from dlbench.errors import UserError


def test_cli_run_options_default_to_the_schema():
    from dlbench.cli.bench import run_from_args

    args = build_parser().parse_args(["bench-run", "--root", "/data/x", "--out-dir", "out"])
    run = run_from_args(args)
    schema = defaults("bench", "defaults")
    assert schema["batch_size"] == 16 and schema["duration_s"] == 15  # what config.yaml leaves out gets these
    for key, value in schema.items():
        assert run[key] == value, key
    assert run["dataset"] == "x" and run["run_id"] == "x-dlbench_map-single-b16-w2-cpu"


def test_library_defaults_are_the_schemas():
    schema = defaults("bench", "defaults")
    cfg = BenchConfig(root="/data/x")
    for f in fields(BenchConfig):
        if f.name in schema and f.name not in ("dataset",):
            assert getattr(cfg, f.name) == schema[f.name], f.name


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
    spec.complete_sources(config)
    (from_workflow,) = spec.expand_runs(config)
    by_hand = spec.make_run({"root": from_workflow["root"], "dataset": "d", "scenario": "s"})
    assert from_workflow == by_hand
    cfg = BenchConfig.from_spec(from_workflow, rank=1)
    assert (cfg.rank, cfg.world_size, cfg.root, cfg.dataset) == (1, 1, "results/datasets/d/v30", "d")


def test_a_spec_with_an_unknown_key_is_refused():
    with pytest.raises(UserError, match=r"run spec has unknown key\(s\) \['speed'\]"):
        BenchConfig.from_spec({**spec.make_run({"root": "/x"}), "speed": 1})


def test_remote_sources_hold_datasets_by_name():
    config = validate_config(
        {
            "datasets": {"a": {"synth": {}}, "hubset": {"v30": "hf://datasets/org/name@v3.0"}},
            "sources": {"local": {"type": "local"}, "b": {"type": "s3", "url": "s3://bkt/pre/", "stage": True}},
            "bench": {"scenarios": {"s": {"dataset": "a", "source": ["b"][0]}, "h": {"dataset": "hubset"}}},
        }
    )
    spec.complete_sources(config)
    runs = {r["scenario"]: r for r in spec.expand_runs(config)}
    assert runs["s"]["root"] == "s3://bkt/pre/a" and runs["s"]["source_spec"]["url"] == "s3://bkt/pre/"
    assert runs["h"]["root"] == "hf://datasets/org/name@v3.0" and runs["h"]["source_spec"] is None
    config["bench"]["scenarios"] = {"x": {"dataset": "hubset", "source": "b"}}
    with pytest.raises(UserError, match="bench.scenarios.x: source b stages datasets from local disk"):
        spec.expand_runs(config)


def test_modes_of_the_config_become_the_runs_delta_timestamps():
    chunk = {"cameras": [-0.5, 0.0], "action": [0.0, 0.1]}
    config = validate_config(
        {
            "datasets": {"d": {"synth": {}}},
            "modes": {"chunk": chunk},
            "bench": {"scenarios": {"s": {"mode": ["single", "chunk"]}}},
        }
    )
    spec.complete_sources(config)
    runs = {r["mode"]: r for r in spec.expand_runs(config)}
    assert runs["chunk"]["delta_timestamps"] == chunk and runs["single"]["delta_timestamps"] is None
    config["bench"]["scenarios"] = {"s": {"mode": "chunky"}}
    with pytest.raises(UserError, match=r"bench.scenarios.s.mode: 'chunky' is neither single, sarm nor a key"):
        spec.expand_runs(config)
    with pytest.raises(UserError, match="modes.sarm: sarm is built in"):
        validate_config({"datasets": {"d": {"synth": {}}}, "modes": {"sarm": chunk}})


def test_auto_workers_fill_the_cores_of_the_job(monkeypatch):
    from dlbench.spec import resolve_workers

    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    assert resolve_workers("auto") == len(os.sched_getaffinity(0))  # every core, however many cameras
    assert resolve_workers("auto", ranks_here=2) == max(1, len(os.sched_getaffinity(0)) // 2)
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "6")  # SLURM's share per rank, whatever the node has
    assert resolve_workers("auto", ranks_here=2) == 6
    assert resolve_workers(3) == 3


def test_loader_names_and_the_baseline_choices_come_from_the_schema():
    from dlbench.config import LOADERS, SAME_KIND, baseline_loader, schema

    assert schema()["properties"]["baseline_loader"]["enum"] == [SAME_KIND, *LOADERS]
    assert baseline_loader("dlbench_map") == "lerobot_map" and baseline_loader("dlbench_stream") == "lerobot_stream"
    assert baseline_loader("dlbench_map", "lerobot_stream") == "lerobot_stream"
    loader = next(
        a for a in build_parser()._subparsers._group_actions[0].choices["bench-run"]._actions if a.dest == "loader"
    )
    assert list(loader.choices) == list(LOADERS)
