"""`dlbench stage` and `dlbench prewarm-check`: put a dataset on a remote source, and check that it behaves warm."""

from __future__ import annotations

from .common import ENDPOINT_HELP, command, say


def _prewarm_defaults() -> dict:
    from ..config import schema

    node = schema()["properties"]["sources"]["additionalProperties"]["properties"]["prewarm"]["properties"]
    return {k: v["default"] for k, v in node.items()}


def add(sub) -> None:
    d = _prewarm_defaults()
    p = command(sub, "stage", help="upload a local dataset to a source URL (s3://, ...)")
    p.add_argument("local", help="the local dataset directory")
    p.add_argument("url", help="where to upload it (s3://bucket/prefix/name, ...)")
    p.add_argument("--marker", required=True, help="written when the upload is complete")
    p.add_argument("--endpoint-url", default=None, help=ENDPOINT_HELP)
    p.set_defaults(func=stage)

    p = command(sub, "prewarm-check", help="measure whether a remote source behaves warm")
    p.add_argument("url", help="the dataset on the source (s3://, hf://buckets/..., https://)")
    p.add_argument("--out", required=True, help="the report (JSON)")
    p.add_argument("--files", type=int, default=d["files"], help="files read, spread over the dataset")
    p.add_argument("--range-mb", type=float, default=d["range_mb"], help="bytes per range read (MB)")
    p.add_argument(
        "--ttfb-ms-max", type=float, default=d["ttfb_ms_max"], help="warm: median time to first byte at most this"
    )
    p.add_argument("--mbps-min", type=float, default=d["mbps_min"], help="warm: range-read throughput at least this")
    p.add_argument("--endpoint-url", default=None, help=ENDPOINT_HELP)
    p.set_defaults(func=prewarm_check)


def stage(a) -> None:
    from ..sources import apply_env, spec_from_endpoint, stage

    apply_env(spec_from_endpoint(a.endpoint_url))
    bar = None
    if a.bars:
        from fsspec.callbacks import TqdmCallback

        bar = TqdmCallback(tqdm_kwargs={"desc": "stage", "unit": "file"})
    info = stage(a.local, a.url, a.marker, callback=bar)
    say(f"staged {info['files']} files ({info['bytes'] / 2**20:.1f} MB) to {a.url}")


def prewarm_check(a) -> None:
    from .. import prewarm
    from ..sources import apply_env, spec_from_endpoint

    apply_env(spec_from_endpoint(a.endpoint_url))
    report = prewarm.check(
        a.url, files=a.files, range_mb=a.range_mb, ttfb_p50_ms_max=a.ttfb_ms_max, throughput_mbps_min=a.mbps_min
    )
    prewarm.write(report, a.out)
    say(f"{prewarm.explain(report)} (check took {report['check_seconds']:.1f} s)")
