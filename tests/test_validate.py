"""`dlbench validate` against the defects of `benchmarks.defects`, made one at a time in copies of valid datasets
(dlbench's own, several files per stream, and one written by LeRobot 0.6.1's recorder): each is one line naming
its file or episode, never a traceback. Also: inputs that are no dataset at all, remote datasets (an fsspec
filesystem that lists, and plain HTTP, which cannot), the converter refusing a damaged v2.1 source, and
lerobot-lance-doctor beside it (in the LeRobot peer environment)."""

from __future__ import annotations

import http.server
import io
import os
import shutil

import pytest

from benchmarks.defects import DEFECTS, make
from benchmarks.doctor import run_doctors
from dlbench import peer
from dlbench.cli import main
from dlbench.convert import plan as planmod
from dlbench.errors import UserError
from dlbench.format import paths
from dlbench.validate import validate

from .helpers import plain_http_server

pytestmark = pytest.mark.unit

VALID = ["v30_h264", "v30_h264_one_file", "lerobot_recorded_v30"]
DEFECT_DATASETS = ["v30_h264", "lerobot_recorded_v30"]  # several files per stream; LeRobot's own layout and AV1


def run_validate(root, capsys) -> tuple[int, list[str]]:
    """`dlbench validate -q ROOT` in this process: (exit code, the lines it wrote to stderr)."""
    code = main(["validate", "-q", str(root)])
    return code, capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize("fixture", VALID)
def test_valid_datasets_stay_valid(fixture, request):
    report = validate(str(request.getfixturevalue(fixture)))
    assert report["ok"] and report["orphans_checked"] and not report["notes"]
    assert report["frames_wrong"] == 0 and report["frames_decoded"] > 0


@pytest.mark.parametrize("fixture", DEFECT_DATASETS)
@pytest.mark.parametrize("defect", DEFECTS, ids=[d.name for d in DEFECTS])
def test_each_defect_is_one_line_naming_its_file_or_episode(defect, fixture, request, tmp_path, capsys):
    name = make(defect, request.getfixturevalue(fixture), tmp_path / "copy")
    code, err = run_validate(tmp_path / "copy", capsys)
    assert code == 2, err
    if defect.fatal:  # the dataset cannot be opened: one error line
        assert len(err) == 1 and err[0].startswith("dlbench validate: error: ") and name in err[0], err
    else:
        assert err[0].endswith(": 1 problem(s) found:") and len(err) == 2, err
        assert name in err[1] and ": " in err[1], err


@pytest.mark.parametrize(
    "case, expected",
    [
        ("missing", "no such directory"),
        ("empty", "meta/info.json: file not found"),
        ("v21", "codebase_version is 'v2.1', expected 'v3.0'; convert it first"),
        ("not_json_object", "meta/info.json: "),
        ("no_episodes", "meta/episodes: no episode metadata files"),
    ],
)
def test_what_is_no_dataset_is_one_error_line(case, expected, v21_h264, v30_h264, tmp_path, capsys):
    root = tmp_path / "d"
    if case == "empty":
        root.mkdir()
    elif case == "v21":
        root = v21_h264
    elif case in ("not_json_object", "no_episodes"):
        shutil.copytree(v30_h264, root)
        if case == "not_json_object":
            (root / paths.INFO_PATH).write_text("[]")
        else:
            shutil.rmtree(root / "meta" / "episodes")
    code, err = run_validate(root, capsys)
    assert code == 2 and len(err) == 1 and expected in err[0], err


def test_a_dataset_on_a_listing_filesystem_is_checked_whole(v30_h264):
    """An fsspec URL (here memory://, read as any remote filesystem is) gets the same checks, orphans included."""
    import fsspec

    fs = fsspec.filesystem("memory")
    fs.put(str(v30_h264), "/valid", recursive=True)
    assert validate("memory://valid")["ok"]
    fs.rm("/valid/" + paths.v30_video_path("observation.images.front", 0, 1))
    fs.pipe("/valid/data/chunk-000/file-999.parquet", b"PAR1")
    with pytest.raises(UserError) as e:
        validate("memory://valid")
    lines = str(e.value).splitlines()[1:]
    assert len(lines) == 2 and "file-001.mp4: missing" in lines[1] and "file-999.parquet: under data/" in lines[0]


