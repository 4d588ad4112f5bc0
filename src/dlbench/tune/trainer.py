"""The trainer's terms: what a LeRobot training run asks of its data, and whether its GPUs would wait for it.

- `policy_window`: a policy's `delta_timestamps` on a dataset as LeRobot 0.6.1's `lerobot-train` resolves them:
  the policy's config at its defaults, read in the peer environment (`peer/lerobot_policy.py`), and
  `resolve_delta_timestamps`'s rule applied to this dataset's features and fps here, so that a dataset in a bucket
  or on the Hub resolves as a local one does (`tests/test_tune.py` holds it to LeRobot's own on a local set).
- `train_config`: what a saved `train_config.json` (as `lerobot-train` writes it) says about loading: the batch
  size, workers, episodes, streaming, image transforms, and the policy's windows; read by LeRobot's own
  `TrainPipelineConfig.from_pretrained`.
- Accelerator utilization (AU), MLPerf Storage's and DLIO's measure: the share of its step time a GPU computes
  rather than waits for data. A node whose loading delivers R samples/s, shared by G GPUs that each take a batch of
  B every `step_ms`, hands each GPU a batch every G B / R seconds (its cores are the limit: the loading of G ranks
  shares them), so AU <= min(1, step / (G B / R)): a bound, `gpus_fed` the most G within it at AU >= AU_TARGET.
  Batches come unevenly (a decode run, a new episode), and a DataLoader holds only prefetch_factor of them a worker,
  so with the step held a loader whose mean rate is above the need still leaves the GPU waiting (r480v3, 2 workers:
  485 frames/s free-running, 400 needed at an 80 ms step, AU 81% held): tune states the AU measured with the step
  held, as MLPerf Storage and DLIO measure it, and `gpus_at_step` the GPUs that measurement shows fed.
- In lerobot-train's own loop (`lerobot_train_au`), each rank's main process turns its batch's uint8 frames into
  float32 / 255 on the CPU before its preprocessor moves it to the GPU (lerobot_train.py, LeRobot 0.6.1): that
  conversion (`float_batch_s`, measured here) comes before every step, and it takes the node's cores from loading.
- `default_memory_gb`: the loading's memory budget where none is given, a stated share of this host's RAM (half,
  as tf.data's autotuner takes by default).
"""

from __future__ import annotations

import json
import math
import os
import re
import time

from ..errors import UserError

AU_TARGET = 0.9  # MLPerf Storage's bar: a storage system passes while it keeps accelerators 90% busy
MEMORY_SHARE = 0.5  # of this host's RAM, the loading's budget by default
REWARD, ACTION, OBS_PREFIX = "next.reward", "action", "observation."  # LeRobot's keys (lerobot.utils.constants)
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+(@[\w.-]+)?$")


def dataset_url(dataset: str) -> str:
    """A Hub repo id (ORG/NAME, optionally @REVISION) as the URL dlbench reads (hf://datasets/ORG/NAME@REV); a
    path or URL unchanged. An existing local directory of that name wins."""
    if HUB_ID.match(dataset) and not os.path.exists(dataset):
        return f"hf://datasets/{dataset}"
    return dataset


def _peer_json(*args: str) -> dict:
    """One JSON line from `peer/lerobot_policy.py`; its one-line refusal (an unknown policy type) as a UserError."""
    from ..peer import run_peer

    try:
        out = run_peer("lerobot_policy", *args, timeout=300)
    except UserError as e:
        lines = [ln for ln in str(e).splitlines() if ln.strip() and not ln.startswith(("WARNING", "Traceback"))]
        raise UserError(lines[-1] if lines else str(e)) from None
    return json.loads(out.stdout.strip().splitlines()[-1])


def windows_from_indices(cfg: dict, features, fps: float) -> dict[str, list[float]] | None:
    """`lerobot.datasets.factory.resolve_delta_timestamps` on `features` (names) at `fps`: the reward, the action
    and every observation key get their delta indices over fps; None where none applies."""
    out: dict[str, list[float]] = {}
    for key in features:
        if key == REWARD and cfg.get("reward_delta_indices") is not None:
            out[key] = [i / fps for i in cfg["reward_delta_indices"]]
        if key == ACTION and cfg.get("action_delta_indices") is not None:
            out[key] = [i / fps for i in cfg["action_delta_indices"]]
        if key.startswith(OBS_PREFIX) and cfg.get("observation_delta_indices") is not None:
            out[key] = [i / fps for i in cfg["observation_delta_indices"]]
    return out or None


def policy_window(policy: str, meta) -> tuple[dict | None, dict]:
    """(delta_timestamps, the policy's config as the peer read it) of LeRobot policy type `policy` on `meta`."""
    cfg = _peer_json(policy)
    return windows_from_indices(cfg, meta.features, meta.fps), cfg


def train_config(path: str) -> dict:
    """What `path` (a train_config.json, or the directory holding one) asks of loading: batch_size, num_workers,
    prefetch_factor, persistent_workers, the dataset's repo_id / root / episodes / streaming / image transforms,
    and the policy's type and delta indices."""
    if not os.path.exists(path):
        raise UserError(f"--config-path {path}: not found; give the train_config.json lerobot-train wrote")
    return _peer_json("--config-path", os.path.abspath(path))


