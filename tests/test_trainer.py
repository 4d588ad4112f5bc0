"""`dlbench tune` in the trainer's terms: AU and GPUs fed from a rate, a Hub repo id as the dataset, the
lerobot-train flags of LeRobot's best (the policy's window and a train_config.json against LeRobot's own: in
test_lerobot_interop.py)."""

from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dlbench.tune import trainer
from dlbench.tune.run import _at_step, _held_order, lerobot_train_command
from dlbench.tune.search import Candidate

pytestmark = pytest.mark.unit


@given(rate=st.floats(1.0, 1e5), batch=st.integers(1, 256), step=st.floats(1.0, 2000.0), gpus=st.integers(1, 16))
def test_au_is_the_step_over_the_time_a_gpus_batch_takes_and_gpus_fed_keep_90_percent(rate, batch, step, gpus):
    au = trainer.utilization(rate, batch, step, gpus)
    assert 0 < au <= 1
    assert au == pytest.approx(min(1.0, step / 1000 / (gpus * batch / rate)))
    fed = trainer.gpus_fed(rate, batch, step)
    assert trainer.utilization(rate, batch, step, max(fed, 1)) >= 0.9 - 1e-6 or fed == 0
    assert trainer.utilization(rate, batch, step, fed + 1) < 0.9 + 1e-6  # one more GPU falls below the bar


@given(
    rate=st.floats(1.0, 1e5), batch=st.integers(1, 256), step=st.floats(1.0, 2000.0), gpus=st.integers(1, 16),
    convert=st.floats(0.0, 1.0), cores=st.integers(1, 128), cpu=st.one_of(st.none(), st.floats(0.0, 0.1)),
)  # fmt: skip
def test_lerobot_trains_loop_converting_each_batch_never_feeds_a_gpu_more_than_the_loading_alone(
    rate, batch, step, gpus, convert, cores, cpu
):
    """The conversion before each step only lengthens it: AU in lerobot-train's loop is at most the loading's own,
    falls as the conversion grows, and equals it with no conversion where the loading left the cores idle."""
    au = trainer.lerobot_train_au(rate, batch, step, gpus, convert, cores, cpu)
    assert 0 < au <= trainer.utilization(rate, batch, step, gpus) + 1e-9
    assert trainer.lerobot_train_au(rate, batch, step, gpus, convert + 0.05, cores, cpu) <= au + 1e-9
    assert au <= step / 1000 / (step / 1000 + convert) + 1e-9  # the conversion comes before every step
    # a wait measured with the step held adds to each step: AU falls, and never below step / (step + convert + wait)
    waited = trainer.lerobot_train_au(rate, batch, step, gpus, convert, cores, cpu, wait_s=0.02)
    assert waited <= au + 1e-9 and waited <= step / 1000 / (step / 1000 + convert + 0.02) + 1e-9
    if cpu is not None and gpus * batch * cpu <= cores * gpus * batch / rate:  # loading held no more than the cores
        assert trainer.lerobot_train_au(rate, batch, step, gpus, 0.0, cores, cpu) == pytest.approx(
            trainer.utilization(rate, batch, step, gpus)
        )


def test_a_batch_turned_to_float_on_a_core_takes_longer_the_more_it_holds():
    small, large = trainer.float_batch_s(4, 3 * 64 * 64), trainer.float_batch_s(16, 2 * 3 * 480 * 640)
    assert 0 < small < large


def test_a_node_that_delivers_nothing_feeds_no_gpu_and_a_hub_id_is_read_from_the_hub(tmp_path, monkeypatch):
    assert trainer.utilization(0.0, 8, 80) == 0 and trainer.gpus_fed(float("nan"), 8, 80) == 0
    # 400 samples/s, batches of 8 every 80 ms: one GPU takes 100 samples/s, so 3 GPUs at >= 90% (4 at exactly 100%)
    assert trainer.gpus_fed(400, 8, 80) == 4 and trainer.gpus_fed(350, 8, 80) == 3
    assert trainer.dataset_url("lerobot/pusht") == "hf://datasets/lerobot/pusht"
    assert trainer.dataset_url("lerobot/pusht@v3.0") == "hf://datasets/lerobot/pusht@v3.0"
    assert trainer.dataset_url("s3://b/d") == "s3://b/d" and trainer.dataset_url("/data/d") == "/data/d"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "org" / "name").mkdir(parents=True)
    assert trainer.dataset_url("org/name") == "org/name"  # a local directory of that name wins
    assert 0 < trainer.default_memory_gb() < 4096


