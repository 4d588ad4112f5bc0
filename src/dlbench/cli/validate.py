"""`dlbench validate`: check a v3.0 dataset's metadata, files and rows, and frames decoded at episode edges; each
problem is one line naming the file or episode (docs/validation.md)."""

from __future__ import annotations

from ..errors import UserError
from .common import command, out_option, say


def add(sub) -> None:
    p = command(
        sub, "validate", help="check a v3.0 dataset (metadata, files, rows, and frames decoded at episode edges)"
    )
    p.add_argument("dataset", help="the dataset root: local path or URL")
    out_option(p, "report", "write the report as JSON here", "--report")
    p.add_argument(
        "--sample-episodes",
        type=int,
        default=0,
        help="check the data files and videos of this many episodes spread over the dataset, decoding their edges "
        "(default: 0, every episode; the metadata and orphan files are always checked whole)",
    )
    p.add_argument(
        "--on-unreachable",
        choices=("error", "skip"),
        default="error",
        help="a URL that cannot be reached: fail, or write a report saying so (default: %(default)s)",
    )
    p.set_defaults(func=run)


def run(a) -> None:
    from .. import atomic
    from ..format.paths import is_remote
    from ..validate import validate

    if a.on_unreachable == "skip" and is_remote(a.dataset):
        from ..sources import check_reachable

        try:
            check_reachable(a.dataset)
        except UserError as e:
            if a.report:
                atomic.write_json(a.report, {"dataset": a.dataset, "ok": False, "reachable": False, "reason": str(e)})
            say(f"{a.dataset}: not reachable, validation skipped: {e}")
            return
    report = validate(a.dataset, sample_episodes=a.sample_episodes, progress=a.bars)
    if a.report:
        atomic.write_json(a.report, report)
    for note in report["notes"]:
        say(f"{a.dataset}: note: {note}")
    say(
        f"{a.dataset}: valid v3.0 ({report['episodes']} episodes, {report['frames']} frames, "
        f"{report['frames_decoded']} edge frames decoded, {report['frames_wrong']} wrong"
        + (f", {report['images_decoded']} stored images decoded)" if report["images_decoded"] else ")")
    )
    if not is_remote(a.dataset) and not report.get("frames_wrong"):
        # what bench runs judge batches against, made here from the local copy: a cold bucket's run then finds it
        from ..bench.checks import reference
        from ..loader.dataset_meta import DatasetMeta

        dmeta = DatasetMeta.load(a.dataset)
        ref = reference.reference(dmeta)
        say(f"{a.dataset}: reference of {ref.n} rows for the effective batch size: {reference.path_of(dmeta)}")
