"""Runs in the peer environment: LeRobot 0.6.1's training data path, with LeRobot's dataset classes and with dlbench's.

    python -m dlbench.peer.lerobot_training ROOT OUT.pt [--episodes JSON] [--streaming] [--eval-split F]
                                                         [--batches N] [--batch-size B] [--num-workers W]
    python -m dlbench.peer.lerobot_training ROOT OUT.json --step-ms MS --flags "LEROBOT-TRAIN FLAGS" [--swap FILE]
                                                          [--steps N] [--batches N]

For each side, "lerobot" and then "dlbench" (`LeRobotMapDataset` and `LeRobotStreamingDataset` put in place of
`LeRobotDataset` and `StreamingLeRobotDataset` in `lerobot.datasets.factory`, as a user swaps them in), the
datasets come from LeRobot's own factory under a diffusion-policy training config (its observation and action
windows, `drop_n_last_frames`, ImageNet stats for the cameras): `make_dataset`, and with --eval-split
`make_train_eval_datasets`. Then, as `lerobot.scripts.lerobot_train.train` does, a map-style dataset gets an
`EpisodeAwareSampler` over `meta.episodes`, `episodes` and `absolute_to_relative_idx`, and torch's DataLoader with
the training's worker options (spawned workers) yields N batches. OUT (torch.save) holds per side: the batches,
the sampler's frame order, what training reads off the dataset and off its metadata, and the train/eval episodes;
and under "signatures" the parameters of LeRobot's two dataset constructors.

With --step-ms, what `dlbench tune` prints is run as printed: the swap (FILE, Python as tune prints it, executed
before the datasets are made; none: LeRobot's own classes) and the lerobot-train flags it prints (`--policy.type`,
`--batch_size`, `--num_workers`, `--dataset.streaming`; any other is refused), through the same data path, each
batch held MS as a training step holds it (DLIO's emulated compute): after --batches batches, N steps, and OUT
(JSON) gets the accelerator utilization, the steps' time over the steps' time and the waits for a batch.
"""

import argparse
import json
import sys
import time

import torch

META_FIELDS = (
    "fps",
    "features",
    "camera_keys",
    "video_keys",
    "image_keys",
    "depth_keys",
    "robot_type",
    "total_episodes",
    "total_frames",
    "total_tasks",
    "shapes",
    "names",
    "has_language_columns",
    "stats",
)


def meta_view(meta) -> dict:
    """The metadata fields LeRobot's training reads, as plain values (the episodes table column by column)."""
    out = {name: getattr(meta, name) for name in META_FIELDS}
    episodes = meta.episodes
    out["episodes"] = {col: list(episodes[col]) for col in episodes.column_names}
    out["episodes[0]"] = dict(episodes[0])
    out["len(episodes)"] = len(episodes)
    return out


def config(root: str, episodes, streaming: bool, eval_split: float, batch_size: int, num_workers: int):
    from lerobot.configs.default import DatasetConfig
    from lerobot.configs.train import TrainPipelineConfig
    from lerobot.policies.diffusion.configuration_diffusion import DiffusionConfig

    dataset = DatasetConfig(
        repo_id="local/recorded",
        root=root,
        episodes=episodes,
        streaming=streaming,
        eval_split=eval_split,
        video_backend="torchcodec",
    )
    # diffusion: 2 observation steps, 16 action steps (horizon), drop_n_last_frames=7
    policy = DiffusionConfig(device="cpu", push_to_hub=False, horizon=16, n_action_steps=8)
    return TrainPipelineConfig(dataset=dataset, policy=policy, batch_size=batch_size, num_workers=num_workers)


def run_side(cfg, batches: int) -> dict:
    """LeRobot's training data path on whatever classes `lerobot.datasets.factory` names now."""
    out, dataset, loader = training_loader(cfg)
    out["batches"] = []
    for batch in loader:
        to_float(batch, dataset)
        out["batches"].append(batch)
        if len(out["batches"]) == batches:
            break
    return out


