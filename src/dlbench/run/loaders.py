"""The loaders a run may name, and what a name means: `LoaderName.parse("lerobot_map@old")` is the loader itself
(`base`), the peer environment that runs it (`peer`, config.yaml's `peers:`), and how it reads (`kind`: map or
stream). The registry is the schema's run `loader` enum."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..config import schema

# the loaders, as the schema's run `loader` enum names them: <project>_<kind>, kind map (random access) or stream
LOADERS: tuple[str, ...] = tuple(schema()["definitions"]["loader_name"]["anyOf"][0]["enum"])
DLBENCH_LOADERS = tuple(name for name in LOADERS if name.startswith("dlbench_"))
LEROBOT_LOADERS = tuple(name for name in LOADERS if name.startswith("lerobot_"))
LANCE_LOADERS = tuple(name for name in LOADERS if name.startswith("lance_"))  # lerobot-lancedb's
RAY_LOADERS = tuple(name for name in LOADERS if name.startswith("ray_"))  # Ray Data's read_lerobot
DAFT_LOADERS = tuple(name for name in LOADERS if name.startswith("daft_"))  # Daft's daft.datasets.lerobot
# run in the peer environment (LeRobot, lerobot-lancedb, Ray Data, which decodes through LeRobot, and Daft)
PEER_LOADERS = LEROBOT_LOADERS + LANCE_LOADERS + RAY_LOADERS + DAFT_LOADERS
# loaders that size their own workers from the cores (Ray's tasks, Daft's threads): `num_workers` means nothing to
# them, so a pass of theirs with one DataLoader worker is already a pass with every core busy
OWN_WORKERS = RAY_LOADERS + DAFT_LOADERS
# the package each peer loader imports (the peer environment runs it unless that package is importable here)
PEER_PACKAGE = {**dict.fromkeys(LEROBOT_LOADERS, "lerobot"), **dict.fromkeys(LANCE_LOADERS, "lerobot_lancedb")}
PEER_PACKAGE.update({**dict.fromkeys(RAY_LOADERS, "ray"), **dict.fromkeys(DAFT_LOADERS, "daft")})
# names that are not <project>_<kind>: Ray's and Daft's data frames are iterated in their order
KIND = {"ray_data": "stream", "daft_data": "stream"}
SAME_KIND = "lerobot"  # baseline_loader: each run against LeRobot's loader of its own kind
PEER_SEP = "@"  # lerobot_map@NAME: LeRobot's loader as the environment of `peers.NAME` has it


@dataclass(frozen=True)
class LoaderName:
    """A loader name, parsed: `lerobot_map@old` -> base "lerobot_map", peer "old", kind "map"."""

    base: str  # the loader itself, whichever environment runs it
    peer: str | None  # the named peer environment (`peers.NAME`) that runs it; None: its default one

    @staticmethod
    @lru_cache(maxsize=64)
    def parse(name: str) -> LoaderName:
        base, _, peer = name.partition(PEER_SEP)
        return LoaderName(base, peer or None)

    @property
    def kind(self) -> str:
        """How it reads: "map" (random access) or "stream" (in order)."""
        return KIND.get(self.base) or self.base.split("_", 1)[1]


def baseline_loader(loader: str, baseline: str = SAME_KIND) -> str:
    """The loader a run of `loader` is compared with: `baseline`, or for `lerobot` LeRobot's loader of the same kind
    (lerobot_map for map-style runs, lerobot_stream for streaming ones; those of a named peer too)."""
    return f"lerobot_{LoaderName.parse(loader).kind}" if baseline == SAME_KIND else baseline
