"""`dlbench tune`: the search's ranking and knob moves on constructed calibrations; the tune itself on a tiny real
dataset (calibrated, proven, resumed), and its edges (an unreadable dataset, a floor nothing meets)."""

import json
import subprocess
import sys

import pytest

from dlbench.model.calibration import Calibration
from dlbench.tune.search import Candidate, best_per_loader, knob_moves, meets, ranked, speed_moves, worker_options

from .helpers import cost

pytestmark = pytest.mark.unit

FLOOR = {"effective_batch": 0.5, "effective_window": 0.3, "distinct_frames": 0.9}


def cal(cores=4):
    costs = [cost(worker_ms=4.0), cost(worker_ms=1.0, loader="dlbench_stream")]
    return Calibration("d", "local", "h", cores, 100, 10_000, None, 1.0, costs=costs)


def test_ranking_puts_the_faster_loader_first_and_leaves_out_what_does_not_fit():
    c = cal()
    found = ranked(c, "single", 16, 4, 1, None)
    assert found[0].loader == "dlbench_stream" and found[0].predicted_fps >= found[-1].predicted_fps
    assert {x.loader for x in found} == {"dlbench_map", "dlbench_stream"}
    assert worker_options(4, False) == [0, 1, 2, 3, 4] and worker_options(2, True)[-1] == 4
    best = best_per_loader(found)
    assert set(best) == {"dlbench_map", "dlbench_stream"}
    small = ranked(c, "single", 16, 4, 1, memory_mb=500.0)  # 200 MB main + 150 MB a worker: at most 2 workers
    assert small and all(x.predicted_pss_mb <= 500 and x.settings["num_workers"] <= 2 for x in small)
    assert ranked(c, "single", 16, 4, 1, memory_mb=10.0) == []
    assert ranked(c, "sarm", 16, 4, 1, None) == []  # nothing calibrated in that mode


def test_a_stream_at_the_floor_tries_gop_runs_and_blocks_decoded_together_next_where_they_can_pay():
    """A stream of 2 workers that met the floor is tried a GOP at a time (the default takes runs only where its buffer
    keeps 32; a lower floor may allow them) and with 8 blocks decoded together (any workers, random order), then not
    again; AV1's GOP of 2 or map-style: no move. The queue proves the moves right after the candidate that met the
    floor."""
    from dlbench.tune.run import _prove_queue
    from dlbench.tune.search import speed_moves

    c = Candidate("dlbench_stream", {"num_workers": 2})
    # single frames: GOP runs, and more rows a block (the default's 2 holds ten batches at the floor for any content)
    assert [m.settings for m in speed_moves(c, 30)] == [
        {"num_workers": 2, "gop_run": 30}, {"num_workers": 2, "read_ahead": 8}]  # fmt: skip
    moves = speed_moves(c, 30, span=210)  # sarm: 8 frames a second apart
    assert [m.settings for m in moves] == [{"num_workers": 2, "gop_run": 30}, {"num_workers": 2, "decode_ahead": 8}]
    assert speed_moves(moves[0], 30, 210) == speed_moves(moves[1], 30, 210) == []
    one = Candidate("dlbench_stream", {"num_workers": 1})
    assert [m.settings for m in speed_moves(one, 30, 210)] == [{"num_workers": 1, "decode_ahead": 8}]
    assert speed_moves(one, 2, 210) == [] and [m.settings for m in speed_moves(c, 2)] == [
        {"num_workers": 2, "read_ahead": 8}
    ]
    assert speed_moves(speed_moves(one, 30)[0], 30) == []  # once moved, no further move
    # from remote storage the blocks decoded together share their reads too, whatever the GOP
    assert [m.settings for m in speed_moves(one, 2, 210, remote=True)] == [{"num_workers": 1, "decode_ahead": 8}]
    assert speed_moves(Candidate("dlbench_stream", {"num_workers": 1, "episode_order": "forward"}), 30, 210) == []
    assert speed_moves(Candidate("dlbench_map", {"num_workers": 2}), 30) == []
    # a decoder per pool slot over the stream's bound for them (files of thousands of episodes): no GOP runs
    from dlbench.loader.stream import FORWARD_DECODERS_MB

    heavy = FORWARD_DECODERS_MB / 30  # MB a slot: 34 slots (the default pool of 32, and 2) pass the bound
    assert [m.settings for m in speed_moves(c, 30, 210, slot_mb=heavy)] == [{"num_workers": 2, "decode_ahead": 8}]
    assert [m.settings for m in speed_moves(c, 30, 210, slot_mb=heavy / 2)][0] == {"num_workers": 2, "gop_run": 30}
    ok = {"status": "ok", "frames_wrong": 0, "shuffle_effective_batch": 0.9, "shuffle_effective_window": 0.7,
          "shuffle_distinct_frames": 1.0, "peak_pss_mb": 900.0}  # fmt: skip

    class State:
        def note(self, text):
            pass

    queue = [c, Candidate("dlbench_map", {"num_workers": 2})]
    proven = _prove_queue(State(), queue, lambda x: ok, FLOOR, None, 16, float("inf"), gop=30, span=210)
    assert [p.key for p in proven] == [
        "dlbench_stream num_workers=2",
        "dlbench_stream gop_run=30 num_workers=2",
        "dlbench_stream decode_ahead=8 num_workers=2",
        "dlbench_map num_workers=2",
    ]
    # the answer's code carries every knob tune moved, so that it measures what tune measured
    from dlbench.tune.run import _winner

    moved = Candidate("dlbench_stream", {"num_workers": 2, "gop_run": 30, "pool_size": 64, "buffer_size": 2048})
    moved.measured = ok
    constraints = {"delta_timestamps": None, "mode": "single", "batch_size": 16}
    code = _winner(moved, constraints, "/data/v30", predicted=False)["code"]
    assert all(k in code for k in ("gop_run=30", "pool_size=64", "buffer_size=2048", "num_workers=2"))


