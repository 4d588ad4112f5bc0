"""dlbench advise: the bound, the changes that lift it (never more workers than cores), a run at its bound left
alone, a measured re-encoded variant prescribed with its cost."""

import json
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlbench.advice.prescribe import advise, cores_rate, prescribe, spent_rate
from dlbench.model import Calibration
from dlbench.model.table import predict_run

from .helpers import cost

pytestmark = pytest.mark.unit


def cal(cores: int, **kw) -> Calibration:
    costs = [cost(worker_ms=4.0, handover_ms=0.05, check_ms=0.1), cost(worker_ms=1.0, loader="dlbench_stream")]
    return Calibration("d", "local", "h", cores, 100, 1, None, 1.0, costs=costs, **kw)


def row(workers, measured=None, c=None, **kw) -> dict:
    run = {"scenario": "s", "run_id": f"d-dlbench_map-single-w{workers}", "dataset": "d", "source": "local",
           "loader": "dlbench_map", "mode": "single", "batch_size": 16, "num_workers": workers,
           "decode_device": "cpu", "step_ms": 0, "ranks": 1, "nodes": 1, "status": "ok"}  # fmt: skip
    if measured is None:  # as the model predicts it
        measured = predict_run({**run, "verify": True, "fetch_episodes": 0}, c).frames_per_s_node
    return {**run, "frames_per_s_node": measured, **kw}


@settings(max_examples=60, deadline=None)
@given(cores=st.integers(1, 96), workers=st.integers(0, 8))
def test_the_worker_count_prescribed_never_passes_the_cores(cores, workers):
    c = cal(cores)
    for p in prescribe(row(workers, c=c), c):
        if "num_workers" in p.change:
            assert p.change["num_workers"] <= cores and p.gain >= 1.1


def test_too_few_workers_get_more_and_a_run_at_its_bound_gets_nothing():
    c = cal(8)
    top = prescribe(row(1, c=c), c)[0]
    assert top.change == {"num_workers": 8} and top.gain == pytest.approx(8, rel=0.1) and not top.measured
    at_bound = row(8, measured=0.95 * cores_rate(row(8, c=c), c), c=c)
    text = advise(pd.DataFrame([at_bound]), {("d", "local"): c})
    assert "At its bound" in text and "Nothing to prescribe" in text and "1. `" not in text


def test_a_measured_reencoded_variant_is_prescribed_with_its_cost():
    c = cal(2)
    slow = row(2, c=c)
    fast = {**row(2, c=c), "dataset": "d_g1", "run_id": "d_g1-dlbench_map-single-w2",
            "frames_per_s_node": 3 * slow["frames_per_s_node"]}  # fmt: skip
    encodings = pd.DataFrame(
        [
            {"dataset": "d", "root": "/data/d", "reference": None, "bytes_vs_source": None, "psnr_db": None},
            {"dataset": "d_g1", "root": "/r/d_g1", "reference": "/data/d", "bytes_vs_source": 1.2, "psnr_db": 36.0},
        ]
    )
    text = advise(pd.DataFrame([slow, fast]), {("d", "local"): c}, encodings)
    section = text.split("## s / d-dlbench_map-single-w2")[1].split("##")[0]
    assert "`dataset: d_g1`" in section and "measured, 3.00x" in section and "1.20x the bytes at 36.0 dB" in section


@settings(max_examples=100, deadline=None)
@given(
    workers=st.integers(0, 16),
    rate=st.floats(10, 1e5),
    item=st.floats(0, 50),
    decode=st.floats(0, 50),
    fetch=st.floats(0, 50),
)
def test_the_time_split_adds_up_to_a_workers_time_and_no_part_is_negative(workers, rate, item, decode, fetch):
    from dlbench.bench.metrics import time_split

    m = {"samples": rate * 10, "steady_window_s": 10.0, "worker_item_ms_per_sample": item,
         "worker_decode_ms_per_sample": decode, "worker_fetch_ms_per_sample": fetch}  # fmt: skip
    split = time_split(m, workers)
    assert all(v >= 0 for v in split.values())
    assert split["split_fetch_ms"] == fetch and split["split_decode_ms"] == decode
    wall = max(workers, 1) * 1000 / rate
    assert sum(split.values()) == pytest.approx(max(wall, fetch + decode + split["split_assembly_ms"]))
    assert time_split({**m, "worker_decode_ms_per_sample": None}, workers) == dict.fromkeys(split)


