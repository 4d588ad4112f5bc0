"""dlbench.model: the equations (pure, over many shapes), the calibration record, and a real calibration."""

import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlbench.errors import UserError
from dlbench.model import Calibration, Node, predict
from dlbench.model.equations import saturation
from dlbench.model.table import predict_run, what_if

from .helpers import cost

pytestmark = pytest.mark.unit


costs = st.builds(
    cost,
    worker_ms=st.floats(0.05, 50),
    handover_ms=st.floats(0.001, 5),
    check_ms=st.floats(0, 5),
    other_ms=st.sampled_from([0.0, 0.3, 2.0]),
    loader=st.sampled_from(["dlbench_map", "dlbench_stream", "lerobot_map", "lerobot_stream", "lance_map"]),
)


@settings(max_examples=300, deadline=None)
@given(c=costs, cores=st.integers(1, 128), workers=st.integers(0, 256), episodes=st.integers(1, 2000))
def test_no_term_is_exceeded(c, cores, workers, episodes):
    """The prediction never beats what the cores, the main process or the busy workers can do."""
    p = predict(c, Node(cores), workers, batch_size=16, episodes=episodes, data_files=3)
    s = p.samples_per_s_node
    assert s <= cores / (c.worker_cpu_s + c.main_s + c.other_cpu_s) * (1 + 1e-9)
    if workers:
        assert s <= 1 / c.main_s * (1 + 1e-9)
        assert s <= p.busy_workers / c.worker_s * (1 + 1e-9)
    else:
        assert s == pytest.approx(min(1 / c.solo_s, cores / (c.worker_cpu_s + c.main_s + c.other_cpu_s)))
    assert p.bound in p.rates and p.rates[p.bound] == s
    assert p.frames_per_s_node == pytest.approx(s * c.frames_per_sample)


@settings(max_examples=300, deadline=None)
@given(c=costs, cores=st.integers(1, 64), extra=st.integers(1, 64), episodes=st.integers(1, 2000))
def test_more_workers_than_cores_never_pays_where_workers_only_compute(c, cores, extra, episodes):
    """A worker that never waits on storage (its time is all CPU) cannot gain from more workers than cores, over a
    run that no worker goes through its shards in (past that, a worker with fewer shards than another idles at each
    pass's end, and a worker more can fill its core: `worker_share`)."""
    run = dict(batch_size=16, episodes=episodes, samples=10**9, run_s=10.0)
    at = predict(c, Node(cores), cores, **run).frames_per_s_node
    past = predict(c, Node(cores), cores + extra, **run).frames_per_s_node
    assert past <= at * (1 + 1e-9)


@settings(max_examples=200, deadline=None)
@given(c=costs, cores=st.integers(1, 64), workers=st.integers(1, 64))
def test_more_workers_never_predicts_less(c, cores, workers):
    one = predict(c, Node(cores), workers, batch_size=16, episodes=4096).frames_per_s_node
    more = predict(c, Node(cores), workers + 1, batch_size=16, episodes=4096).frames_per_s_node
    assert more >= one * (1 - 1e-9)


def test_waits_on_storage_are_overlapped_by_more_workers_and_scale_with_latency():
    """A worker that waits 9 ms of every 10 (a remote source) is fetch-bound; more workers than cores pay, and a
    store with half the time to first byte halves the wait."""
    c = cost(worker_ms=10, cpu_ms=1)
    two = predict(c, Node(2), 2, batch_size=16, episodes=100, calibrated_ttfb_ms=20)
    eight = predict(c, Node(2), 8, batch_size=16, episodes=100, calibrated_ttfb_ms=20)
    assert two.bound == "fetch latency" and eight.samples_per_s_node == pytest.approx(4 * two.samples_per_s_node)
    near = predict(c, Node(2, ttfb_ms=10), 2, batch_size=16, episodes=100, calibrated_ttfb_ms=20)
    assert near.samples_per_s_node == pytest.approx(2 / (0.001 + 0.0045))