def test_a_stream_below_the_floor_moves_its_knobs_and_a_proof_qualifies_only_whole():
    low = {"shuffle_distinct_frames": 0.6, "shuffle_effective_batch": 0.6, "shuffle_effective_window": 0.2}
    # the default pool has every piece live: what bounds the live episodes is the blocks of buffer_mb
    default = knob_moves(Candidate("dlbench_stream", {"num_workers": 2}), low, FLOOR, episodes_per_worker=1000)
    assert [m.settings for m in default] == [{"num_workers": 2, "read_ahead": 1}, {"num_workers": 2, "buffer_mb": 1024}]
    c = Candidate("dlbench_stream", {"num_workers": 2, "pool_size": 32})
    shared = knob_moves(c, low, FLOOR, episodes_per_worker=1000)
    # the pool grown in one move to what the design effect says clears the floor by 0.1: excess 4 -> 1.5, x 2.67
    assert [m.settings for m in shared] == [
        {"num_workers": 2, "pool_size": 32, "read_ahead": 1},
        {"num_workers": 2, "pool_size": 86, "buffer_size": 2752},
    ]
    capped = knob_moves(c, {"shuffle_effective_window": 0.2}, FLOOR, episodes_per_worker=50)
    assert [m.settings for m in capped] == [{"num_workers": 2, "pool_size": 50, "buffer_size": 1600}]  # every piece
    # a figure not shown (too short a proof) says nothing of which knob to move
    assert knob_moves(c, {"shuffle_effective_batch": 0.9}, FLOOR, episodes_per_worker=50) == []
    assert knob_moves(c, {"shuffle_distinct_frames": 1.0}, FLOOR, episodes_per_worker=8) == []
    # over the budget at the floor: a bigger pool would add memory, so no move
    above = {"shuffle_effective_batch": 0.9, "shuffle_effective_window": 0.7, "peak_pss_mb": 9e3}
    assert knob_moves(c, above, FLOOR, episodes_per_worker=50) == []
    assert knob_moves(Candidate("dlbench_map", {"num_workers": 2}), {}, FLOOR, 50) == []
    ok = {"status": "ok", "frames_wrong": 0, "shuffle_effective_batch": 0.9, "shuffle_effective_window": 0.7,
          "shuffle_distinct_frames": 1.0, "peak_pss_mb": 900.0}  # fmt: skip
    assert meets(ok, FLOOR, None) == ""
    assert meets({**ok, "shuffle_effective_batch": 0.2}, FLOOR, None) == "below the floor: effective batch 0.20 < 0.5"
    assert meets(ok, FLOOR, 500.0) == "peak memory 900 MB > 500 MB"
    assert meets({**ok, "frames_wrong": 3}, FLOOR, None) == "3 wrong frames"
    assert meets({"status": "failed", "reason": "boom"}, FLOOR, None) == "boom"
    # too short to tell is not a pass
    too_short = meets({**ok, "shuffle_effective_window": float("nan")}, FLOOR, None)
    assert too_short == "below the floor: effective window not shown (too few batches)"
    assert meets({**ok, "shuffle_effective_window": 0.297}, {**FLOOR, "effective_window": 0.3}, None).endswith(
        "effective window 0.297 < 0.3"
    )  # never "0.30 < 0.3"


