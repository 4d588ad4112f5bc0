"""Every rule of a run is checked once, when the config is read (`snakemake -n`), by one function
(`dlbench.run.spec.check`) that the CLI applies too; each mistake is one line naming the key and what to do."""

import json
import re

import pytest

from dlbench.cli import main
from dlbench.config import schema, validate_config
from dlbench.errors import UserError
from dlbench.run import matrix
from dlbench.run import spec as runspec

from .helpers import snakemake

pytestmark = pytest.mark.unit

RUN = schema()["definitions"]["run"]["properties"]
DATASET = {"d": {"synth": {}}}


def _scalar_branches(prop: dict) -> list[dict]:
    """The non-list forms a run property takes (an axis is a scalar or a list of them)."""
    if "$ref" in prop:
        prop = schema()["definitions"][prop["$ref"].rsplit("/", 1)[1]]
    return [b for b in prop.get("oneOf", [prop]) if b.get("type") != "array"]


def invalid_values(prop: dict):
    """(what, value) pairs the schema refuses for a run property: a wrong type, each bound crossed, an unknown
    choice."""
    yield "wrong type", {"a": "map"}  # no run key takes a map
    for b in _scalar_branches(prop):
        if b.get("type") in ("integer", "number"):
            yield "text for a number", "many"
        if b.get("type") == "boolean":
            yield "text for a flag", "yes"
        if "minimum" in b:
            yield "below the minimum", b["minimum"] - 1
        if "exclusiveMinimum" in b:
            yield "at the exclusive minimum", b["exclusiveMinimum"]
        if "maximum" in b:
            yield "above the maximum", b["maximum"] + 1
        if "enum" in b:
            yield "unknown choice", f"no_such_{b['enum'][0]}"


CASES = [(key, what, value) for key, prop in RUN.items() for what, value in invalid_values(prop)]


def one_line(e: pytest.ExceptionInfo) -> str:
    message = str(e.value)
    assert "\n" not in message, message
    return message


def test_every_run_key_has_invalid_values():
    keys = {key for key, _, _ in CASES}
    assert keys == set(RUN)
    assert {"batch_size", "duration_s", "resume_check", "num_workers", "loader"} <= keys


@pytest.mark.parametrize("key, what, value", CASES, ids=[f"{k}-{w}" for k, w, _ in CASES])
def test_an_invalid_run_value_is_one_line_naming_the_key(key, what, value):
    config = {"datasets": DATASET, "bench": {"scenarios": {"s": {key: value}}}}
    with pytest.raises(UserError) as workflow:
        validate_config(config, source="tiny.yaml")
    assert one_line(workflow).startswith(f"tiny.yaml: bench.scenarios.s.{key}: "), workflow.value
    with pytest.raises(UserError) as by_hand:  # the CLI's and the library's way in, through check_run
        runspec.make_run({"root": "/data/x", key: value}, label=lambda k: f"--{k.replace('_', '-')}")
    assert one_line(by_hand).startswith(f"--{key.replace('_', '-')}: "), by_hand.value


def test_messages_say_what_to_give():
    config = {"datasets": DATASET, "bench": {"scenarios": {"stream_local": {"batch_size": [8, 0]}}}}
    with pytest.raises(UserError, match=r"^config.yaml: bench.scenarios.stream_local.batch_size.1: 0 is below the "):
        validate_config(config)
    config = {"datasets": DATASET, "bench": {"scenarios": {"stream_local": {"num_workers": "many"}}}}
    with pytest.raises(UserError, match=r"num_workers: 'many' is not allowed; give a whole number of 0 or more, auto"):
        validate_config(config)


# (scenario overrides, its message in the workflow, the same rule for a run by hand): rules tying values together
CROSS_FIELD = [
    (
        {"resume_check": True},
        "bench.scenarios.s.resume_check: applies to loader dlbench_stream only, not dlbench_map",
        "--resume-check: applies to loader dlbench_stream only",
    ),
    (
        {"loader": "lerobot_stream", "fetch_episodes": 2},
        "bench.scenarios.s.fetch_episodes: applies to loader dlbench_stream only, not lerobot_stream",
        "--fetch-episodes: applies to loader dlbench_stream only",
    ),
    (
        {"loader": "lerobot_map", "decoder_cache_mb": 64},
        "bench.scenarios.s.decoder_cache_mb: applies to dlbench_map and dlbench_stream only",
        "--decoder-cache-mb: applies to dlbench_map and dlbench_stream only",
    ),
    (
        {"loader": "lerobot_map", "decode_device": "cuda"},
        "bench.scenarios.s: loader lerobot_map decodes on the CPU only",
        "loader lerobot_map decodes on the CPU only",
    ),
    (
        {"ranks": 2, "nodes": 3},
        "bench.scenarios.s: nodes (3) must not exceed ranks (2)",
        "nodes (3) must not exceed ranks (2)",
    ),
    (
        {"step_sd_ms": 10},
        "bench.scenarios.s.step_sd_ms: a step's spread needs its mean",
        "--step-sd-ms: a step's spread needs its mean",
    ),
    (
        {"policy": "act", "mode": "sarm"},
        "bench.scenarios.s.policy: give a policy or a mode (sarm), not both",
        "--policy: give a policy or a mode (sarm), not both",
    ),
    (
        {"mode": "chunky"},
        "bench.scenarios.s.mode: 'chunky' is neither single, sarm nor a key of modes",
        "--mode: 'chunky' is neither single nor sarm; give its delta_timestamps",
    ),
]