def test_streaming_with_fewer_units_than_workers_names_the_episodes():
    """dlbench_stream deals pieces of episodes (ranks x workers of each), so every worker has some; fetching whole
    episodes, one virtual shard per fetch group. LeRobot's stream deals one data file per worker."""
    ours = predict(cost(loader="dlbench_stream"), Node(16), 8, batch_size=16, episodes=3)
    assert ours.busy_workers == 8 and ours.bound != "episodes"
    fetched = predict(cost(loader="dlbench_stream"), Node(16), 8, batch_size=16, episodes=3, fetch_episodes=1)
    assert fetched.busy_workers == 3 and fetched.bound == "episodes"
    theirs = predict(cost(loader="lerobot_stream"), Node(16), 4, batch_size=16, episodes=50, data_files=1)
    assert theirs.busy_workers == 1 and theirs.bound == "episodes"
    two_ranks = predict(
        cost(loader="dlbench_stream"), Node(16, ranks=2), 2, batch_size=16, ranks=2, episodes=3, fetch_episodes=1
    )
    assert two_ranks.busy_workers == 1  # rank 1 gets one of the 3 shards: the slowest rank sets the pace
    # one data file over two ranks: `datasets` splits it by rows, so each rank streams it with one busy worker
    split = predict(cost(loader="lerobot_stream"), Node(16, ranks=1), 2, batch_size=16, ranks=2, episodes=50)
    assert split.busy_workers == 1 and split.samples_per_s_node > 0


def test_ranks_on_a_node_share_its_cores_and_a_training_step_caps_each_rank():
    c = cost(worker_ms=1, handover_ms=0.01, check_ms=0)
    one = predict(c, Node(4, ranks=1), 1, batch_size=16, episodes=100)
    two = predict(c, Node(4, ranks=2), 1, batch_size=16, ranks=2, episodes=100)
    assert two.samples_per_s_node == pytest.approx(2 * one.samples_per_s_node)
    crowded = predict(c, Node(2, ranks=4), 2, batch_size=16, ranks=4, episodes=100)
    assert crowded.bound == "cores"
    stepped = predict(c, Node(4), 2, batch_size=16, step_ms=100, episodes=100)
    assert stepped.bound == "training step" and stepped.samples_per_s_node == pytest.approx(160)


def test_auto_workers_are_the_cores_of_the_node():
    c = cost(worker_ms=10, cpu_ms=10, handover_ms=0.01, check_ms=0)
    p = predict(c, Node(96), "auto", batch_size=16, episodes=10_000)
    assert p.busy_workers == 96 and p.peak_pss_mb == pytest.approx(200 + 96 * 150)


def test_saturation_is_where_one_more_worker_adds_under_five_percent():
    assert saturation([(1, 100.0), (2, 200.0), (4, 380.0), (8, 390.0)]) == 4
    assert saturation([(1, 100.0), (2, 200.0)]) is None


def calibration(**kw) -> Calibration:
    base = dict(dataset="d", source="local", host="h", cores=2, episodes=10, data_files=1, ttfb_ms=None, seconds=1.0)
    return Calibration(**{**base, **kw}, costs=[cost(), cost(loader="dlbench_stream")])


def test_a_calibration_reads_back_and_a_stale_one_is_refused(tmp_path):
    cal = calibration()
    cal.write(tmp_path / "c.json")
    assert Calibration.read(tmp_path / "c.json") == cal
    values = json.loads((tmp_path / "c.json").read_text())
    (tmp_path / "old.json").write_text(json.dumps({**values, "version": 0}))
    with pytest.raises(UserError, match="another version"):
        Calibration.read(tmp_path / "old.json")
    with pytest.raises(UserError, match="calibration not found"):
        Calibration.read(tmp_path / "missing.json")


def test_a_run_is_predicted_from_its_calibration_or_says_why_not():
    cal = calibration(note="lerobot_map single: no peer environment")
    run = {"loader": "dlbench_map", "mode": "single", "decode_device": "cpu", "ranks": 2, "nodes": 2}
    run |= {"num_workers": 2, "batch_size": 32, "step_ms": 0}
    local, spread = predict_run(run, cal, hosts=1), predict_run(run, cal, hosts=2)
    # both cores-bound per node: the same per node, but two hosts deliver twice as much, each holding one rank
    assert spread.samples_per_s_node == pytest.approx(local.samples_per_s_node) and spread.bound == "cores"
    assert spread.peak_pss_mb == pytest.approx(local.peak_pss_mb / 2)
    for workers in (0, 2):  # a run that checks no frames is spared their cost
        checked = predict_run({**run, "num_workers": workers}, cal).samples_per_s_node
        unchecked = predict_run({**run, "num_workers": workers, "verify": False}, cal).samples_per_s_node
        assert unchecked > checked
    assert "GPU" in predict_run({**run, "decode_device": "cuda"}, cal)
    assert "no peer environment" in predict_run({**run, "loader": "lerobot_map"}, cal)