def test_lerobots_best_comes_as_lerobot_train_flags_and_what_has_no_flag_is_named():
    c = {"batch_size": 8, "policy": "act"}
    local = lerobot_train_command(Candidate("lerobot_map", {"num_workers": 2}), c, "/data/set")
    assert local == ("lerobot-train --dataset.repo_id=local/dataset --dataset.root=/data/set --policy.type=act "
                     "--batch_size=8 --num_workers=2")  # fmt: skip
    hub = lerobot_train_command(Candidate("lerobot_stream", {"num_workers": 1, "buffer_size": 4000}), c,
                                "hf://datasets/org/name@v3.0")  # fmt: skip
    assert hub.startswith("lerobot-train --dataset.repo_id=org/name --policy.type=act --batch_size=8 --num_workers=1 "
                          "--dataset.streaming=true")  # fmt: skip
    assert "{'buffer_size': 4000}: not lerobot-train flags" in hub


def test_the_window_rule_gives_observations_actions_and_rewards_their_own_offsets():
    cfg = {"observation_delta_indices": [-1, 0], "action_delta_indices": [0, 1, 2], "reward_delta_indices": None}
    feats = ["observation.state", "observation.images.front", "action", "next.reward", "timestamp"]
    got = trainer.windows_from_indices(cfg, feats, 10)
    assert got == {"observation.state": [-0.1, 0.0], "observation.images.front": [-0.1, 0.0], "action": [0, 0.1, 0.2]}
    assert trainer.windows_from_indices({"action_delta_indices": None}, feats, 10) is None


@pytest.mark.parametrize("convert_ms, says", [(197.0, True), (20.0, False)])
def test_the_answer_states_the_au_in_lerobot_trains_loop_and_when_its_conversion_outlasts_the_step(convert_ms, says):
    from dlbench.cli.tune import answer_screen

    w = {"loader": "dlbench_stream", "settings": {"num_workers": 2}, "frames_per_s_node": 184.0, "predicted": False,
         "peak_pss_mb": 1871.0, "shuffle_effective_batch": 1.17, "shuffle_effective_window": 1.05, "au": 0.46,
         "au_measured": 0.46, "au_bound": 0.58, "gpus_fed": 0, "code": "dataset = ...",
         "lerobot_swap": "factory.X = ...", "lerobot_flags": "--batch_size=16", "au_lerobot_train": 0.29,
         "lerobot_train_convert_ms": convert_ms}  # fmt: skip
    screen = answer_screen({"winner": w, "constraints": {"step_ms": 80.0, "gpus": 1}, "lerobot_best": {}})
    assert "AU 46% on 1 GPU(s), measured with the step held (its free-running rate's bound 58%)" in screen
    assert "falls short of 90%; it keeps 0 GPU(s)" in screen
    assert "in lerobot-train's loop (the swap below): AU 29%" in screen and f"({convert_ms:,.0f} ms of a" in screen
    assert ("takes longer than the step" in screen) == says
    assert "AU 29% by the model" in screen
    w |= {"au_lerobot_train_steps": 60, "au_lerobot_train_model": 0.35}  # run there: the model's beside
    screen = answer_screen({"winner": w, "constraints": {"step_ms": 80.0, "gpus": 1}, "lerobot_best": {}})
    assert "AU 29% measured there over 60 steps (the model: 35%)" in screen


