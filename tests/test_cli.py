"""The command line: help on every argument with its default, -q anywhere, --version, the internal command hidden."""

import argparse
import sys
from pathlib import Path

import pytest

from dlbench import __version__
from dlbench.cli import build_parser

pytestmark = pytest.mark.unit


def _parsers(parser, path=()):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, (*path, name))


def test_every_argument_has_help_and_defaults_are_shown():
    for path, parser in _parsers(build_parser()):
        for action in parser._actions:
            assert action.help, f"dlbench {' '.join(path)}: {action.dest} has no help"
    text = dict(_parsers(build_parser()))[("prewarm-check",)].format_help()
    assert "(default: 8)" in text  # --files


@pytest.mark.parametrize("argv", [["-q", "validate", "x"], ["validate", "x", "-q"], ["validate", "-q", "x"]])
def test_quiet_is_taken_anywhere(argv):
    assert build_parser().parse_args(argv).quiet is True
    assert getattr(build_parser().parse_args(["validate", "x"]), "quiet", False) is False


def test_version_and_the_hidden_internal_command(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--version"])
    assert capsys.readouterr().out.strip() == f"dlbench {__version__}"
    listing = build_parser().format_help()
    assert "bench-run" in listing and "one rank of a run" not in listing
    assert build_parser().parse_args(["bench-rank", "--spec", "s.json", "--out-dir", "o"]).command == "bench-rank"


def test_choices_are_enforced(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench-run", "--out-dir", "o", "--loader", "nope"])
    assert "invalid choice" in capsys.readouterr().err


def test_log_lines_are_stamped_and_errors_are_one_plain_line(tmp_path, capsys):
    import re

    from dlbench.cli import main

    assert main(["synth", str(tmp_path / "d"), "--episodes", "1", "--length-min", "3", "--length-max", "3"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d wrote v2\.1 dataset .*", out[-1]), out
    assert main(["validate", str(tmp_path / "d")]) == 2
    assert capsys.readouterr().err.startswith("dlbench validate: error: ")


def test_a_command_needing_the_workflow_extra_names_it(tmp_path, capsys, monkeypatch):
    from dlbench.cli import main

    monkeypatch.setitem(sys.modules, "pandas", None)  # as after `pip install dlbench` without the extra
    monkeypatch.delitem(sys.modules, "dlbench.report.aggregate", raising=False)
    assert main(["aggregate", str(tmp_path), "--out", str(tmp_path / "summary.csv")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dlbench aggregate: error: needs the pandas package") and "dlbench[workflow]" in err
    assert not (tmp_path / "summary.csv").exists()


def test_the_benchmark_suite_lists_every_benchmark_and_runs_one_by_name(capsys):
    """`python -m benchmarks` names every benchmark module with its goal, each has `main(argv)`; an unknown name is
    one line."""
    import importlib

    from benchmarks.__main__ import benchmarks, main

    suite = benchmarks()
    assert {"frontier", "training", "tune", "model"} <= set(suite) and all(suite.values())
    for name in suite:
        assert callable(importlib.import_module(f"benchmarks.{name}").main), name
    assert main([]) == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in suite)
    assert main(["nope"]) == 2 and capsys.readouterr().err.count("\n") == 1


def test_every_benchmark_takes_the_shared_options_and_reports_its_tables_and_goals_as_json(tmp_path, capsys):
    """Each benchmark's parser is the suite's (--json everywhere); a Report prints markdown rows as they come, a
    second table under its own head, each goal with holds / misses, and writes all of it to --json."""
    import importlib
    import inspect
    import json

    from benchmarks.__main__ import benchmarks
    from benchmarks.common import Report, parser

    for name in benchmarks():
        source = inspect.getsource(importlib.import_module(f"benchmarks.{name}"))
        assert "parser(__doc__" in source and "argparse.ArgumentParser(" not in source, name
    a = parser("doc", sets=["quick"], choices=["quick", "realistic16"]).parse_args(["--json", str(tmp_path / "r.json")])
    assert a.sets == ["quick"] and a.workdir
    assert not hasattr(parser("doc", workdir=False).parse_args([]), "workdir")
    report = Report(a, ["set", "frames/s"], "demo")
    report.row(**{"set": "quick", "frames/s": 1234.5})
    report.table(["loader", "effective"])
    report.row(loader="stream", effective=0.8123)
    assert report.goal("stream at the floor", True, "0.81") and not report.goal("map faster", False)
    report.close()
    out = capsys.readouterr().out
    assert "| quick | 1,234 |" in out and "| stream | 0.81 |" in out and out.count("|---|") == 2
    assert "goal stream at the floor: holds (0.81)" in out and "goal map faster: misses" in out
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["benchmark"] == "demo" and [t["columns"] for t in doc["tables"]] == [
        ["set", "frames/s"],
        ["loader", "effective"],
    ]
    assert doc["tables"][1]["rows"] == [{"loader": "stream", "effective": 0.8123}]
    assert [g["holds"] for g in doc["goals"]] == [True, False]


@pytest.mark.parametrize(
    "module",
    [
        "dlbench.cli",
        "dlbench.loader.columns",
        "dlbench.loader.partition",
        "dlbench.bench.launch",
        "dlbench.model.calibrate",
    ],
)
def test_a_module_that_starts_other_processes_or_reads_columns_imports_no_torch(module):
    """torch costs seconds of CPU to import (3 on a 2-core VM): the command line, the launcher of a bench job's ranks
    (each rank imports it, in its own process), the calibration's driver and the parquet side of a dataset do not
    pay it where no loader runs in their process."""
    import subprocess

    code = f"import sys, {module}; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0, f"{module} imports torch"


def test_help_lists_the_users_commands_first_and_the_workflows_steps_apart():
    """`dlbench --help`: tune, bench-run, validate, ... first; under a heading the steps Snakemake runs; every
    command still listed once and still parsed."""
    from dlbench.cli import USER_COMMANDS

    text = build_parser().format_help()
    listed = [ln.split()[0] for ln in text.splitlines() if ln.startswith("    ") and not ln.startswith("     ")]
    heading = text.index("the workflow's steps")
    assert listed[: len(USER_COMMANDS)] == list(USER_COMMANDS)
    assert all(text.index(f"    {name} ") < heading for name in USER_COMMANDS)
    assert text.index("    aggregate ") > heading and text.index("    calibrate ") > heading
    assert len(listed) == len(set(listed))
    assert build_parser().parse_args(["aggregate", "x", "--out", "s.csv"]).command == "aggregate"


def test_the_docs_name_only_what_exists(tmp_path):
    """scripts/docs_check.py (run by `make lint`): the docs as they are name nothing missing; a doc naming a missing
    path, command, benchmark, make target, code name, config key or source file gets one line for each."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("docs_check", Path(__file__).parent.parent / "scripts/docs_check.py")
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    assert check.problems() == []
    doc = tmp_path / "bad.md"
    doc.write_text(
        "`src/dlbench/nope.py` `dlbench nope` `python -m benchmarks nope` `make nope` `loader.stream.nope_fn`\n"
        "`bench.nope_key` `nope_file.py` and fine: `src/dlbench/loader/stream.py` `dlbench tune` `make lint`\n"
        "`loader.partition.interleave` `bench.defaults` `results/<scenario>/run.json` `summary.csv`\n"
    )
    found = check.problems([doc])
    assert len(found) == 7, found
    assert all(line.startswith(f"{doc}:") for line in found)


def test_config_yaml_moves_a_default_only_with_its_reason_on_the_line(tmp_path):
    """One set of defaults: config.yaml as it is says why wherever it moves a setting off the schema's default; a
    moved setting without a comment on its line (a flow mapping's, or a whole section default's key) is named."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("docs_check", Path(__file__).parent.parent / "scripts/docs_check.py")
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    assert check.unexplained_overrides() == []
    config = tmp_path / "config.yaml"
    config.write_text(
        "bench:\n  defaults:\n    warmup_s: 1\n    duration_s: 2  # why\n    repeats: 3\n"
        "advice: {verify: 1}\ntune: {time_budget_s: 9}  # why\ntargets:\n  single: 5\n  sarm: 320\n"
    )
    found = check.unexplained_overrides(config)
    assert [line.split(": ")[1].split()[0] for line in found] == ["bench.defaults.warmup_s", "advice.verify",
                                                                  "targets.single"], found  # fmt: skip


def test_every_command_writes_to_out_or_out_dir_and_still_reads_its_old_spelling():
    """One spelling for where a command writes: --out (a file) or --out-dir (a directory); a command's earlier
    spelling (--record, --report, --outdir) is still read but no longer listed."""
    parser = build_parser()
    sub = parser._subparsers._group_actions[0].choices
    for name, p in sub.items():
        listed = {o for a in p._actions if a.help != argparse.SUPPRESS for o in a.option_strings}
        assert not listed & {"--record", "--report", "--outdir"}, name
    old = {
        "reencode": ("src", "dst", "--codec", "h264", "--record", "r.json"),
        "lance-convert": ("src", "dst", "--record", "r.json"),
        "validate": ("root", "--report", "r.json"),
        "plot": ("s.csv", "--outdir", "plots"),
    }
    for name, args in old.items():
        new = [
            a.replace("--outdir", "--out-dir").replace("--record", "--out").replace("--report", "--out") for a in args
        ]
        assert vars(parser.parse_args([name, *args])) == vars(parser.parse_args([name, *new])), name


def test_delta_timestamps_are_inline_json_or_a_file_in_every_command(tmp_path):
    """bench-run and tune read --delta-timestamps alike: inline JSON or a YAML/JSON file, the same windows; a bad
    one is one clear error naming the flag."""
    from dlbench.cli.common import deltas_name, read_deltas
    from dlbench.errors import UserError

    path = tmp_path / "act.yaml"
    path.write_text("cameras: [-1.0, 0.0]\naction: [0.0, 0.1]\n")
    inline = '{"cameras": [-1.0, 0.0], "action": [0.0, 0.1]}'
    assert read_deltas(inline) == read_deltas(str(path)) == {"cameras": [-1.0, 0.0], "action": [0.0, 0.1]}
    assert (deltas_name(str(path)), deltas_name(inline)) == ("act", "window")
    for bad in ('{"cameras": [0', str(tmp_path / "missing.yaml")):
        with pytest.raises(UserError, match="--delta-timestamps"):
            read_deltas(bad)