FLOOR = {"effective_batch": 0.5, "effective_window": 0.3, "distinct_frames": 0.8}


def stream_row(loader, fps, effective, frames=1.0, workers=2, window=None) -> dict:
    return {"scenario": "s", "run_id": f"d-{loader}-single-w{workers}", "dataset": "d", "source": "local",
            "loader": loader, "mode": "single", "batch_size": 16, "num_workers": workers, "decode_device": "cpu",
            "step_ms": 0, "ranks": 1, "nodes": 1, "status": "ok", "frames_per_s_node": fps,
            "shuffle_effective_batch": effective, "shuffle_distinct_frames": frames,
            "shuffle_effective_window": effective if window is None else window,
            "image_shape": "3x96x128", "frames_per_sample": 1, "shuffle_floor": json.dumps(FLOOR)}  # fmt: skip


def test_a_stream_below_the_shuffle_floor_is_told_first_how_to_restore_it():
    """dlbench_stream keeping 2 of the 50 episodes a worker reads live: pool_size up, first, whatever else is
    faster; repeating frames in a batch: one row a block; LeRobot's stream: its own buffer_size, where it fits in
    memory; a stream above the floor gets neither."""
    c = cal(2)
    low = stream_row("dlbench_stream", 100.0, effective=0.1)
    found = prescribe(low, c, spec={"pool_size": 2, "buffer_size": 256})
    assert found[0].shuffle and found[0].change == {"pool_size": 4} and "effective batch 0.10 < 0.5" in found[0].why
    shared = prescribe(stream_row("dlbench_stream", 100.0, effective=0.9, frames=0.55), c, spec={"pool_size": 2})
    assert shared[0].change == {"read_ahead": 1} and "distinct frames 0.55 < 0.8" in shared[0].why
    lerobot = prescribe(stream_row("lerobot_stream", 100.0, effective=0.1), c, spec={"buffer_size": 256})
    assert lerobot[0].change == {"buffer_size": 1000} and lerobot[0].shuffle and "GB of frames" in lerobot[0].why
    # a buffer of frames larger than half this machine's memory is not prescribed
    huge = {**stream_row("lerobot_stream", 100.0, effective=0.1), "image_shape": "3x2160x3840", "frames_per_sample": 64}
    assert not any(p.shuffle for p in prescribe(huge, c, spec={"buffer_size": 1000}))
    fine = prescribe(stream_row("dlbench_stream", 100.0, effective=0.9), c, spec={"pool_size": 2})
    assert not any(p.shuffle for p in fine)
    every = prescribe(low, c, spec={"pool_size": 64})  # each worker's 50 episodes already live: nothing to raise
    assert not any(p.shuffle for p in every)
    # the default pool (unset) has every piece live: what bounds the live episodes is the blocks buffer_mb keeps
    default = prescribe(low, c, spec={})
    assert default[0].shuffle and default[0].change == {"buffer_mb": 1024.0} and "every piece is live" in default[0].why
    text = advise(pd.DataFrame([low]), {("d", "local"): c}, specs={("s", low["run_id"]): {"pool_size": 2}})
    assert "below it (effective batch 0.10 < 0.5, effective window 0.10 < 0.3), so the run does not pass" in text
    assert "`pool_size: 4`" in text


def test_a_faster_loader_that_shuffles_worse_is_not_prescribed_or_says_what_it_gives_up():
    c = cal(2)
    c.costs.append(cost(worker_ms=8.0, loader="lerobot_stream"))
    base = stream_row("lerobot_stream", 100.0, effective=0.9)
    unshuffled = stream_row("dlbench_stream", 900.0, effective=0.1)
    text = advise(pd.DataFrame([base, unshuffled]), {("d", "local"): c})
    section = text.split("## s / d-lerobot_stream-single-w2")[1].split("##")[0]
    assert "`loader: dlbench_stream`" not in section  # below the floor: it has not won
    worse = stream_row("dlbench_stream", 900.0, effective=0.6)
    text = advise(pd.DataFrame([base, worse]), {("d", "local"): c})
    section = text.split("## s / d-lerobot_stream-single-w2")[1].split("##")[0]
    assert "`loader: dlbench_stream`" in section and "effective batch 0.60 against 0.90, effective window" in section