@given(au=st.floats(0.01, 1.0), step=st.floats(1.0, 2000.0), gpus=st.integers(1, 16))
def test_a_wait_per_step_and_the_gpus_a_held_run_shows_fed_follow_from_its_au(au, step, gpus):
    wait = trainer.wait_per_step_s(au, step)
    assert step / 1000 / (step / 1000 + wait) == pytest.approx(au)  # AU = step / (step + wait)
    fed = trainer.gpus_at_step(au, gpus)
    assert fed == gpus if au >= trainer.AU_TARGET else 0 <= fed < gpus
    assert fed * trainer.AU_TARGET <= au * gpus + 1e-9 or au >= trainer.AU_TARGET  # what it delivered feeds them


def _cands(fps: list[float]) -> list[Candidate]:
    """Candidates cheapest first (their index is their worker count), each with its free-running frames/s."""
    return [Candidate("dlbench_stream", {"num_workers": i}, measured={"frames_per_s_node": f}) for i, f in
            enumerate(fps)]  # fmt: skip


@given(held=st.lists(st.floats(0.3, 1.0), min_size=1, max_size=6), fps=st.data())
def test_at_the_step_the_answer_is_the_cheapest_that_keeps_90_percent_measured_so(held, fps):
    """Runs with the step held go cheapest, then fastest, then those between until one keeps 90%: the answer is
    then the cheapest run that kept it; none cheaper was left unrun where the fastest held it; where the fastest
    fell short, nothing slower is run and the answer is the best measured."""
    rates = fps.draw(st.lists(st.floats(100, 1000), min_size=len(held), max_size=len(held)))
    could = _cands(rates)
    au = {c.key: a for c, a in zip(could, held)}
    ran = []

    def confirm(c):
        ran.append(c.key)
        return {"au_measured": au[c.key]}

    got = _at_step(could, None, confirm, deadline=float("inf"), note=print)
    assert ran[0] == could[0].key and len(set(ran)) == len(ran) == len(got)
    answer = _held_order(could, got)[0]
    keeps = [c for c in could if c.key in got and au[c.key] >= trainer.AU_TARGET]
    if keeps:
        assert answer is keeps[0]
        top = max(could[1:], key=lambda c: c.measured["frames_per_s_node"]) if len(could) > 1 else could[0]
        if au[top.key] >= trainer.AU_TARGET:  # every cheaper one was tried: the answer is the cheapest that holds
            cheaper = could[: could.index(answer)]
            assert all(c.key in got and au[c.key] < trainer.AU_TARGET for c in cheaper)
    else:
        assert au[answer.key] == max(au[k] for k in got) and len(got) <= 2


def test_a_budget_spent_after_the_fastest_is_one_note_naming_every_run_left_out(monkeypatch):
    """The cheapest falls short, the fastest holds the target and takes 10 s, so the two between would end past the
    deadline: neither runs, and one note names both (not a note per candidate)."""
    clock = {"now": 0.0}
    could = _cands([300.0, 400.0, 500.0, 900.0])

    def confirm(c):
        fastest = c is could[3]
        clock["now"] += 10.0 if fastest else 1.0
        return {"au_measured": 0.95 if fastest else 0.5}

    monkeypatch.setattr("dlbench.tune.run.time", SimpleNamespace(perf_counter=lambda: clock["now"]))
    notes = []
    got = _at_step(could, None, confirm, deadline=15.0, note=notes.append)
    assert list(got) == [could[0].key, could[3].key]
    assert notes == [f"time budget spent: {could[1].key}, {could[2].key} not run with the step held"]


def test_at_the_step_a_spent_budget_stops_after_one_run_and_none_that_could_runs_the_fastest():
    could = _cands([300.0, 900.0, 500.0])
    notes = []
    got = _at_step(could, None, lambda c: {"au_measured": 0.5}, deadline=0.0, note=notes.append)
    assert list(got) == [could[0].key] and notes == [f"time budget spent: {could[1].key} not run with the step held"]
    fastest = _cands([700.0])[0]
    assert list(_at_step([], fastest, lambda c: {"au_measured": 0.7}, float("inf"), print)) == [fastest.key]
    assert _at_step([], None, lambda c: {}, float("inf"), print) == {}
    # a run that gave no wait is not an answer at the step: the order stays the proofs'
    assert _held_order(could, {could[1].key: {"au_measured": None}}) == could