def tune(*args, timeout=600):
    return subprocess.run(
        [sys.executable, "-m", "dlbench", "tune", *args], capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.slow
def test_a_pool_grown_to_the_floor_is_where_the_next_stream_starts():
    """Many episodes: the first stream grows its pool in one move, the next starts at that pool (one proof each, not a
    doubling per proof); with the default pool (every piece live) the move is one of buffer_mb, made once."""
    from dlbench.tune.run import _prove_queue

    def prove(c):
        wide = c.settings.get("pool_size", 32) >= 80 or c.settings.get("buffer_mb", 0) >= 1024
        return {"status": "ok", "frames_wrong": 0, "shuffle_effective_batch": 0.9, "peak_pss_mb": 900.0,
                "shuffle_effective_window": 0.5 if wide else 0.2, "shuffle_distinct_frames": 1.0}  # fmt: skip

    class State:
        def note(self, text):
            pass

    queue = [Candidate("dlbench_stream", {"num_workers": 1}), Candidate("dlbench_stream", {"num_workers": 2})]
    proven = _prove_queue(State(), queue, prove, FLOOR, None, 5000, float("inf"))
    assert [p.key for p in proven] == [
        "dlbench_stream num_workers=1",
        "dlbench_stream buffer_mb=1024 num_workers=1",
        "dlbench_stream buffer_mb=1024 num_workers=1 read_ahead=8",
        "dlbench_stream buffer_mb=1024 num_workers=2",
        "dlbench_stream buffer_mb=1024 num_workers=2 read_ahead=8",
    ]
    stuck = lambda c: {**prove(c), "shuffle_effective_window": 0.2}  # noqa: E731
    never = _prove_queue(State(), [Candidate("dlbench_stream", {"num_workers": 1})], stuck, FLOOR, None, 5000, 1e9)
    assert len(never) == 2  # a buffer that did not help is not doubled again
    # an explicit pool grows in one move, and the next stream at its default starts there
    queue = [
        Candidate("dlbench_stream", {"num_workers": 1, "pool_size": 32}),
        Candidate("dlbench_stream", {"num_workers": 2}),
    ]
    proven = _prove_queue(State(), queue, prove, FLOOR, None, 5000, float("inf"))
    assert [p.key for p in proven] == [
        "dlbench_stream num_workers=1 pool_size=32",
        "dlbench_stream buffer_size=2752 num_workers=1 pool_size=86",
        "dlbench_stream buffer_size=2752 num_workers=1 pool_size=86 read_ahead=8",  # its speed move, once it meets
        "dlbench_stream buffer_size=2752 num_workers=2 pool_size=86",
        "dlbench_stream buffer_size=2752 num_workers=2 pool_size=86 read_ahead=8",
    ]
    assert all(not meets(p.measured, FLOOR, None) for p in proven[1:])


def test_no_proof_is_started_that_would_end_past_the_time_budget():
    """Proofs of 0.2 s and 0.3 s left: the second would end past the budget, so the answer comes after the first."""
    import time

    from dlbench.tune.run import _prove_queue

    notes = []

    class State:
        def note(self, text):
            notes.append(text)

    def prove(c):
        time.sleep(0.2)
        return {"status": "ok", "frames_wrong": 0}

    queue = [Candidate("dlbench_map", {"num_workers": w}) for w in (1, 2, 3)]
    proven = _prove_queue(State(), queue, prove, {}, None, 16, time.perf_counter() + 0.3)
    assert [p.key for p in proven] == ["dlbench_map num_workers=1"]
    assert "num_workers=2 and 1 more not proven" in notes[0]
    # a proof of 0.1 s then one of 0.5 s: the next may be as long as the longest, so none starts at 0.6 of 1.0 (a
    # mean's 0.3 would have started one that ended past the budget)
    took = iter([0.1, 0.5, 0.5])

    def uneven(c):
        time.sleep(next(took))
        return {"status": "ok", "frames_wrong": 0}

    queue = [Candidate("dlbench_map", {"num_workers": w}) for w in (1, 2, 3)]
    proven = _prove_queue(State(), queue, uneven, {}, None, 16, time.perf_counter() + 1.0)
    assert len(proven) == 2 and "num_workers=3 and 0 more not proven" in notes[-1]


@pytest.mark.slow  # a whole tune, about 2 minutes: scheduled with the end-to-end runs, not last
def test_tune_proves_its_answer_resumes_and_says_what_it_cannot_meet(v30_h264, tmp_path):
    out = tmp_path / "tune" / "h264"
    # a budget about what the calibration takes here: tune still proves its best-predicted candidate before it answers
    first = tune(str(v30_h264), "--out", str(out), "--no-lerobot", "--time-budget-s", "20")
    assert first.returncode == 0, first.stderr[-2000:]
    result = json.loads(out.with_suffix(".json").read_text())
    w = result["winner"]
    assert not w["predicted"] and w["frames_per_s_node"] > 0 and w["frames_wrong"] == 0 and w["frames_verified"] > 0
    assert w["shuffle_effective_batch"] >= FLOOR["effective_batch"] and w["loader"] in ("dlbench_map", "dlbench_stream")
    assert any(p["qualifies"] for p in result["proofs"]) and set(result["phases"]) >= {"calibrate_s", "prove_s"}
    # the code to paste builds the winner: run it
    code = w["code"] + "batch = next(iter(loader))\nassert len(batch['index']) == 16\n"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=300).returncode == 0
    md = out.with_suffix(".md").read_text()
    assert "## Answer" in md and "```python" in md and out.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"
    # again: the calibration and the proofs are reused, not measured anew
    assert "reencode" in result and "Re-encoding" in md  # the probe's lever, beside the answer (test_probe's)
    again = tune(str(v30_h264), "--out", str(out), "--no-lerobot", "--time-budget-s", "1", "--no-reencode")
    assert again.returncode == 0 and "resumed" in again.stdout
    assert json.loads(out.with_suffix(".json").read_text())["phases"]["calibrate_s"] < 5
    # the workflow's calibration of the dataset, given: only the loaders it lacks are calibrated
    given = json.loads((out.with_suffix(".work") / "calibration.json").read_text())
    assert all(c["repeat_diff"] is None for c in given["costs"])  # each pass once: the proofs measure the answer
    given["costs"] = [c for c in given["costs"] if c["loader"] != "dlbench_stream"]
    (tmp_path / "given.json").write_text(json.dumps(given))
    other = tmp_path / "tune" / "given"
    reused = tune(str(v30_h264), "--out", str(other), "--no-lerobot", "--time-budget-s", "1", "--no-reencode",
                  "--calibration", str(tmp_path / "given.json"))  # fmt: skip
    assert reused.returncode == 0, reused.stderr[-2000:]
    assert "calibration of dlbench_map from" in reused.stdout and "dlbench_stream calibrated here" in reused.stdout
    merged = json.loads((other.with_suffix(".work") / "calibration.json").read_text())
    assert sorted(c["loader"] for c in merged["costs"]) == ["dlbench_map", "dlbench_stream"]
    # a budget no configuration meets: one line naming the nearest
    never = tune(str(v30_h264), "--out", str(out), "--no-lerobot", "--memory-gb", "0.01")
    assert never.returncode == 2 and "no configuration fits within 0.01 GB on this node" in never.stderr
    assert "the nearest is" in never.stderr and len(never.stderr.strip().splitlines()) == 1
    # another node: predicted, marked so, with the command that proves it there
    there = tune(str(v30_h264), "--out", str(out), "--no-lerobot", "--cores", "32")
    assert there.returncode == 0, there.stderr[-2000:]
    far = json.loads(out.with_suffix(".json").read_text())
    assert far["winner"]["predicted"] and far["proofs"] == [] and "dlbench tune" in far["prove_there"]


