"""`dlbench lance-convert`: a v3.0 dataset's Lance copy, made by lerobot-lancedb's own converter in the peer
environment and timed, for the lance_map loader."""

from __future__ import annotations

from pathlib import Path

from ..errors import UserError
from .common import command, out_option, say


def add(sub) -> None:
    p = command(
        sub, "lance-convert", help="copy a v3.0 dataset to the Lance layout (lerobot-lancedb's converter, timed)"
    )
    p.add_argument("src", help="the v3.0 dataset: a local path")
    p.add_argument("dst", help="where the Lance copy is written (must not exist)")
    out_option(p, "record", "write the timing (seconds, bytes and files in and out) as JSON here", "--record")
    p.add_argument("--name", default=None, help="dataset name in the record (default: SRC's directory name)")
    p.set_defaults(func=run)


def run(a) -> None:
    from ..format import meta, paths
    from ..peer import lance_convert

    if paths.is_remote(a.src):
        raise UserError(f"{a.src}: lerobot-lancedb's converter reads local datasets only; give a local v3.0 dataset")
    meta.require_version(a.src, paths.V30)
    if Path(a.dst).exists():
        raise UserError(f"{a.dst} exists; remove it to convert again")
    rec = lance_convert(a.src, a.dst, record=a.record, name=a.name)
    say(f"wrote the Lance copy {a.dst} in {rec['seconds']:.1f} s ({rec['output_bytes'] / 1e6:.1f} MB)")