def test_the_what_if_table_answers_for_another_node():
    text = what_if(calibration(), ["dlbench_map"], None, [1, 8, 30, 60], [1, 2], cores=32)
    assert "nodes of 32 cores" in text and "more workers stop paying past 8" in text  # the main process: 6,667/s
    assert text.count("dlbench_map") >= 8


def test_an_unreachable_dataset_is_calibrated_as_such_or_stops_with_one_line(tmp_path):
    """A dataset that cannot be read from here (a closed port) with on_unreachable: skip gets a calibration that says
    why, so its runs' predictions say it too; without skip, one line naming the URL."""

    from dlbench.model.calibrate import calibrate
    from dlbench.run.spec import make_run

    run = make_run({"root": "http://127.0.0.1:9/nowhere", "loader": "dlbench_stream"})
    cal = calibrate([replace(run, on_unreachable="skip")], "nowhere", "local", tmp_path / "c.json")
    assert cal.costs == [] and "http://127.0.0.1:9/nowhere" in cal.note
    why = predict_run({**run.to_dict(), "decode_device": "cpu"}, Calibration.read(tmp_path / "c.json"))
    assert "no calibration of dlbench_stream" in why and "nowhere" in why
    with pytest.raises(UserError, match="http://127.0.0.1:9/nowhere: "):
        calibrate([run], "nowhere", "local", tmp_path / "d.json")
    assert not (tmp_path / "d.json").exists()


@pytest.mark.timing  # predicts a measured speed from another measurement: `make test` runs it alone, after the rest
def test_a_real_calibration_measures_every_pair_and_predicts_its_own_runs(v30_h264, tmp_path):
    """`dlbench calibrate` on a small set: every term measured and positive, the one-process pass only for the
    loader a run without workers uses; a run of another batch size is predicted within the model's stated miss of what
    it measures (the error table lives in docs/model.md, not in a test)."""
    from dlbench.bench.launch import launch
    from dlbench.model.calibrate import calibrate
    from dlbench.run.spec import make_run

    runs = [
        make_run({"root": str(v30_h264), "loader": lo, "warmup_s": 0.3, "num_workers": w})
        for lo, w in (("dlbench_map", 2), ("dlbench_map", 0), ("dlbench_stream", 2))
    ]
    cal = calibrate(runs, "h264", "local", tmp_path / "cal.json")
    assert {c.loader for c in cal.costs} == {"dlbench_map", "dlbench_stream"} and cal.cores >= 1
    for c in cal.costs:
        assert c.worker_s > 0 and c.worker_cpu_s > 0 and c.handover_s > 0 and c.check_s > 0
        assert c.main_pss_mb > 0 and c.worker_pss_mb > 0
        # a pass with a worker per core measured a sample's CPU with every core busy (a 1-core job has no such pass)
        assert (c.full_cores, c.full_cpu_s is None) == ((cal.cores, False) if cal.cores > 1 else (0, True))
        assert c.repeat_diff is not None and 0 <= c.repeat_diff < 2  # the one-worker pass, measured twice
    solo = cal.cost("dlbench_map", "single")
    assert 0 < solo.solo_check_s < solo.solo_s  # the passes checked frames, as the runs do
    assert solo.solo_pss_mb > 0  # the one process's memory, from its own pass
    stream = cal.cost("dlbench_stream", "single")
    assert stream.solo_s is None  # no run of it without workers: not measured, and not predicted
    assert "not measured" in predict_run({**runs[2].to_dict(), "num_workers": 0}, cal)
    # a setting the passes did not run: batches of 4 (the model carries per-sample costs over to any batch size)
    run = make_run({"root": str(v30_h264), "num_workers": 1, "batch_size": 4, "duration_s": 1.5, "warmup_s": 0.3,
                    "repeats": 1})  # fmt: skip
    launch(run, tmp_path / "run")
    measured = json.loads((tmp_path / "run/rank0of1.json").read_text())["metrics"]["frames_per_s_node"]
    predicted = predict_run(run.to_dict(), cal).frames_per_s_node
    # within the model's stated miss at small batches (docs/model.md: no per-batch term, 1.6-2.1x over at 4)
    assert 0.5 < predicted / measured < 2.5, (predicted, measured)