def test_verify_withdraws_a_speed_gain_that_gives_up_shuffle_and_proves_a_restored_one():
    from dlbench.advice.prove import verdict

    def m(one, ten=None, frames=1.0):
        return {"shuffle_effective_batch": one, "shuffle_effective_window": one if ten is None else ten,
                "shuffle_distinct_frames": frames}  # fmt: skip

    before, after = m(0.9), m(0.4)
    assert verdict(2.0, before, after).startswith("withdrawn: gives up shuffle (effective batch 0.40 against 0.90")
    assert verdict(2.0, before, before) == "proven"
    assert verdict(0.9, after, before, restores=True, floor=FLOOR).startswith("proven: reaches the floor")
    # a gain above 0.1 that stays under the floor is no restoration
    assert verdict(0.9, m(0.1), m(0.3), restores=True, floor=FLOOR).startswith("withdrawn: still below the floor")
    assert verdict(1.0, before, before, restores=True, floor=FLOOR).startswith("withdrawn: its batches are worth no")
    nan = float("nan")  # legs too short to measure: nothing proven
    assert verdict(1.0, m(nan, nan, nan), m(nan, nan, nan), restores=True, floor=FLOOR).startswith("withdrawn")


def test_a_prescription_that_measured_worse_or_no_better_is_withdrawn():
    from dlbench.advice.prove import verdict

    assert verdict(0.8).startswith("withdrawn: measured worse")
    assert verdict(1.02).startswith("withdrawn: no gain")
    assert verdict(1.5) == "proven"


def _results_with_one_run(root, tmp_path, workers: int):
    """A results directory as the workflow leaves it: one run's spec, its run directory and summary.csv."""
    from dlbench.bench.launch import launch
    from dlbench.report.aggregate import aggregate
    from dlbench.run import spec as runspec

    results = tmp_path / "results"
    run = runspec.make_run({"root": str(root), "dataset": "h264", "num_workers": workers, "duration_s": 1.0,
                            "warmup_s": 0.3, "repeats": 1}, scenario="s")  # fmt: skip
    runspec.write(run, results / "specs" / "s" / f"{run.run_id}.json")
    launch(run, results / "runs" / "s" / run.run_id)
    summary = aggregate([results / "runs" / "s" / run.run_id], results / "summary.csv")
    return results, summary


def test_verify_runs_the_top_prescription_beside_the_run_and_the_advice_says_what_it_measured(v30_h264, tmp_path):
    from dlbench.advice.prove import verify

    results, summary = _results_with_one_run(v30_h264, tmp_path, workers=0)
    summary["worker_decode_ms_per_sample"] = 0.0  # decoding little, it is not probed for a re-encoding (test_probe)
    solo_ms = 2000 / summary.iloc[0]["frames_per_s_node"]  # 2 frames a sample: the costs of what the run measured
    c = Calibration("h264", "local", "h", 2, 6, 1, None, 1.0, costs=[cost(worker_ms=(solo_ms - 0.02) / 0.8)])
    table = verify(results, summary, {("h264", "local"): c}, None, legs=2, duration_s=1.0, warmup_s=0.3)
    assert len(table) == 1
    v = table.iloc[0]
    assert v["change"] == "num_workers: 2" and v["predicted_gain"] >= 1.1
    assert len(json.loads(v["before_windows"])) == 2 and len(json.loads(v["after_windows"])) == 2
    assert v["measured_gain"] == pytest.approx(v["after_frames_per_s_node"] / v["before_frames_per_s_node"])
    assert v["verdict"] in ("proven", verdict_worse(), verdict_none())
    assert not (results / "advice" / "verify").exists()  # the legs' records are not left behind
    text = advise(summary, {("h264", "local"): c}, None, table)
    assert "Verified here, 2 alternating legs each" in text and f"{v['measured_gain']:.2f}x measured" in text


def verdict_worse():
    from dlbench.advice.prove import verdict

    return verdict(0.5)


def verdict_none():
    from dlbench.advice.prove import verdict

    return verdict(1.0)