def to_float(batch: dict, dataset) -> None:
    """What the training loop does to each batch first."""
    for cam in dataset.meta.camera_keys:
        if cam in batch and batch[cam].dtype == torch.uint8:
            batch[cam] = batch[cam].to(dtype=torch.float32) / 255.0


def held_steps(cfg, warmup: int, steps: int, step_s: float) -> dict:
    """The training data path with each batch held `step_s`: the accelerator utilization over `steps` steps after
    `warmup` batches (the steps' time over it and the waits for the next batch)."""
    _, dataset, loader = training_loader(cfg, keep=False)
    batches, waited, n = iter(loader), 0.0, 0
    for _ in range(warmup):
        to_float(next(batches), dataset)
    while n < steps:
        t0 = time.perf_counter()
        try:
            batch = next(batches)
        except StopIteration:  # an epoch ends: training starts the next (a map-style loader's sampler again)
            batches = iter(loader)
            batch = next(batches)
        to_float(batch, dataset)
        waited += time.perf_counter() - t0
        time.sleep(step_s)
        n += 1
    return {
        "au": steps * step_s / (steps * step_s + waited), "steps": steps, "step_ms": step_s * 1000,
        "wait_s": waited, "dataset_class": f"{type(dataset).__module__}.{type(dataset).__name__}",
        "batch_size": cfg.batch_size, "num_workers": cfg.num_workers, "streaming": cfg.dataset.streaming,
    }  # fmt: skip


def training_loader(cfg, keep: bool = True):
    """LeRobot's training data path: the dataset from its factory, lerobot_train.train's sampler and DataLoader;
    with `keep`, what the comparison reads off them."""
    from lerobot.datasets.factory import make_dataset, make_train_eval_datasets
    from lerobot.datasets.sampler import EpisodeAwareSampler
    from lerobot.scripts.lerobot_train import _dataloader_worker_kwargs

    out: dict = {}
    if keep and cfg.dataset.eval_split > 0:
        train, evaluation = make_train_eval_datasets(cfg)
        out["train_episodes"], out["eval_episodes"] = train.episodes, evaluation.episodes
    dataset = make_dataset(cfg)
    if keep:
        out["dataset"] = {"num_frames": dataset.num_frames, "num_episodes": dataset.num_episodes, "fps": dataset.fps}
        out["meta"] = meta_view(dataset.meta)
    sampler = None
    if not cfg.dataset.streaming:  # lerobot_train.train's sampler, argument for argument
        out.setdefault("dataset", {}).update(
            len=len(dataset),
            episodes=dataset.episodes,
            features=dataset.features,
            absolute_to_relative_idx=dataset.absolute_to_relative_idx,
        )
        sampler = EpisodeAwareSampler(
            dataset.meta.episodes["dataset_from_index"],
            dataset.meta.episodes["dataset_to_index"],
            episode_indices_to_use=dataset.episodes,
            drop_n_last_frames=getattr(cfg.trainable_config, "drop_n_last_frames", 0),
            shuffle=True,
            seed=cfg.seed if cfg.seed is not None else 0,
            absolute_to_relative_idx=dataset.absolute_to_relative_idx,
        )
        out["sampler_indices"] = sampler.indices
    loader = torch.utils.data.DataLoader(
        dataset,
        num_workers=cfg.num_workers,
        batch_size=cfg.batch_size,
        shuffle=False,
        sampler=sampler,
        drop_last=False,
        **_dataloader_worker_kwargs(cfg),
    )
    return out, dataset, loader


def signatures() -> dict[str, list[tuple]]:
    """(name, kind, default) of each parameter of LeRobot's dataset constructors, in order ("<required>": none)."""
    import inspect

    from lerobot.datasets.lerobot_dataset import LeRobotDataset
    from lerobot.datasets.streaming_dataset import StreamingLeRobotDataset

    out = {}
    for cls in (LeRobotDataset, StreamingLeRobotDataset):
        params = list(inspect.signature(cls.__init__).parameters.values())[1:]  # without self
        out[cls.__name__] = [(p.name, p.kind.name, "<required>" if p.default is p.empty else p.default) for p in params]
    return out