def test_repeated_passes_of_a_loader_pool_their_time_per_sample_and_say_how_far_apart_they_were():
    """A pass slowed by 25% (the host moving between minutes) moves the pooled cost half as far; of three, one caught
    apart drops out; the first pass's start, memory and reads stay; a repeat that could not run leaves the first
    alone."""
    from dlbench.model.calibrate import pooled

    first = {"samples_per_s": 200.0, "worker_cpu_ms_per_sample": 4.0, "main_cpu_ms_per_sample": 0.5,
             "check_ms_per_sample": 0.1, "other_cpu_ms_per_sample": None, "data_wait_frac": 0.9,
             "first_batch_latency_s": 2.0, "peak_pss_mb": 900.0, "samples": 300}  # fmt: skip
    slow = {**first, "samples_per_s": 160.0, "worker_cpu_ms_per_sample": 5.0, "other_cpu_ms_per_sample": 0.2,
            "first_batch_latency_s": 0.4, "peak_pss_mb": 700.0, "samples": 240}  # fmt: skip
    both = pooled(first, slow)
    assert both["samples_per_s"] == pytest.approx(1 / 0.005625)  # the mean of 5 and 6.25 ms a sample
    assert both["worker_cpu_ms_per_sample"] == 4.5 and both["main_cpu_ms_per_sample"] == 0.5
    assert both["other_cpu_ms_per_sample"] is None  # measured by one pass only: not averaged with nothing
    assert (both["first_batch_latency_s"], both["peak_pss_mb"], both["samples"]) == (2.0, 900.0, 300)
    assert both["repeat_diff"] == pytest.approx(1.25 / 5.625) and both["repeat_passes"] == 2
    assert pooled(first, "lerobot_stream single: failed") is first
    # three passes (two disagreed): the median pass's costs; a pass three times slower drops out
    stalled = {**first, "samples_per_s": 60.0, "worker_cpu_ms_per_sample": 15.0}
    three = pooled(first, stalled, slow)
    assert (three["samples_per_s"], three["worker_cpu_ms_per_sample"]) == (160.0, 5.0)
    assert three["repeat_passes"] == 3 and three["repeat_diff"] > 1


def test_a_storage_server_on_the_host_takes_its_cpu_out_of_the_cores_term():
    """A loopback server's CPU per sample (measured in calibrating) is CPU the loader's processes do not get."""
    alone = predict(cost(worker_ms=1.0), Node(2), 8, batch_size=16, episodes=100)
    shared = predict(cost(worker_ms=1.0, other_ms=1.0), Node(2), 8, batch_size=16, episodes=100)
    assert alone.bound == shared.bound == "cores"
    assert shared.samples_per_s_node == pytest.approx(2 / (1.0e-3 + 0.15e-3 + 1.0e-3))
    assert shared.samples_per_s_node < alone.samples_per_s_node


def test_a_remote_calibration_takes_the_full_width_contention_of_the_local_one_on_the_same_host(tmp_path, capsys):
    """The local pass measured 0.45 ms a sample on top of its one-worker pass with 4 cores busy; a remote source's
    one-worker pass (its loopback server's CPU in it) gets the same 0.45 ms on top of its own; a pair the local
    calibration lacks is left to be measured; a calibration of another host lends nothing, and says so."""
    import socket

    from dlbench.cli import _log_to_stdout
    from dlbench.model.calibrate import cores, usable_contention, with_contention
    from dlbench.model.calibration import Calibration

    _log_to_stdout()  # as `dlbench calibrate` logs: stamped lines on stdout

    local = replace(cost(worker_ms=1.0), full_cpu_s=1.6e-3, full_cores=4)
    remote = cost(worker_ms=1.5, other_ms=0.5)
    lent = with_contention(remote, {(local.loader, local.mode): local})
    assert lent.full_cpu_s == pytest.approx(remote.cpu_s(1) + 0.45e-3) and lent.full_cores == 4
    assert "contention from the local calibration" in lent.note
    assert with_contention(remote, {}) is remote
    ref = Calibration("d", "local", socket.gethostname(), cores(), 8, 1, None, 1.0, costs=[local])
    ref.write(tmp_path / "here.json")
    assert usable_contention(tmp_path / "here.json").costs == [local]
    replace(ref, host="elsewhere").write(tmp_path / "there.json")
    assert usable_contention(tmp_path / "there.json") is None
    assert "made on elsewhere" in capsys.readouterr().out