def test_a_prescription_the_run_cannot_take_is_said_not_verified_without_running(v30_h264, tmp_path):
    """lance_map needs the dataset's Lance copy, which this results directory lacks: one line, no legs run."""
    from dlbench.advice.prove import verify

    results, summary = _results_with_one_run(v30_h264, tmp_path, workers=2)
    costs = [cost(worker_ms=8.0), cost(worker_ms=0.5, loader="lance_map")]
    c = Calibration("h264", "local", "h", 2, 6, 1, None, 1.0, costs=costs)
    table = verify(results, summary, {("h264", "local"): c}, None, legs=2, duration_s=1.0)
    assert table.iloc[0]["change"] == "loader: lance_map"
    assert table.iloc[0]["verdict"].startswith("not verified: ") and "lance" in table.iloc[0]["verdict"]
    assert pd.isna(table.iloc[0]["measured_gain"])


def test_a_stream_waiting_on_storage_is_told_to_fetch_ahead_by_the_share_it_waited():
    """Workers that waited on storage 60% of their time: fetching ahead is predicted to remove that part, up to
    every core's rate; a run that already fetches ahead, or waits little, is not told to."""
    c = cal(8)
    split = {"split_fetch_ms": 6.0, "split_decode_ms": 3.0, "split_assembly_ms": 0.5, "split_idle_ms": 0.5}
    waiting = row(2, measured=100.0, c=c, loader="dlbench_stream", **split)
    top = prescribe(waiting, c, spec={"fetch_episodes": 0})
    fetch = next(p for p in top if "fetch_episodes" in p.change)
    assert fetch.change == {"fetch_episodes": 2} and fetch.gain == pytest.approx(10 / 4) and not fetch.measured
    assert not any("fetch_episodes" in p.change for p in prescribe(waiting, c, spec={"fetch_episodes": 2}))
    calm = {**waiting, "split_fetch_ms": 0.3}  # 4.3 ms a sample with the wait, 4.0 without: under 10% more
    assert not any("fetch_episodes" in p.change for p in prescribe(calm, c, spec={"fetch_episodes": 0}))
    # a wait of 16% (a cold bucket's +20 ms): 1.19x, where the cores allow it
    cold = {**waiting, "split_fetch_ms": 0.76}
    fetch = next(p for p in prescribe(cold, c, spec={"fetch_episodes": 0}) if "fetch_episodes" in p.change)
    assert fetch.gain == pytest.approx(4.76 / 4.0)


def test_a_runs_bound_is_the_cpu_it_spent_so_a_run_never_passes_it():
    """The calibration's CPU per sample (2 cores / 4.15 ms, 2 frames a sample: 964 frames/s) is beaten by a run that
    spent 3.0 ms per sample (the machine was faster that hour): judged by its own CPU it is at 97% of its bound, not
    134%; and the fetch-ahead it is told of is capped by that bound, not by the calibration's lower one. A run that
    spent more than the calibration is held to the calibration's."""
    c = cal(2)
    spent = {"worker_cpu_ms_per_sample": 2.6, "main_cpu_ms_per_sample": 0.3, "other_cpu_ms_per_sample": 0.1}
    at = row(2, measured=1296.0, c=c, samples_per_s_node=648.0, **spent)  # 2 cores / 3.0 ms = 667 samples/s
    assert cores_rate(at, c) < at["frames_per_s_node"] < spent_rate(at, c) == pytest.approx(4000 / 3.0)
    text = advise(pd.DataFrame([at]), {("d", "local"): c})
    assert "At its bound: 97% " in text and "(1,333 frames/s per node at the CPU per sample it spent; 964" in text
    split = {"split_fetch_ms": 1.0, "split_decode_ms": 3.0, "split_assembly_ms": 0.0, "split_idle_ms": 0.0}
    waiting = {**row(2, measured=1200.0, c=c, samples_per_s_node=600.0, **spent, **split), "loader": "dlbench_stream"}
    stream = Calibration("d", "local", "h", 2, 100, 1, None, 1.0, costs=[replace(c.costs[0], loader="dlbench_stream")])
    fetch = next(p for p in prescribe(waiting, stream, spec={"fetch_episodes": 0}) if "fetch_episodes" in p.change)
    assert fetch.frames_per_s_node == pytest.approx(4000 / 3.0)  # 1200 x 4/3 = 1600, capped at its bound
    # a run that spent more than the calibration (other work on its host) is judged by the calibration's bound
    crowded = {**at, "frames_per_s_node": 600.0, "samples_per_s_node": 300.0, "other_cpu_ms_per_sample": 4.0}
    assert spent_rate(crowded, c) < cores_rate(crowded, c)
    assert "Bound: unknown; every core would give 964 frames/s by the calibration." in advise(
        pd.DataFrame([crowded]), {("d", "local"): c}
    )
    unrecorded = {k: v for k, v in at.items() if k != "other_cpu_ms_per_sample"}
    assert spent_rate(unrecorded, c) is None
    assert "964 frames/s per node by the calibration" in advise(pd.DataFrame([unrecorded]), {("d", "local"): c})