FLAGS = {"--policy.type": "policy", "--batch_size": "batch_size", "--num_workers": "num_workers",
         "--dataset.streaming": "streaming"}  # fmt: skip


def parse_flags(flags: str) -> dict:
    """The lerobot-train flags `dlbench tune` prints, as values; a flag it does not print exits 1 naming it."""
    out = {}
    for flag in flags.split("#")[0].split():
        if flag == "lerobot-train" or flag.startswith(("--dataset.repo_id=", "--dataset.root=")):
            continue  # the dataset: ROOT
        name, _, value = flag.partition("=")
        if name not in FLAGS:
            sys.exit(f"lerobot_training: {flag}: not a flag this run takes ({', '.join(FLAGS)})")
        out[FLAGS[name]] = value
    return {
        "policy": out.get("policy", "diffusion"), "batch_size": int(out.get("batch_size", 8)),
        "num_workers": int(out.get("num_workers", 4)), "streaming": out.get("streaming", "false").lower() == "true",
    }  # fmt: skip


def policy_config(name: str):
    """LeRobot's config of policy `name` at its defaults, on the CPU (nothing pushed)."""
    from lerobot.policies.factory import make_policy_config

    return make_policy_config(name, device="cpu", push_to_hub=False)


def held(a) -> None:
    """--step-ms: the printed swap and flags run as printed, each batch held a step (see the module's doc)."""
    from lerobot.configs.default import DatasetConfig
    from lerobot.configs.train import TrainPipelineConfig

    f = parse_flags(a.flags)
    if a.swap:
        with open(a.swap) as fh:
            exec(compile(fh.read(), a.swap, "exec"), {})  # the swap exactly as tune printed it
    dataset = DatasetConfig(repo_id="local/dataset", root=a.root, streaming=f["streaming"], video_backend="torchcodec")
    cfg = TrainPipelineConfig(dataset=dataset, policy=policy_config(f["policy"]), batch_size=f["batch_size"],
                              num_workers=f["num_workers"])  # fmt: skip
    result = {"flags": a.flags, "swap": bool(a.swap), **held_steps(cfg, a.batches, a.steps, a.step_ms / 1000)}
    with open(a.out, "w") as fh:
        json.dump(result, fh)


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="python -m dlbench.peer.lerobot_training", description=__doc__.split("\n")[0])
    p.add_argument("root")
    p.add_argument("out")
    p.add_argument("--episodes", default="null", help="JSON list of episode indices, or null for all")
    p.add_argument("--streaming", action="store_true")
    p.add_argument("--eval-split", type=float, default=0.0)
    p.add_argument("--batches", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--num-workers", type=int, default=1)
    p.add_argument("--step-ms", type=float, default=None, help="hold each batch this long: AU (see above)")
    p.add_argument("--steps", type=int, default=200, help="with --step-ms: the steps measured")
    p.add_argument("--flags", default="", help="with --step-ms: the lerobot-train flags, as tune prints them")
    p.add_argument("--swap", default=None, help="with --step-ms: a file holding the swap, as tune prints it")
    a = p.parse_args(argv)
    if a.step_ms is not None and not (a.step_ms > 0 and a.steps >= 1):
        p.error("--step-ms must be > 0 and --steps >= 1 (the AU is measured over held steps)")
    if a.step_ms is not None:
        held(a)
        return
    cfg = config(a.root, json.loads(a.episodes), a.streaming, a.eval_split, a.batch_size, a.num_workers)

    import lerobot.datasets.factory as factory

    from dlbench.loader import LeRobotMapDataset, LeRobotStreamingDataset

    result = {"signatures": signatures(), "lerobot": run_side(cfg, a.batches)}
    factory.LeRobotDataset, factory.StreamingLeRobotDataset = LeRobotMapDataset, LeRobotStreamingDataset
    result["dlbench"] = run_side(cfg, a.batches)
    torch.save(result, a.out)


if __name__ == "__main__":
    main(sys.argv[1:])