@settings(max_examples=300, deadline=None)
@given(
    local=costs,
    remote=costs,
    full_share=st.floats(0.2, 3.0),
    cores=st.integers(1, 128),
    workers=st.integers(0, 64),
)
def test_a_lent_contention_never_makes_a_remote_prediction_negative(local, remote, full_share, cores, workers):
    """Two short passes on a noisy host can measure a full-width pass below the one-worker one (`full_share` < 1)
    and a remote source's one-worker pass below the local one's. The remote's full-width CPU is still the local
    one's at least (a source adds CPU, never takes it away), so every prediction of it stays above zero."""

    from dlbench.model.calibrate import with_contention

    local = replace(local, loader=remote.loader, full_cpu_s=local.cpu_s(1) * full_share, full_cores=4)
    lent = with_contention(remote, {(local.loader, local.mode): local})
    assert lent.full_cpu_s >= local.full_cpu_s
    assert lent.full_cpu_s == pytest.approx(local.full_cpu_s + max(0.0, remote.cpu_s(1) - local.cpu_s(1)))
    p = predict(lent, Node(cores), workers, batch_size=16, episodes=64)
    assert p.frames_per_s_node > 0 and all(rate >= 0 for rate in p.rates.values())


def test_the_cores_bound_divides_by_what_a_sample_costs_with_every_core_busy():
    """A full-width pass that measured 1.6 ms of CPU a sample on 4 cores, where the one-worker pass summed 1.15 ms:
    4 cores give 4 / 1.6 ms; 1 core the one-worker pass's 1 / 1.15 ms; 2 cores a third of the extra on top; 16
    cores (past the width measured) the 4-core figure. Re-encoding that saves decode CPU saves it at full width too;
    a run that checks no frames saves the checks there."""

    c = replace(cost(worker_ms=1.0), full_cpu_s=1.6e-3, full_cores=4)
    rate = {n: predict(c, Node(n), n, batch_size=16, episodes=100).rates["cores"] for n in (1, 2, 4, 16)}
    assert rate[4] == pytest.approx(4 / 1.6e-3) and rate[1] == pytest.approx(1 / 1.15e-3)
    assert rate[2] == pytest.approx(2 / (1.15e-3 + 0.45e-3 / 3)) and rate[16] == pytest.approx(16 / 1.6e-3)
    assert c.lighter(0.5e-3).cpu_s(4) == pytest.approx(1.1e-3) and c.unchecked().cpu_s(4) == pytest.approx(1.5e-3)
    assert cost(worker_ms=1.0).cpu_s(16) == pytest.approx(1.15e-3)  # not measured: shared as well as one core


def test_remote_reads_are_a_cost_per_frame_plus_each_readers_opening_spread_over_its_frames():
    """A pass of few frames weighs its opening reads heavily; a long run with more workers spreads them thinner:
    the main process's opening once a rank (metadata; LeRobot's map-style download), one more per reading process."""

    from dlbench.model.calibrate import remote_cost
    from dlbench.model.equations import remote_per_kframe

    # a pass: 50 requests and 30 MB from its start, 4 and 6 MB of them by the main process before its worker started;
    # its window of 100 samples x 2 frames took 20 requests, 10 MB
    m = {"samples": 100, "frames_per_sample": 2, "remote_frames": 400, "remote_requests": 50}
    m |= {"remote_bytes_read": 30e6, "remote_requests_window": 20, "remote_mb_window": 10.0}
    m |= {"remote_requests_main": 4, "remote_mb_main": 6.0}
    split = remote_cost(m)
    assert split == pytest.approx({"requests_per_kframe": 100.0, "mb_per_kframe": 50.0, "open_requests": 6.0,
                                   "open_mb": 4.0, "rank_open_requests": 4.0, "rank_open_mb": 6.0})  # fmt: skip
    c = replace(cost(), **split)
    assert remote_per_kframe(c, 2, float("inf"))["requests_per_kframe"] == 100.0  # a long run: the steady cost
    short, long = (remote_per_kframe(c, 2, f)["requests_per_kframe"] for f in (1000, 10_000))
    assert short == pytest.approx(100 + 16) and long == pytest.approx(100 + 1.6) and short > long
    assert remote_per_kframe(c, 4, 1000)["mb_per_kframe"] == pytest.approx(50 + 16 + 6)  # four workers open files
    assert remote_per_kframe(c, 0, 1000)["mb_per_kframe"] == pytest.approx(50 + 4 + 6)  # the main process reads
    assert remote_per_kframe(replace(c, requests_per_kframe=None), 2, 1000)["requests_per_kframe"] is None
    local = {"samples": 10, "frames_per_sample": 1, "remote_requests": None, "remote_requests_per_kframe": None}
    assert remote_cost(local) == {"requests_per_kframe": None, "mb_per_kframe": None}  # local disk: nothing metered


