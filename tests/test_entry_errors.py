"""No traceback for a user's mistake at any entry point: every `dlbench` command that takes a dataset, and the
loader constructors, given a missing path, an empty directory, a file, a dataset of the other version or a damaged
metadata file, stop with one line naming the path (the CLI exits non-zero; the library raises `UserError`)."""

import shutil
from pathlib import Path

import pytest

from dlbench.cli import main
from dlbench.convert.run import run as convert_run
from dlbench.errors import UserError
from dlbench.synth import Camera, synthesize

from .helpers import tiny_config

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def datasets(tmp_path_factory) -> dict[str, Path]:
    """The smallest v2.1 dataset (one episode, one 32x32 camera) and its v3.0 form."""
    base = tmp_path_factory.mktemp("entry")
    cfg = tiny_config(episodes=1, length_min=4, length_max=4, cameras=(Camera("observation.images.front", 32, 32),))
    v21 = synthesize(cfg, base / "v21", workers=1, progress=False)
    return {"v2.1": v21, "v3.0": convert_run(str(v21), base / "v30", workers=1, progress=False)}


def _damaged(datasets, tmp_path, version: str, relpath: str, content: bytes | None) -> Path:
    """A copy of the `version` dataset with `relpath` replaced by `content` (None: cut to half its size)."""
    root = tmp_path / "damaged"
    shutil.copytree(datasets[version], root)
    path = root / relpath
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2] if content is None else content)
    return root


def bad_roots(datasets, tmp_path, due: str) -> dict[str, Path]:
    """Each mistake, as a dataset root given where a `due` (v2.1 or v3.0) dataset is expected."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "a_file").write_text("not a dataset")
    other = "v2.1" if due == "v3.0" else "v3.0"
    cases = {
        "missing": tmp_path / "no_such_dataset",
        "empty directory": tmp_path / "empty",
        "a file": tmp_path / "a_file",
        f"{other} where {due} is due": datasets[other],
    }
    for name, content in [
        ("info.json not JSON", b"{codebase_version: v3"),
        ("info.json binary", b"\xff\xfe\x00\x81garbage"),
        ("info.json a list", b"[1, 2]"),
        ("info.json incomplete", f'{{"codebase_version": "{due}"}}'.encode()),
    ]:
        cases[name] = _damaged(datasets, tmp_path / name.replace(" ", "_"), due, "meta/info.json", content)
    return cases


V30_FILES = {  # damaged v3.0 files the loaders read when they open a dataset
    "tasks.parquet truncated": "meta/tasks.parquet",
    "episodes parquet truncated": "meta/episodes/chunk-000/file-000.parquet",
}


def _cases(datasets, tmp_path, due: str, damaged_files: dict[str, str] | None = None):
    cases = bad_roots(datasets, tmp_path, due)
    for name, rel in (damaged_files or {}).items():
        cases[name] = _damaged(datasets, tmp_path / name.replace(" ", "_"), due, rel, None)
    return cases


def check_cli(argv: list[str], root: Path, capsys) -> None:
    """`dlbench ARGV` exits non-zero with one line on stderr naming `root`, and no traceback."""
    code = main(argv)
    out, err = capsys.readouterr()
    assert code != 0, f"dlbench {' '.join(argv)} passed"
    assert len(err.strip().splitlines()) == 1 and err.startswith(f"dlbench {argv[0]}: error: "), err
    assert str(root) in err and "Traceback" not in out + err, err


COMMANDS_ON_V30 = {
    "validate": lambda root, tmp: ["validate", str(root)],
    "bench-run": lambda root, tmp: [
        "bench-run",
        *("--root", str(root), "--out-dir", str(tmp / "run")),
        *("--duration-s", "0.5", "--warmup-s", "0", "--repeats", "1", "--num-workers", "0"),
    ],
    "stage": lambda root, tmp: ["stage", str(root), "s3://nowhere/dataset", "--marker", str(tmp / "staged.json")],
}


@pytest.mark.parametrize("command", sorted(COMMANDS_ON_V30))
def test_commands_reading_a_v30_dataset(datasets, tmp_path, capsys, command):
    # validate's own checks of a dataset's files are another test's; here only what stops it at the door
    files = {} if command == "validate" else V30_FILES
    for name, root in _cases(datasets, tmp_path, "v3.0", files).items():
        argv = COMMANDS_ON_V30[command](root, tmp_path / name.replace(" ", "_"))
        check_cli(argv, root, capsys)
    assert not list(tmp_path.rglob("staged.json"))


@pytest.mark.parametrize("step", ["plan", "run"])
def test_convert_reading_a_v21_dataset(datasets, tmp_path, capsys, step):
    files = {"episodes.jsonl not JSON": "meta/episodes.jsonl"}
    for name, root in _cases(datasets, tmp_path, "v2.1", files).items():
        check_cli(["convert", step, str(root), str(tmp_path / "out" / name.replace(" ", "_"))], root, capsys)


def test_prewarm_check_of_a_missing_path(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    for root in (tmp_path / "no_such_dataset", tmp_path / "empty"):
        check_cli(["prewarm-check", str(root), "--out", str(tmp_path / "report.json")], root, capsys)


def test_synth_to_a_place_it_cannot_write(tmp_path, capsys):
    (tmp_path / "a_file").write_text("in the way")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep").write_text("precious")
    outs = [tmp_path / "a_file" / "dataset", tmp_path / "full"]
    if Path("/proc").is_dir():
        outs.append(Path("/proc/dlbench-test/dataset"))  # a place no one can create directories in
    for out in outs:
        check_cli(["synth", str(out), "--episodes", "1", "--length-min", "3", "--length-max", "3"], out, capsys)
    assert (tmp_path / "full" / "keep").read_text() == "precious"


@pytest.mark.parametrize("loader", ["LeRobotMapDataset", "LeRobotStreamingDataset"])
def test_loader_constructors(datasets, tmp_path, loader):
    import dlbench.loader

    cls = getattr(dlbench.loader, loader)
    for name, root in _cases(datasets, tmp_path, "v3.0", V30_FILES).items():
        with pytest.raises(UserError) as e:
            cls(str(root))
        assert "\n" not in str(e.value) and str(root) in str(e.value), (name, str(e.value))


def test_options_out_of_range(datasets, tmp_path, capsys):
    """Values the tools below would crash on (numpy's seeds, the encoder's crf, an empty sample) are refused."""
    synth = ["synth", str(tmp_path / "d"), "--episodes", "1", "--length-min", "3", "--length-max", "3"]
    for argv, named in [
        ([*synth, "--seed", "-1"], "seed must be >= 0"),
        ([*synth, "--crf", "-5"], "crf >= 0"),
        (["prewarm-check", str(datasets["v3.0"]), "--out", str(tmp_path / "r.json"), "--files", "0"], "files (0)"),
    ]:
        assert main(argv) == 2
        out, err = capsys.readouterr()
        assert len(err.strip().splitlines()) == 1 and named in err and "Traceback" not in out + err, err
    assert not (tmp_path / "d").exists() and not (tmp_path / "r.json").exists()