def test_tune_of_an_unreadable_dataset_or_a_bad_constraint_is_one_line(tmp_path):
    (tmp_path / "meta").mkdir()
    (tmp_path / "meta" / "info.json").write_text("{not json")
    for args in ([str(tmp_path / "nowhere")], [str(tmp_path)], [str(tmp_path), "--floor-effective-batch", "2"],
                 [str(tmp_path), "--batch-size", "0"], [str(tmp_path), "--step-ms", "0"],
                 [str(tmp_path), "--step-sd-ms", "10"], [str(tmp_path), "--step-ms", "80", "--step-sd-ms", "-1"],
                 [str(tmp_path), "--gpus", "0"],
                 [str(tmp_path), "--config-path", str(tmp_path / "missing.json")], ["--policy", "act"]):  # fmt: skip
        proc = tune(*args, "--out", str(tmp_path / "t"))
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith("dlbench tune: error:")


def test_lerobots_loaders_are_tuned_only_on_sources_they_read():
    """LeRobot 0.6.1 reads local datasets and Hub repos (its stream also storage buckets), not S3: a tune of an S3
    dataset calibrates and searches dlbench's loaders only, instead of failing on LeRobot's."""
    from dlbench.peer import peer_python
    from dlbench.run.spec import lerobot_reads
    from dlbench.tune.run import _tuned_loaders

    assert lerobot_reads("lerobot_map", "/data/v30") and lerobot_reads("lerobot_map", "hf://datasets/o/n@v3.0")
    assert lerobot_reads("lerobot_stream", "hf://buckets/o/b/n") and not lerobot_reads(
        "lerobot_map", "hf://buckets/o/b"
    )
    assert not lerobot_reads("lerobot_stream", "s3://bucket/n") and not lerobot_reads("lerobot_map", "s3://bucket/n")
    assert _tuned_loaders(True, "s3://bucket/n") == ["dlbench_map", "dlbench_stream"]
    theirs = ["lerobot_map", "lerobot_stream"] if peer_python() else []
    assert _tuned_loaders(True, "/data/v30") == ["dlbench_map", "dlbench_stream", *theirs]
    assert _tuned_loaders(False, "/data/v30") == ["dlbench_map", "dlbench_stream"]