def test_a_stream_of_windows_is_calibrated_halfway_through_the_runs_windows():
    from dlbench.model.calibrate import FORWARD_POOL, MAX_STREAM_WARMUP_S, pass_warmup_s, steady_samples
    from dlbench.run.spec import RunSpec

    def run(loader, mode, duration_s=3.0, repeats=2):
        return RunSpec(root="x", loader=loader, mode=mode, warmup_s=1.0, duration_s=duration_s, repeats=repeats)

    assert pass_warmup_s(run("dlbench_stream", "sarm")) == pytest.approx(1 + 3 - 0.75)  # the windows span 1-7 s
    assert pass_warmup_s(run("lerobot_stream", "sarm")) == pytest.approx(3.25)
    assert pass_warmup_s(run("dlbench_stream", "single")) == 1.0  # one frame a sample: the cost does not grow
    assert pass_warmup_s(run("dlbench_map", "sarm")) == 1.0  # random access: no position in an episode
    assert pass_warmup_s(run("dlbench_stream", "sarm", duration_s=60)) == MAX_STREAM_WARMUP_S
    assert pass_warmup_s(run("dlbench_stream", "sarm", duration_s=1, repeats=1)) == 1.0  # never under the run's
    # that long only where the readers are still in their first episodes after the run's warm-up: an episode each
    assert steady_samples(run("dlbench_stream", "sarm"), 100) == 100 * FORWARD_POOL  # unset: as the forward pool's
    assert steady_samples(replace(run("dlbench_stream", "sarm"), pool_size=8), 100) == 100 * 8
    assert steady_samples(run("lerobot_stream", "sarm"), 100) == 100 + 1000  # one shard, its own default buffer


def test_each_worker_past_the_first_adds_its_own_pages_not_the_pages_forked_workers_share():
    """PSS splits the pages forked workers share among them, so their sum is what the one-worker pass measured;
    each further worker adds its USS. Without a USS (an older record) a worker's PSS stands in."""

    c = replace(cost(), main_pss_mb=200.0, worker_pss_mb=150.0, worker_uss_mb=60.0)

    def pss(c, w):
        return predict(c, Node(8), w, batch_size=16, episodes=100).peak_pss_mb

    assert pss(c, 0) == pss(c, 1) == 350.0  # no workers, no pass of its own: the sum stands in
    assert pss(c, 4) == pytest.approx(350.0 + 3 * 60.0)
    assert pss(replace(c, worker_uss_mb=None), 4) == pytest.approx(200.0 + 4 * 150.0)
    # the one process measured alone (a stream of windows holds more there than its two processes apart)
    alone = replace(c, solo_pss_mb=520.0)
    assert (pss(alone, 0), pss(alone, 1), pss(alone, 4)) == (520.0, 350.0, pytest.approx(350.0 + 3 * 60.0))


@settings(max_examples=200, deadline=None)
@given(
    loader=st.sampled_from(["dlbench_stream", "dlbench_map", "lerobot_stream"]),
    ranks=st.integers(1, 8),
    per_host=st.integers(1, 4),
    workers=st.integers(0, 6),
    episodes=st.integers(1, 40),
)
def test_every_rank_of_every_host_counts_with_its_own_busy_workers(loader, ranks, per_host, workers, episodes):
    """Ranks deliver on their own (the bench sums their windows): a host's workers term is the sum of its ranks'
    busy workers, and frames/s per node is the mean over the hosts, whichever host holds the rank with fewer."""
    from dlbench.model.equations import busy

    c = cost(worker_ms=10, cpu_ms=10, handover_ms=0.001, check_ms=0, loader=loader)
    # a run shorter than a shard takes: no worker has reached the end of its shards (`worker_share`, below)
    p = predict(c, Node(1024, ranks=per_host), workers, batch_size=16, ranks=ranks, episodes=episodes, data_files=3,
                samples=10**9, run_s=10.0)  # fmt: skip
    every = [busy(loader, workers, r, ranks, episodes, 3, 0) for r in range(ranks)]
    hosts = [every[h : h + per_host] for h in range(0, ranks, per_host)]
    if workers == 0:
        expect = sum(sum(1 for b in h if b) / c.solo_s for h in hosts) / len(hosts)
    else:
        expect = sum(sum(h) / c.worker_s for h in hosts) / len(hosts)
    assert p.samples_per_s_node == pytest.approx(expect)
    assert p.busy_workers == min(every)