def default_memory_gb() -> float:
    """MEMORY_SHARE of this host's RAM (the job's cgroup limit where it is lower), in GB."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
        if limit.isdigit():
            total = min(total, int(limit))
    except OSError:
        pass
    return round(MEMORY_SHARE * total / 2**30, 1)


def utilization(samples_per_s_node: float, batch_size: int, step_ms: float, gpus: int = 1) -> float:
    """AU of `gpus` GPUs of a node that delivers `samples_per_s_node`, each taking a batch every `step_ms`."""
    if not samples_per_s_node or samples_per_s_node != samples_per_s_node:
        return 0.0
    per_batch_s = gpus * batch_size / samples_per_s_node
    return min(1.0, step_ms / 1000.0 / per_batch_s)


def float_batch_s(batch_size: int, bytes_per_sample: int) -> float:
    """Seconds one core of this host takes to turn a batch's uint8 frames (`bytes_per_sample` of them an item) into
    float32 / 255, as lerobot-train's loop does in its main process: the median of 3, on one thread."""
    import torch

    x = torch.zeros(batch_size * bytes_per_sample, dtype=torch.uint8)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        times = []
        for _ in range(3):
            t = time.perf_counter()
            _ = x.to(dtype=torch.float32) / 255.0
            times.append(time.perf_counter() - t)
    finally:
        torch.set_num_threads(threads)
    return sorted(times)[1]


def lerobot_train_au(
    samples_per_s_node: float,
    batch_size: int,
    step_ms: float,
    gpus: int,
    convert_s: float,
    cores: int,
    cpu_s_per_sample: float | None = None,
    wait_s: float = 0.0,
) -> float:
    """AU of `gpus` GPUs of a node in lerobot-train's loop, whose loading delivered `samples_per_s_node` (a proof)
    and each of whose ranks converts its batch (`convert_s` of one core) before its step: a step takes at least
    step + convert_s + `wait_s` (the wait for each batch measured with the step held: a loader's batches come
    unevenly, and the loop, serial, waits for a late one whatever it did meanwhile); G batches take their loading's
    time at the proven rate; and their loading's CPU (`cpu_s_per_sample`, the proof's workers'; None: the proof
    held every core) and G conversions share `cores`."""
    if not samples_per_s_node or samples_per_s_node != samples_per_s_node:
        return 0.0
    step = step_ms / 1000.0
    load = gpus * batch_size / samples_per_s_node
    cpu = (
        cores * load
        if cpu_s_per_sample is None or cpu_s_per_sample != cpu_s_per_sample
        else (gpus * batch_size * cpu_s_per_sample)
    )
    per_step = max(step + convert_s + max(0.0, wait_s), load, (cpu + gpus * convert_s) / cores)
    return min(1.0, step / per_step)


def wait_per_step_s(au: float, step_ms: float) -> float:
    """The wait for data each step at AU `au` and a step of `step_ms`: step x (1 / AU - 1)."""
    return step_ms / 1000.0 * (1.0 / au - 1.0) if au > 0 else float("inf")


def gpus_at_step(au: float, gpus: int, target: float = AU_TARGET) -> int:
    """The GPUs of a node a loader is shown to keep at `target`, from its AU measured with the step of `gpus` held:
    all of them where it held the target (more is its free-running rate's bound, `gpus_fed`, not shown); else as
    many as the batches it delivered there feed at the target (that rate is what it reached under that load)."""
    return gpus if au >= target else max(0, math.floor(au * gpus / target + 1e-9))


def gpus_fed(samples_per_s_node: float, batch_size: int, step_ms: float, target: float = AU_TARGET) -> int:
    """The most GPUs of a node kept at AU >= `target` by its loading's `samples_per_s_node`."""
    if not samples_per_s_node or samples_per_s_node != samples_per_s_node:
        return 0
    return max(0, math.floor(samples_per_s_node * step_ms / 1000.0 / (target * batch_size) + 1e-9))


def au_in_lerobot_train(root: str, swap: str, flags: str, step_ms: float, work, steps: int, warmup: int) -> dict | str:
    """The swap and lerobot-train flags as tune prints them, run in LeRobot 0.6.1's training data path in the peer
    environment (`dlbench.peer.lerobot_training --step-ms`: its factory, sampler and DataLoader; each batch turned
    to float32, then held `step_ms`) for `steps` steps after `warmup` batches: its result ({"au", "steps", ...}),
    or why it did not run (no peer environment; a remote dataset, which the peer run does not read)."""
    from pathlib import Path

    from .. import peer
    from ..format.paths import is_remote

    if peer.peer_python() is None:
        return "no peer environment (make peer)"
    if is_remote(root):
        return "a remote dataset (the peer run reads local ones)"
    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    (work / "swap.py").write_text(swap)
    try:
        peer.run_peer("lerobot_training", str(root), str(work / "au.json"), "--step-ms", f"{step_ms:g}", "--steps",
                      str(steps), "--batches", str(warmup), "--swap", str(work / "swap.py"), "--flags", flags,
                      timeout=900)  # fmt: skip
    except UserError as e:
        return str(e).strip().splitlines()[-1]
    return json.loads((work / "au.json").read_text())
