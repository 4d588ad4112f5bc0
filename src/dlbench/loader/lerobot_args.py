"""LeRobot's constructor arguments that dlbench's loaders take, so that they stand in for LeRobot's classes.

`lerobot.datasets.factory.make_dataset` passes some of them and users pass others. Each is honoured, ignored where
it means nothing to a loader that reads files where they are (the loaders' docstrings say which), or refused here
with a `UserError` that names it and says what to do.
"""

from __future__ import annotations

from ..errors import UserError

DEPTH_UNITS = ("mm", "m")  # LeRobot's depth_output_unit values

# LeRobotDataset's recording arguments (deprecated in its __init__) and their defaults: dlbench's loaders only read
WRITE_DEFAULTS = {
    "batch_encoding_size": 1,
    "rgb_encoder": None,
    "depth_encoder": None,
    "encoder_threads": None,
    "streaming_encoding": False,
    "encoder_queue_maxsize": 30,
}


def check_lerobot_args(*, token=None, depth_output_unit: str = "mm", rng=None, **write_args) -> None:
    """Refuse what dlbench's loaders cannot honour: a token other than None/True, an unknown depth unit, an `rng`,
    or any recording argument (`WRITE_DEFAULTS`) other than its default."""
    if token is not None and token is not True:  # the token itself is never echoed
        raise UserError(
            "token=: dlbench's loaders read the Hub with huggingface_hub's own login; set HF_TOKEN (or run "
            "`hf auth login`) instead of passing a token"
        )
    if depth_output_unit not in DEPTH_UNITS:
        raise UserError(f"depth_output_unit={depth_output_unit!r}: choose one of {list(DEPTH_UNITS)}")
    if rng is not None:
        raise UserError(
            "rng=: dlbench's streaming order is drawn from seed=, the epoch and the shard (so it can be reproduced "
            "and resumed); pass seed= instead"
        )
    for name, value in write_args.items():
        if value != WRITE_DEFAULTS[name]:
            raise UserError(
                f"{name}={value!r}: dlbench's loaders only read datasets; record with LeRobot's "
                f"LeRobotDataset.create() or LeRobotDataset.resume()"
            )