@settings(max_examples=300, deadline=None)
@given(
    episodes=st.integers(1, 60),
    ranks=st.integers(1, 6),
    workers=st.integers(1, 8),
    seed=st.integers(0, 1000),
    epoch=st.integers(0, 5),
)
def test_a_streams_workers_share_of_a_long_run_is_its_shards_over_the_most_one_worker_reads(
    episodes, ranks, workers, seed, epoch
):
    """The loader's own partition (`rank_shards`, `worker_shards`) gives each worker of a rank every W-th of its
    shards: a pass through them ends when the worker with the most is done, so a long run's busy workers are the
    rank's shards over that most, which `worker_share` says without the partition."""
    from dlbench.loader.partition import auto_virtual_shards, rank_shards, worker_shards
    from dlbench.model.equations import worker_share

    shards = auto_virtual_shards(episodes)
    for rank in range(ranks):
        mine = rank_shards(shards, seed, epoch, rank, ranks)
        counts = [len(worker_shards(mine, workers, w)) for w in range(workers)]
        busy = sum(1 for n in counts if n)
        expect = sum(counts) / max(counts) if max(counts) else 0.0
        assert worker_share(busy, workers, len(mine), 0, 0.01, None) == pytest.approx(expect)


@settings(max_examples=300, deadline=None)
@given(shards=st.integers(1, 40), workers=st.integers(1, 8), samples=st.integers(100, 10**5),
       run_s=st.floats(0.01, 1000.0))  # fmt: skip
def test_a_streams_workers_idle_only_once_a_run_reaches_the_end_of_their_shards(shards, workers, samples, run_s):
    """Until the workers with fewer shards are through them, every worker with a shard is busy; over whole passes
    the share is the long run's; in between, never outside the two."""
    from dlbench.model.equations import worker_share

    busy = min(shards, workers)
    worker_s = 0.001
    long = worker_share(busy, workers, shards, 0, worker_s, None)
    few = shards // workers
    share = worker_share(busy, workers, shards, samples, worker_s, run_s)
    assert long - 1e-9 <= share <= busy + 1e-9
    if run_s <= few * samples / shards * worker_s:
        assert share == pytest.approx(busy)
    whole = 3 * (few + 1) * samples / shards * worker_s  # three passes, each as long as the most shards take
    assert worker_share(busy, workers, shards, samples, worker_s, whole) == pytest.approx(long)


def test_a_stream_of_five_episodes_on_two_workers_is_predicted_with_one_idle_at_each_passs_end():
    """5 episodes fetched whole on 2 workers: 3 and 2 shards, 5/3 workers busy over a run that goes through them
    many times, and the bound says so; 4 episodes divide: both busy. In pieces (the default) both are busy."""
    c = cost(worker_ms=2, cpu_ms=2, handover_ms=0.001, check_ms=0, loader="dlbench_stream")

    def run(episodes, run_s, fetch_episodes=1):
        return predict(c, Node(64), 2, batch_size=16, episodes=episodes, samples=episodes * 300, run_s=run_s,
                       fetch_episodes=fetch_episodes)  # fmt: skip

    assert run(5, 60.0, fetch_episodes=0).samples_per_s_node == pytest.approx(2 / c.worker_s)

    assert run(5, 60.0).samples_per_s_node == pytest.approx(5 / 3 / c.worker_s, rel=0.02)
    assert run(5, 60.0).bound == "episodes"
    assert run(4, 60.0).samples_per_s_node == pytest.approx(2 / c.worker_s)
    assert run(5, 0.5).samples_per_s_node == pytest.approx(2 / c.worker_s)  # not yet through 2 episodes (1.2 s)


def test_a_two_host_run_is_predicted_with_its_second_hosts_rank_too():
    """3 episodes fetched whole over 2 ranks of 2 workers, a rank a host: rank 0 reads 2 shards, rank 1 one; per
    node 1.5 workers' worth, where counting the first host alone said 2."""
    c = cost(worker_ms=10, cpu_ms=10, handover_ms=0.001, check_ms=0, loader="dlbench_stream")
    run = {"loader": "dlbench_stream", "mode": "single", "batch_size": 16, "num_workers": 2, "decode_device": "cpu",
           "ranks": 2, "verify": True, "fetch_episodes": 1}  # fmt: skip
    cal = Calibration("d", "local", "h", 64, 3, 1, None, 1.0, costs=[c])
    two_hosts = predict_run(run, cal, hosts=2)
    assert two_hosts.samples_per_s_node == pytest.approx(1.5 / c.worker_s)
    assert predict_run(run, cal, hosts=1).samples_per_s_node == pytest.approx(3 / c.worker_s)