def test_a_decoder_cache_that_misses_is_given_back_the_loaders_default():
    c = cal(2)
    small = row(2, measured=0.4 * row(2, c=c)["frames_per_s_node"], c=c, cache_hit_rate=0.1)
    top = prescribe(small, c, spec={"decoder_cache_size": 1})[0]
    assert top.change == {"decoder_cache_size": None} and top.gain == pytest.approx(2.5)
    assert not any("decoder_cache_size" in p.change for p in prescribe({**small, "cache_hit_rate": 0.9}, c,
                                                                        spec={"decoder_cache_size": 1}))  # fmt: skip
    text = advise(pd.DataFrame([small]), {("d", "local"): c}, specs={("s", small["run_id"]): {"decoder_cache_size": 1}})
    assert "`no decoder_cache_size`" in text


def test_the_memory_line_names_the_hosts_share_and_past_80_percent_the_workers_that_fit():
    c = cal(8)  # main 200 MB, 150 MB a worker
    run = row(8, c=c, peak_pss_mb=1400.0)
    roomy = advise(pd.DataFrame([run]), {("d", "local"): c}, ram_mb=10_000)
    assert "Memory: peak PSS 1,400 MB on a host, 14% of its 10,000 MB." in roomy and "fits" not in roomy
    text = advise(pd.DataFrame([run]), {("d", "local"): c}, ram_mb=1500)
    assert "93% of its 1,500 MB. Over 80%: `num_workers: 6` fits" in text  # (0.8 x 1500 - 200) // 150


def test_advice_on_a_run_of_two_hosts_agrees_with_its_prediction_and_caps_workers_per_host():
    """A 2-rank run that ran on 2 hosts of 4 cores: advice predicts it as predictions.csv does (hosts from
    `nodes_used`), and offers each rank its host's 4 cores, not 4 over both ranks."""
    c = cal(4)
    run = {**row(1, measured=1.0), "ranks": 2, "nodes": 2, "nodes_used": 2}
    predicted = predict_run({**run, "verify": True, "fetch_episodes": 0}, c, hosts=2).frames_per_s_node
    slow = {**run, "frames_per_s_node": predicted}
    top = prescribe(slow, c)[0]
    assert top.change == {"num_workers": 4}  # counting both ranks on one host would cap it at 2
    one_host = {**slow, "nodes_used": 1}  # the same ranks sharing one host's 4 cores
    assert prescribe(one_host, c)[0].change == {"num_workers": 2}


def test_a_map_run_whose_workers_wait_on_storage_is_given_workers_past_the_cores():
    """A calibrated worker that waits on storage 80% of its time (10 ms a sample, 2 ms of CPU) on 2 cores: more
    workers than cores overlap the waits; one that computes all its time is never given more than the cores."""
    waiting = Calibration("d", "bucket", "h", 2, 100, 1, 20.0, 1.0, costs=[cost(worker_ms=10.0, cpu_ms=2.0)])
    slow = row(2, c=waiting)
    top = prescribe({**slow, "source": "bucket"}, waiting)[0]
    assert top.change["num_workers"] > 2 and "waits on storage 80%" in top.why
    busy = Calibration("d", "bucket", "h", 2, 100, 1, 20.0, 1.0, costs=[cost(worker_ms=10.0, cpu_ms=10.0)])
    assert all(p.change.get("num_workers", 0) <= 2 for p in prescribe({**row(1, c=busy), "source": "bucket"}, busy))