@pytest.mark.parametrize("overrides, in_workflow, by_hand", CROSS_FIELD)
def test_cross_field_rules_hold_in_the_workflow_and_by_hand(overrides, in_workflow, by_hand):
    config = validate_config({"datasets": DATASET, "bench": {"scenarios": {"s": overrides}}})
    matrix.complete_sources(config)
    with pytest.raises(UserError) as e:
        matrix.expand_runs(config)
    assert one_line(e).startswith(in_workflow), e.value
    with pytest.raises(UserError) as e:
        runspec.make_run({"root": "/data/x", **overrides}, label=lambda k: f"--{k.replace('_', '-')}")
    assert by_hand in one_line(e), e.value


def test_a_run_must_name_what_the_config_defines():
    for scenario, message in [
        ({"dataset": "nope"}, r"bench.scenarios.s.dataset: 'nope' is not a configured dataset; datasets: \['d'\]"),
        ({"source": "ftp"}, r"bench.scenarios.s.source: 'ftp' is not a configured source; sources: \['local'\]"),
    ]:
        config = validate_config({"datasets": DATASET, "bench": {"scenarios": {"s": scenario}}})
        with pytest.raises(UserError, match=f"^{message}"):
            matrix.expand_runs(config)
    config = validate_config(
        {
            "datasets": DATASET,
            "sources": {"local": {"type": "local", "data_files_root": "s3://b/files"}},
            "bench": {"scenarios": {"s": {"loader": "lerobot_map"}}},
        }
    )
    with pytest.raises(UserError, match=r"^bench.scenarios.s: loader lerobot_map reads data files under its root"):
        matrix.expand_runs(config)


def test_the_cli_names_the_option_and_checks_a_spec_file(tmp_path, capsys):
    out = tmp_path / "out"
    base = ["bench-run", "--root", str(tmp_path / "data"), "--out-dir", str(out)]
    for option, message in [
        (["--batch-size", "0"], "--batch-size: 0 is below the minimum 1; give a whole number of 1 or more"),
        (["--duration-s", "0"], "--duration-s: 0.0 must be above 0; give a number above 0"),
        (["--resume-check"], "--resume-check: applies to loader dlbench_stream only, not dlbench_map"),
        (["--loader", "lerobot_map", "--decode-device", "cuda"], "loader lerobot_map decodes on the CPU only"),
    ]:
        assert main([*base, *option]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err
    assert not out.exists()  # refused before anything was made
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps({**runspec.make_run({"root": str(tmp_path / "data")}).to_dict(), "batch_size": 0}))
    assert main(["bench-run", "--spec", str(spec_file), "--out-dir", str(out)]) == 2
    assert f"{spec_file}: batch_size: 0 is below the minimum 1" in capsys.readouterr().err


@pytest.mark.slow  # Snakemake in a subprocess: the in-process cases above cover each rule
@pytest.mark.parametrize(
    "scenario, message",
    [
        ({"batch_size": 0}, "bench.scenarios.stream_local.batch_size: 0 is below the minimum 1; give"),
        ({"resume_check": True}, "bench.scenarios.stream_local.resume_check: applies to loader dlbench_stream only"),
    ],
)
def test_snakemake_dry_run_stops_on_a_bad_run_with_one_line(tmp_path, scenario, message):
    """Caught when the workflow is parsed, before any dataset is made: one line, no traceback, no frame list."""
    config = {"datasets": DATASET, "bench": {"scenarios": {"stream_local": {"loader": "dlbench_map", **scenario}}}}
    proc = snakemake(tmp_path, config, "-n", "-c", "1")
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if "invalid configuration" in line]
    assert len(errors) == 1 and message in errors[0], proc.stderr
    assert not re.search(r"Traceback|File \"|Error in", proc.stderr + proc.stdout), proc.stderr
    assert not (tmp_path / "results").exists()