def test_a_streams_calibration_passes_plan_their_reading_for_the_runs_workers():
    """A stream cuts pieces and takes GOP runs by its workers, so each pass plans for the run's (resolved from auto
    per rank of a node); other loaders plan nothing."""

    from dlbench.model.calibrate import planned_workers
    from dlbench.run.spec import RunSpec, resolve_workers

    stream = RunSpec(loader="dlbench_stream", num_workers=4)
    assert planned_workers(stream) == 4
    assert planned_workers(replace(stream, num_workers="auto", ranks=2, nodes=1)) == resolve_workers("auto", 2)
    assert planned_workers(replace(stream, loader="dlbench_map")) is None


def test_loaders_that_size_their_own_workers_get_one_pass_after_every_forked_loaders(monkeypatch, tmp_path):
    """Ray Data and Daft ignore `num_workers`: their one pass has every core busy, so it is their full-width pass
    too, and it comes after every pass of the loaders whose DataLoader workers fork from the calibrating process
    (the Ray processes and Daft threads it leaves would share the cores with those passes)."""
    from dlbench.model import calibrate as cal
    from dlbench.run.spec import RunSpec

    calls = []

    def one_pass(run, workdir, workers, warmup_s=None):
        calls.append((run.loader, workers))
        return {"samples_per_s": 500.0, "check_ms_per_sample": 0.1, "worker_cpu_ms_per_sample": 1.5,
                "main_cpu_ms_per_sample": 0.3, "other_cpu_ms_per_sample": 0.2, "data_wait_frac": 0.8,
                "worker_core_wait_ms_per_sample": 0.0, "peak_pss_workers_mb": 100.0, "peak_pss_mb": 300.0,
                "first_batch_latency_s": 1.0, "frames_per_sample": 2, "samples": 800, "warmup_samples": 10**6,
                "remote_requests": None}  # fmt: skip

    monkeypatch.setattr(cal, "one_pass", one_pass)
    monkeypatch.setattr(cal, "cores", lambda: 2)
    names = ["ray_data", "lerobot_map", "daft_data", "lerobot_stream"]
    runs = [RunSpec(loader=name, num_workers=2) for name in names]
    costs = cal.loader_costs(runs, tmp_path, samples=2000, episodes=20, once=True)
    assert [c.loader for c in costs] == names  # in the order asked
    own = [k for k, (loader, _) in enumerate(calls) if loader in ("ray_data", "daft_data")]
    assert own == [len(calls) - 2, len(calls) - 1]  # one pass each, after every other pass
    assert sorted(calls[: own[0]]) == sorted([(n, w) for n in ("lerobot_map", "lerobot_stream") for w in (1, 2)])
    ray = costs[0]
    assert ray.full_cores == 2 and ray.full_cpu_s == pytest.approx(ray.cpu_s(1)) == pytest.approx(ray.cpu_s(2))
    assert costs[1].full_cpu_s is not None
    # their pass spans several windows (a burst or a restart would fill one); the others' one
    specs = []

    def launch(spec, out):
        specs.append(spec)
        raise RuntimeError("not run here")

    monkeypatch.undo()
    monkeypatch.setattr(cal, "launch", launch)
    for name in ("ray_data", "daft_data", "lerobot_map"):
        assert "not run here" in cal.one_pass(RunSpec(loader=name, num_workers=2), tmp_path, 1)
    assert [s.repeats for s in specs] == [cal.OWN_WORKERS_WINDOWS, cal.OWN_WORKERS_WINDOWS, 1]


def test_a_pass_that_fails_says_its_error_once(monkeypatch, tmp_path):
    """A loader's failure in a calibration pass is one line, its type named once: a DataLoader worker's error
    arrives as its traceback, whose last line names the type already."""
    import dlbench.model.calibrate as cal
    from dlbench.run.spec import RunSpec

    worker = IndexError("Caught IndexError in DataLoader worker process 0.\nOriginal Traceback (most recent call "
                        "last):\n  File \"x.py\", line 1\nIndexError: Invalid frame index=69")  # fmt: skip
    for error, said in ((worker, "IndexError: Invalid frame index=69"), (ValueError("bad"), "ValueError: bad")):

        def launch(spec, out, error=error):
            raise error

        monkeypatch.setattr(cal, "launch", launch)
        assert cal.one_pass(RunSpec(loader="lerobot_stream"), tmp_path, 1) == f"lerobot_stream single: {said}"