def test_lerobots_stream_on_one_data_file_is_told_in_its_own_terms_to_have_one_file_a_worker(
    v30_h264_one_file, monkeypatch
):
    """LeRobot's stream gives a worker whole data files: on one file, 4 workers, 3 idle. The prescription is the data
    file size that gives each worker a file, predicted with that many files; verify says it cannot run it here. A
    set whose data is too small to split into files of 1 MB (this one's, as written) is told nothing of the kind."""
    from dlbench.advice import prescribe as prescribing
    from dlbench.advice.prove import changed_spec
    from dlbench.errors import UserError
    from dlbench.run.spec import make_run

    c = cost(worker_ms=10.0, loader="lerobot_stream")
    cal = Calibration("d", "local", "h", 8, 8, 1, None, 1.0, costs=[c])
    slow = {**row(4, measured=1 / c.worker_s * 2), "loader": "lerobot_stream", "run_id": "d-lerobot_stream-single-w4"}
    spec = {"root": str(v30_h264_one_file)}
    assert prescribing._data_mb(spec["root"]) < 4 * prescribing.MIN_DATA_FILE_MB
    assert not [p for p in prescribe(slow, cal, spec=spec) if "data_file_size_in_mb" in p.change]
    monkeypatch.setattr(prescribing, "_data_mb", lambda root: 400.0)  # the same layout with 400 MB of data
    found = [p for p in prescribe(slow, cal, spec=spec) if "data_file_size_in_mb" in p.change]
    assert found[0].change == {"data_file_size_in_mb": 100.0}
    assert found and found[0].gain == pytest.approx(4.0, rel=0.05) and "1 file(s) for 4 workers" in found[0].why
    text = advise(pd.DataFrame([slow]), {("d", "local"): cal}, specs={("s", slow["run_id"]): spec})
    assert "`data_file_size_in_mb: " in text and "in the convert section: " in text and "::" not in text
    run = make_run({"root": str(v30_h264_one_file), "loader": "dlbench_stream"})
    with pytest.raises(UserError, match="not a run setting"):
        changed_spec(run, found[0].change, Path("."), pd.DataFrame())


def test_measures_above_one_are_equal_not_better():
    """Over ten batches an effective batch size is noisy (1.74 and 2.08 on two short legs of one loader): past 1,
    both are as good as independent draws, and a change is not withdrawn for the difference."""
    from dlbench.advice.prove import verdict
    from dlbench.report.aggregate import shuffle_gap

    def m(ten):
        return {"shuffle_effective_batch": 1.0, "shuffle_effective_window": ten, "shuffle_distinct_frames": 1.0}

    assert shuffle_gap(m(1.74), m(2.08)) == "" and verdict(1.5, m(2.08), m(1.74)) == "proven"
    assert shuffle_gap(m(0.5), m(2.08)) == "effective window 0.50 against 2.08"


def test_the_short_answer_comes_first_one_line_a_dataset_and_never_contradicts_the_detail():
    """advice.md opens with one line per dataset and source: the top prescription of its runs (more workers for a
    run with too few), a dataset whose runs are at their bound says so; the per-run detail follows. A run that
    meets its frames/s target but shuffles below the floor is said to meet the target, not to pass."""
    c = cal(8)
    few = row(1, c=c)
    at_bound = {**row(8, c=c), "dataset": "e", "run_id": "e-dlbench_map-single-w8"}
    at_bound["frames_per_s_node"] = 0.95 * cores_rate(at_bound, c)
    low = {**row(8, c=c), "run_id": "d-dlbench_map-single-w8b", "target_frames_per_s_node": 1.0,
           "shuffle_effective_batch": 0.2, "shuffle_effective_window": 0.1, "shuffle_distinct_frames": 1.0}  # fmt: skip
    text = advise(pd.DataFrame([few, at_bound, low]), {("d", "local"): c, ("e", "local"): c})
    answer, detail = text.split("# Per run")
    lines = [line for line in answer.splitlines() if line.startswith("- **")]
    assert len(lines) == 2 and lines[0].startswith("- **d** from local:") and "`num_workers: 8`" in lines[0]
    assert lines[1] == "- **e** from local: no change the model or the matrix knows gives 10% more."
    assert "## s / d-dlbench_map-single-w1" in detail and "## s / d-dlbench_map-single-w1" not in answer
    section = detail.split("## s / d-dlbench_map-single-w8b")[1]
    assert "(target 1: met)" in section and "so the run does not pass" in section and ": pass" not in section