def test_stored_proofs_are_kept_only_for_the_same_dataset_content_and_code(tmp_path, monkeypatch):
    """An interrupted tune's proofs are reused by the next tune of the same dataset, content and code; a dataset
    rewritten at the same path (another info.json) or another version of the code sets them aside."""
    from dlbench.tune import run

    def state(content):
        return run._State(tmp_path / "work", "d", "/data/d", {"mode": "single", "batch_size": 16}, content)

    first = state("aaaa")
    first.proof(Candidate("dlbench_map", {"num_workers": 1}), lambda: {"frames_per_s_node": 100.0})
    assert state("aaaa").data["proofs"]  # the same: resumed
    assert not state("bbbb").data["proofs"]  # another content: measured anew
    state("aaaa").proof(Candidate("dlbench_map", {"num_workers": 1}), lambda: {"frames_per_s_node": 100.0})
    monkeypatch.setattr(run, "code_digest", lambda: "another")
    assert not state("aaaa").data["proofs"]  # another code: measured anew


def test_lerobot_trains_loop_is_kept_with_the_proofs_and_a_loop_that_did_not_run_is_not(tmp_path):
    """A resumed tune reads the loop an earlier one ran for the same swap, flags and step instead of running it
    again; a loop that did not run (its reason) is tried again next time."""
    from dlbench.tune import run

    def state():
        return run._State(tmp_path / "work", "d", "/data/d", {"mode": "single", "batch_size": 16}, "aaaa")

    runs = []

    def loop(result):
        def go():
            runs.append(result)
            return result

        return go

    assert state().loop("k", loop("no peer environment")) == "no peer environment"
    assert not state().has_loop("k")  # a reason is not kept
    assert state().loop("k", loop({"au": 0.8, "steps": 60})) == {"au": 0.8, "steps": 60}
    resumed = state()
    assert resumed.has_loop("k") and not resumed.has_loop("other")
    assert resumed.loop("k", loop({"au": 0.1})) == {"au": 0.8, "steps": 60}
    assert len(runs) == 2 and "lerobot-train's loop of an earlier tune reused" in resumed.notes