class RangeHandler(http.server.SimpleHTTPRequestHandler):
    """Python's HTTP file server, answering Range requests (as S3, the Hub and nginx do)."""

    def send_head(self):
        ranged = self.headers.get("Range", "").removeprefix("bytes=")
        path = self.translate_path(self.path)
        if not ranged or not os.path.isfile(path):
            return super().send_head()
        size = os.path.getsize(path)
        start, _, end = ranged.partition("-")
        start, end = int(start), min(int(end or size - 1), size - 1)
        with open(path, "rb") as f:
            f.seek(start)
            body = f.read(end - start + 1)
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        return io.BytesIO(body)

    def log_message(self, *args):
        pass


def test_plain_http_cannot_list_so_orphans_are_skipped_with_a_note(v30_h264, tmp_path):
    root = tmp_path / "d"
    shutil.copytree(v30_h264, root)
    shutil.copy(root / "data/chunk-000/file-000.parquet", root / "data/chunk-000/file-999.parquet")  # not seen
    with plain_http_server(tmp_path, RangeHandler) as url:
        report = validate(f"{url}/d")
        assert report["ok"] and not report["orphans_checked"] and "cannot list" in report["notes"][0]
        (root / paths.v30_video_path("observation.images.wrist", 0, 2)).unlink()
        with pytest.raises(UserError, match=r"1 problem\(s\) found:\n  videos/.*/file-002.mp4: missing"):
            validate(f"{url}/d")


def test_plan_refuses_a_damaged_v21_source_before_writing_anything(v21_h264, tmp_path):
    src = tmp_path / "src"
    shutil.copytree(v21_h264, src)
    wrist, front = "observation.images.wrist", "observation.images.front"
    (src / paths.v21_video_path(3, wrist, 1000)).unlink()
    cut = src / paths.v21_video_path(5, front, 1000)
    cut.write_bytes(cut.read_bytes()[:-200])
    import pyarrow.parquet as pq

    short = src / paths.v21_data_path(1, 1000)
    pq.write_table(pq.read_table(short).slice(1), short)
    shutil.copy(src / paths.v21_video_path(0, front, 1000), src / "videos/chunk-000" / front / "episode_000099.mp4")
    work = tmp_path / "work"
    with pytest.raises(UserError) as e:
        planmod.plan(str(src), work)
    lines = str(e.value).splitlines()
    assert "4 problem(s); nothing was written" in lines[0] and len(lines) == 5, lines
    for expected in ("episode_000003.mp4: missing", "episode_000005.mp4: cut short", "episode_000001.parquet: ",
                     "episode_000099.mp4: no episode"):  # fmt: skip
        assert sum(expected in line for line in lines[1:]) == 1, (expected, lines)
    assert not work.exists()


@pytest.mark.slow
def test_validate_catches_every_defect_lerobot_lance_doctor_catches(lerobot_recorded_v30, tmp_path, capsys):
    """The doctor passes the clean recording; on every defect it fails, `dlbench validate` fails too."""
    py = peer.peer_python()
    if py is None or not (py.parent / "lerobot-lance-doctor").exists():
        pytest.skip(f"lerobot-lance-doctor missing: create the LeRobot peer environment with {peer.CREATE_COMMAND}")
    copies = {defect.name: tmp_path / defect.name for defect in DEFECTS}
    for defect in DEFECTS:
        make(defect, lerobot_recorded_v30, copies[defect.name])
    verdicts = run_doctors([lerobot_recorded_v30, *copies.values()])
    assert verdicts[lerobot_recorded_v30] == ("missed", ""), verdicts[lerobot_recorded_v30]
    caught = [name for name, copy in copies.items() if verdicts[copy][0] != "missed"]
    assert caught, "the doctor caught none of the defects: it did not run as it should"
    for name in caught:
        assert run_validate(copies[name], capsys)[0] == 2, name
