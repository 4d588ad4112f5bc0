"""Runs in the peer environment: what LeRobot 0.6.1's training reads off a policy's config.

    python -m dlbench.peer.lerobot_policy TYPE [--root ROOT]
    python -m dlbench.peer.lerobot_policy --config-path TRAIN_CONFIG_JSON

Prints one JSON line: the policy's config at its defaults (`lerobot.policies.factory.make_policy_config(TYPE)`),
as the frame offsets its training windows take (`observation_delta_indices`, `action_delta_indices`,
`reward_delta_indices`) and its `drop_n_last_frames` where it has one; with --root (a local dataset) also
`delta_timestamps` exactly as `lerobot-train` resolves them on it (`lerobot.datasets.factory.
resolve_delta_timestamps`). With --config-path, a train_config.json as lerobot-train writes it, read by LeRobot's
`TrainPipelineConfig.from_pretrained`: its policy (as above) and what it asks of loading. An unknown type exits 2
with one line naming LeRobot's types; an unreadable config, 2 with one line.
"""

import argparse
import json
import sys


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("policy", nargs="?")
    ap.add_argument("--root", default=None)
    ap.add_argument("--config-path", default=None)
    args = ap.parse_args()

    from lerobot.configs.policies import PreTrainedConfig
    from lerobot.policies.factory import make_policy_config

    loading = {}
    if args.config_path:
        from lerobot.configs.train import TrainPipelineConfig

        try:
            train = TrainPipelineConfig.from_pretrained(args.config_path)
        except Exception as e:  # draccus' and the config's own checks: one line for the user
            print(f"--config-path {args.config_path}: not a lerobot-train config ({type(e).__name__}: {e})",
                  file=sys.stderr)  # fmt: skip
            sys.exit(2)
        if train.policy is None:
            print(f"--config-path {args.config_path}: it names no policy", file=sys.stderr)
            sys.exit(2)
        cfg, d = train.policy, train.dataset
        loading = {
            "batch_size": train.batch_size, "num_workers": train.num_workers,
            "prefetch_factor": train.prefetch_factor, "persistent_workers": train.persistent_workers,
            "repo_id": d.repo_id, "root": d.root, "episodes": d.episodes, "streaming": d.streaming,
            "image_transforms": bool(d.image_transforms.enable), "return_uint8": d.return_uint8,
        }  # fmt: skip
        args.policy = cfg.type
    else:
        try:
            cfg = make_policy_config(args.policy)
        except ValueError:
            known = sorted(PreTrainedConfig.get_known_choices())
            print(f"policy type {args.policy!r} is not one of LeRobot's: {', '.join(known)}", file=sys.stderr)
            sys.exit(2)
    indices = lambda v: None if v is None else [int(i) for i in v]  # noqa: E731
    out = {
        **loading,
        "policy": args.policy,
        "observation_delta_indices": indices(cfg.observation_delta_indices),
        "action_delta_indices": indices(cfg.action_delta_indices),
        "reward_delta_indices": indices(cfg.reward_delta_indices),
        "drop_n_last_frames": getattr(cfg, "drop_n_last_frames", None),
    }
    if args.root:
        from lerobot.datasets import LeRobotDatasetMetadata
        from lerobot.datasets.factory import resolve_delta_timestamps

        deltas = resolve_delta_timestamps(cfg, LeRobotDatasetMetadata(repo_id="local/dataset", root=args.root))
        out["delta_timestamps"] = {k: [float(t) for t in v] for k, v in (deltas or {}).items()}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
