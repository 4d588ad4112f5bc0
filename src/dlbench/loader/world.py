"""This process's place among the ranks of a run (shared by the streaming loader and the bench launcher)."""

from __future__ import annotations

import os

import torch

from ..errors import UserError


def rank_and_world(rank: int | None = None, world_size: int | None = None) -> tuple[int, int]:
    """Explicit arguments, else torch.distributed's (once its process group is initialized), else RANK/WORLD_SIZE,
    else SLURM_PROCID/SLURM_NTASKS, else (0, 1). A `UserError` if the rank is outside the world."""
    if rank is None or world_size is None:
        env = os.environ
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            rank, world_size = torch.distributed.get_rank(), torch.distributed.get_world_size()
        elif "RANK" in env and "WORLD_SIZE" in env:
            rank, world_size = int(env["RANK"]), int(env["WORLD_SIZE"])
        elif "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
            rank, world_size = int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"])
        else:
            rank, world_size = 0, 1
    if not 0 <= rank < world_size:
        raise UserError(f"rank {rank} is outside world size {world_size}")
    return rank, world_size