def test_a_proof_over_the_memory_budget_alone_is_followed_by_a_smaller_configuration():
    """A stream of 2 workers that meets the floor in 856 MB against a 700 MB budget: a worker fewer and half its
    buffer are proven next, and the smaller that fits qualifies; a map loader of one worker has no smaller move."""
    import time

    from dlbench.tune.run import _prove_queue
    from dlbench.tune.search import memory_moves

    class State:
        def note(self, text):
            pass

    ok = {"status": "ok", "frames_wrong": 0, "shuffle_effective_batch": 0.9, "shuffle_effective_window": 0.7,
          "shuffle_distinct_frames": 1.0}  # fmt: skip

    def prove(c):
        mb = 300 * c.settings["num_workers"] + c.settings.get("buffer_mb", 512) / 2
        return {**ok, "peak_pss_mb": mb, "frames_per_s_node": 100.0 * c.settings["num_workers"]}

    queue = [Candidate("dlbench_stream", {"num_workers": 2})]
    proven = _prove_queue(State(), queue, prove, FLOOR, 700.0, 16, time.perf_counter() + 60)
    keys = [p.key for p in proven]
    assert keys[:2] == ["dlbench_stream num_workers=2", "dlbench_stream num_workers=1"]
    assert "dlbench_stream buffer_mb=256.0 num_workers=2" in keys  # 728 MB: still over, its own moves next
    assert not meets(proven[1].measured, FLOOR, 700.0)  # 556 MB: the smaller one qualifies
    assert [m.settings for m in memory_moves(Candidate("dlbench_map", {"num_workers": 1}))] == []
    assert len(keys) == len(set(keys))


def test_a_move_carries_its_own_prediction_or_none_not_its_parents():
    """The model predicts (loader, workers): a worker fewer gets the model's figure for it; a knob the model has
    no term for (a buffer, GOP runs, rows a block) gets none, not the parent's, and the answer says so."""
    from dlbench.tune.run import _predicted
    from dlbench.tune.search import memory_moves, predictions

    parent = Candidate("dlbench_stream", {"num_workers": 2}, 900.0, 800.0, "cores")
    fewer_ranked = Candidate("dlbench_stream", {"num_workers": 1}, 500.0, 400.0, "decode")
    fewer, half = memory_moves(parent)
    got = predictions(fewer, [parent, fewer_ranked])
    assert (got.predicted_fps, got.predicted_pss_mb, got.bound) == (500.0, 400.0, "decode")
    moved = [predictions(m, [parent, fewer_ranked]) for m in [half, *speed_moves(parent, 30)]]
    assert moved and all(m.predicted_fps == 0 and m.bound == "" for m in moved)
    w = {"predicted_frames_per_s_node": 0.0, "settings": {"num_workers": 2, "gop_run": 30}}
    assert _predicted(w) == "not predicted: the model has no term for gop_run"
