"""dlbench advise: the bound, the changes that lift it (never more workers than cores), a run at its bound left
alone, a measured re-encoded variant prescribed with its cost."""

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlbench.model import Calibration
from dlbench.model.table import predict_run
from dlbench.report.advice import advise, cores_rate, prescribe

from .test_model import cost

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
