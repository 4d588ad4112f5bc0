"""The dataset's reference: what a batch's features are judged against (`checks.effective`).

A uniform random sample of the dataset's rows (`REFERENCE_ITEMS`, or every row of a smaller dataset), read with
dlbench's map-style loader once per dataset and kept in a cache file, gives per feature group (`item_features`:
pixels, numeric) the dataset's mean and spread, and its leading principal components over the standardized
features (those that hold `VAR_SHARE` of the variance, at most one per `ITEMS_PER_COMPONENT` items, so each is
well estimated). A batch's mean, standardized and projected on those components whitened, has unit variance per
component for one item drawn from the dataset; `effective` measures how far batch means stray from that.

The cache (DLBENCH_CACHE, else ~/.cache/dlbench) is keyed by what makes the reference: the dataset's info, its
episodes' extents, the cameras and this module's version; a staged copy of a dataset at another source shares its
local copy's reference (the workflow builds it from the local copy, `dlbench validate`, so a cold bucket is not
read to make it). Writes are atomic and locked: ranks that start together build it once.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ... import atomic, barcode
from .effective import BARCODE_MARGIN_PX, item_features

REFERENCE_ITEMS = 1024  # rows sampled: the correction 1 / n is 0.1 of a uniform batch of 16 over ten batches' 1/160
VAR_SHARE = 0.9  # the leading components kept hold this share of the standardized features' variance
ITEMS_PER_COMPONENT = 16
VERSION = 3  # of the features and the sample: a change makes new cache files
READ_BATCH = 32


@dataclass
class Group:
    mu: np.ndarray  # (D,) the dataset's mean per feature
    sd: np.ndarray  # (D,) its spread (0: a feature that does not vary, left out)
    basis: np.ndarray  # (k, D) leading components over the standardized features, each over its own spread
    keys: list  # the features' keys in the order of D, with each key's width: [[key, width], ...]


@dataclass
class Reference:
    """The dataset's reference (module docstring)."""

    n: int  # rows sampled
    population: int  # rows of the dataset
    groups: dict[str, Group]
    barcode_px: dict[str, int]  # per camera, the synthetic barcode's square left out of the thumbnails (0: none)

    @property
    def correction(self) -> float:
        """The variance of the reference's own mean on a whitened component (without replacement)."""
        if self.n >= self.population or self.n < 2:
            return 0.0
        return (self.population - self.n) / (self.population - 1) / self.n

    def project(self, feats: dict[str, dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        """Per group, (B, k) the items' features standardized and projected on the whitened components; a group
        whose keys or widths differ from the reference's is left out (a loader that returns other features)."""
        out = {}
        for name, g in self.groups.items():
            have = feats.get(name, {})
            if any(k not in have or have[k].shape[1] != width for k, width in g.keys):
                continue
            x = np.concatenate([have[k] for k, _ in g.keys], axis=1)
            varying = g.sd > 0
            z = (x[:, varying] - g.mu[varying]) / g.sd[varying]
            out[name] = z @ g.basis[:, varying].T
        return out


def fit(features: dict[str, dict[str, np.ndarray]], population: int, barcode_px: dict[str, int]) -> Reference:
    """The reference from the sampled rows' features (`item_features` of them, by group and key)."""
    groups, n = {}, 0
    for name, by_key in features.items():
        keys = [[k, int(v.shape[1])] for k, v in by_key.items()]
        x = np.concatenate(list(by_key.values()), axis=1)
        n = x.shape[0]
        mu, sd = x.mean(axis=0), x.std(axis=0, ddof=1) if n > 1 else np.zeros(x.shape[1])
        sd = np.where(sd > 1e-6 * max(1.0, float(np.abs(mu).max(initial=0.0))), sd, 0.0)
        varying = sd > 0
        if n < 4 or not varying.any():
            continue
        z = (x[:, varying] - mu[varying]) / sd[varying]
        _, s, vt = np.linalg.svd(z, full_matrices=False)
        var = s**2 / (n - 1)
        share = np.cumsum(var) / var.sum()
        k = int(min(np.searchsorted(share, VAR_SHARE) + 1, max(1, n // ITEMS_PER_COMPONENT), len(var)))
        keep = var[:k] > 1e-12
        basis = np.zeros((int(keep.sum()), x.shape[1]))
        basis[:, varying] = vt[:k][keep] / np.sqrt(var[:k][keep])[:, None]
        groups[name] = Group(mu, sd, basis, keys)
    return Reference(n, population, groups, barcode_px)


def barcode_squares(dmeta) -> dict[str, int]:
    """Per camera, the side of the synthetic barcode's square (with its margin); {} on other datasets."""
    from ...validate import is_synthetic

    if not is_synthetic(dmeta.info):
        return {}
    out = {}
    for cam in dmeta.cameras:
        shape = dmeta.info["features"][cam]["shape"]
        h, w = int(shape[0]), int(shape[1])
        try:
            out[cam] = barcode.GRID * barcode.cell_px(h, w) + BARCODE_MARGIN_PX
        except ValueError:
            out[cam] = 0
    return out


def sample_rows(population: int, n: int = REFERENCE_ITEMS, seed: int = 0) -> np.ndarray:
    """The sorted rows sampled: uniform without replacement, or every row where the dataset is no larger."""
    if population <= n:
        return np.arange(population, dtype=np.int64)
    return np.sort(np.random.default_rng(seed).choice(population, n, replace=False)).astype(np.int64)


def build(dmeta, n: int = REFERENCE_ITEMS) -> Reference:
    """Read the sampled rows with dlbench's map-style loader (single frames, every camera) and fit the reference."""
    import torch

    from ...loader.map import LeRobotMapDataset

    ds = LeRobotMapDataset(root=dmeta.root, cameras=list(dmeta.cameras), return_uint8=True, meta=dmeta)
    squares = barcode_squares(dmeta)
    parts: dict[str, dict[str, list]] = {}
    rows = sample_rows(len(ds), n)
    for start in range(0, len(rows), READ_BATCH):
        items = ds.__getitems__(rows[start : start + READ_BATCH].tolist())
        batch = {k: torch.stack([it[k] for it in items]) for k, v in items[0].items() if isinstance(v, torch.Tensor)}
        for group, by_key in item_features(batch, None, squares).items():
            for key, x in by_key.items():
                parts.setdefault(group, {}).setdefault(key, []).append(x)
    features = {g: {k: np.concatenate(v) for k, v in by_key.items()} for g, by_key in parts.items()}
    return fit(features, len(ds), squares)


def cache_key(dmeta) -> str:
    """What makes the reference: the dataset's info and episodes, its cameras, this module's version."""
    h = hashlib.sha256()
    h.update(json.dumps(dmeta.info, sort_keys=True, default=str).encode())
    h.update(np.asarray(dmeta.ep_from, "<i8").tobytes() + np.asarray(dmeta.ep_to, "<i8").tobytes())
    h.update(json.dumps([sorted(dmeta.cameras), VERSION, REFERENCE_ITEMS]).encode())
    return h.hexdigest()[:24]


def cache_dir() -> Path:
    return Path(os.environ.get("DLBENCH_CACHE") or Path.home() / ".cache" / "dlbench") / "reference"


def save(ref: Reference, path: Path) -> None:
    arrays = {"meta": np.frombuffer(json.dumps({"n": ref.n, "population": ref.population,
                                                "barcode_px": ref.barcode_px,
                                                "keys": {g: v.keys for g, v in ref.groups.items()}}).encode(),
                                    np.uint8)}  # fmt: skip
    for g, v in ref.groups.items():
        arrays.update({f"{g}.mu": v.mu, f"{g}.sd": v.sd, f"{g}.basis": v.basis})
    with atomic.file(path) as tmp:
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)


def load(path: Path) -> Reference:
    with np.load(path) as z:
        meta = json.loads(bytes(z["meta"]).decode())
        groups = {g: Group(z[f"{g}.mu"], z[f"{g}.sd"], z[f"{g}.basis"], keys) for g, keys in meta["keys"].items()}
    return Reference(meta["n"], meta["population"], groups, meta["barcode_px"])


def path_of(dmeta, directory: Path | None = None) -> Path:
    """Where the dataset's reference is kept."""
    return (directory or cache_dir()) / f"{cache_key(dmeta)}.npz"


def reference(dmeta, directory: Path | None = None) -> Reference:
    """The dataset's reference from the cache, built (once, under a lock) where the cache lacks it."""
    directory = directory or cache_dir()
    path = path_of(dmeta, directory)
    if path.exists():
        try:
            return load(path)
        except (OSError, ValueError, KeyError):
            pass  # a damaged cache file is rebuilt
    atomic.make_dir(directory)
    with open(directory / f"{path.stem}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.exists():
            try:
                return load(path)
            except (OSError, ValueError, KeyError):
                pass
        ref = build(dmeta)
        save(ref, path)
        return ref