def test_a_prescription_its_proof_withdrew_is_not_the_short_answer():
    """LeRobot's stream below the floor is prescribed a larger buffer; where its proof here withdrew it, the short
    answer is the dataset's next best change (more workers for a run with too few), and where there is none, the
    line says the proof withdrew it, never that `--verify` will measure it."""
    c = replace(cal(8), costs=[*cal(8).costs, cost(worker_ms=4.0, loader="lerobot_stream")])
    few = row(1, c=c)
    low = {**row(8, c=c), "scenario": "t", "run_id": "d-lerobot_stream-single-w8", "loader": "lerobot_stream",
           "shuffle_effective_batch": 0.6, "shuffle_effective_window": 0.1, "shuffle_distinct_frames": 1.0}  # fmt: skip
    proof = {"scenario": "t", "run_id": low["run_id"], "change": "buffer_size: 4000", "predicted_gain": 1.0,
             "before_frames_per_s_node": 500.0, "after_frames_per_s_node": 450.0, "measured_gain": 0.9,
             "before_windows": "[500.0]",
             "verdict": "withdrawn: still below the floor (effective window 0.2 < 0.3)"}  # fmt: skip
    verified = pd.DataFrame([proof])
    text = advise(pd.DataFrame([few, low]), {("d", "local"): c}, verified=verified)
    answer = [line for line in text.split("# Per run")[0].splitlines() if line.startswith("- **")]
    assert len(answer) == 1 and "`num_workers: 8`" in answer[0] and "buffer_size" not in answer[0]
    alone = advise(pd.DataFrame([low]), {("d", "local"): c}, verified=verified).split("# Per run")[0]
    assert "`buffer_size: 4000`" in alone and "withdrew it (withdrawn: still below the floor" in alone
    assert "what `--verify` measures" not in alone
    proven = pd.DataFrame([{**proof, "verdict": "proven: reaches the floor (effective window 0.10 before), at 0.90x"}])
    first = advise(pd.DataFrame([few, low]), {("d", "local"): c}, verified=proven).split("# Per run")[0]
    assert "restore the shuffle of t: `buffer_size: 4000`, proven: reaches the floor" in first
    # unproven, the answer says the change and its reason once, and names LeRobot's default only where it is the change
    (unproven,) = [line for line in advise(pd.DataFrame([low]), {("d", "local"): c}).splitlines() if "- **" in line]
    assert unproven.count("buffer_size: 4000") == 1 and "restore its shuffle" not in unproven, unproven
    assert "not proven here" in unproven and "its own default" not in unproven, unproven
    small = advise(pd.DataFrame([low]), {("d", "local"): c}, specs={("t", low["run_id"]): {"buffer_size": 100}})
    (raised,) = [line for line in small.splitlines() if "- **" in line]
    assert "`buffer_size: 1000` (" in raised and "1000, its own default, mixes" in raised, raised


def test_the_cheapest_proof_of_a_run_below_the_floor_goes_first():
    """Runs below the floor first (their gain is unknown until measured), the one whose legs start up fastest among
    them (Ray Data's 15 s first batch last), then speed by predicted gain; several nodes last."""
    from dlbench.advice.prescribe import Prescription
    from dlbench.advice.prove import proof_order

    def todo(name, shuffle, gain=1.0, start=1.0, nodes=1):
        return ({"scenario": name, "first_batch_latency_s": start, "nodes": nodes}, Prescription({}, 1.0, gain,
                why="", shuffle=shuffle))  # fmt: skip

    runs = [todo("fast", False, gain=3.0), todo("ray", True, start=15.0), todo("two", True, start=0.1, nodes=2),
            todo("lerobot", True, start=4.0), todo("faster", False, gain=5.0),
            todo("unknown", True, start=None)]  # fmt: skip
    assert [r["scenario"] for r, _ in sorted(runs, key=proof_order)] == [
        "lerobot", "ray", "unknown", "faster", "fast", "two"]  # fmt: skip
