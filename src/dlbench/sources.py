"""Data sources: where a benchmark reads the v3.0 dataset from. All I/O goes through fsspec, so every loader runs
the same code for every source; a source only decides the URL and the fsspec settings.

Source specs (config.yaml `sources:`); a remote source holds each dataset under its name:
    {type: local}                                     each dataset where it lives (or where it was converted)
    {type: s3, url: s3://bucket/prefix, endpoint_url: http://host:port}   any S3-compatible store: URL/<dataset>
    {type: http, url: https://host/path}              a server that answers range requests: URL/<dataset>
    {type: bucket, bucket: owner/name, prefix: path}  hf://buckets/owner/name/path/<dataset> (HF storage buckets);
                                                      with `loopback: {...}` a bucket of the loopback Hub, shaped
                                                      by a proxy of its own when latency_ms/bandwidth_mbps are set
    {type: hub, loopback: {}}                         the loopback Hub the workflow starts: hf://datasets/dlbench/
                                                      <dataset>@v3.0, read by dlbench's and LeRobot's loaders alike
A dataset on the Hub is a dataset, not a source: datasets: {name: {v30: hf://datasets/org/name@revision}}.
Optional keys: `stage: true` (upload the converted dataset there first), `loopback: {latency_ms, bandwidth_mbps}`
(serve it from the S3 server the workflow starts, shaped like remote storage; jobs find its address in
results/sources/loopback.json), `require_warm: true` (gate on the prewarm check),
`data_files_root: URL` (data/ and videos/ live there, meta/ at the source), `on_unreachable: skip|error`,
`max_requests_per_s: N` (each rank's pace, with backoff on 429/503; plain-HTTP endpoints, `bench.remote`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import fsspec

from . import atomic
from .errors import UserError

LOOPBACK_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "dlbench",
    "AWS_SECRET_ACCESS_KEY": "dlbench",
    "AWS_DEFAULT_REGION": "us-east-1",
}


_REMOTE_KEYS = {
    "type",
    "stage",
    "require_warm",
    "on_cold",
    "on_unreachable",
    "prewarm",
    "data_files_root",
    "max_requests_per_s",
}
KEYS = {  # the keys each kind of source uses; any other is a mistake, never silently ignored
    "local": {"type", "data_files_root"},
    "s3": _REMOTE_KEYS | {"url", "endpoint_url", "loopback"},
    "http": _REMOTE_KEYS - {"stage"} | {"url"},
    "bucket": _REMOTE_KEYS | {"bucket", "prefix", "loopback"},  # loopback: a bucket of the loopback Hub
    "hub": {"type", "stage", "loopback", "on_unreachable", "max_requests_per_s"},  # the loopback Hub
}
_KEY_HINTS = {  # why a key does not belong to a kind, where users most often try it
    "local": " (it reads each dataset where it lives; to benchmark your own dataset, add it under datasets:, e.g. "
    "datasets: {mine: {v30: /data/my_dataset}})",
    "hub": " (it is the loopback Hub the workflow starts; a repo on the real Hub is a dataset: datasets: {NAME: {v30: "
    "hf://datasets/ORG/NAME@REVISION}}, read with source: local)",
}


@dataclass(frozen=True)
class Source:
    """One place benchmarks read datasets from: config.yaml's `sources:` entry (`spec`, as a run spec's
    `source_spec` carries it) with everything the config checks, the matrix, the workflow's input functions and the
    loaders ask of it. Nothing outside this class branches on the `type` string."""

    spec: dict
    name: str = "source"

    @classmethod
    def of(cls, spec: dict | Source | None, name: str = "source") -> Source:
        """A source from its config entry (None: local, where each dataset lives)."""
        return spec if isinstance(spec, Source) else cls(dict(spec or {"type": "local"}), name)

    # ------------------------------------------------------------------------------------------- what it is
    @property
    def kind(self) -> str:
        return self.spec["type"]

    @property
    def remote(self) -> bool:
        return self.kind != "local"

    @property
    def stages(self) -> bool:
        """Datasets are uploaded here (under their names) before they are read."""
        return bool(self.spec.get("stage"))

    @property
    def loopback(self) -> dict | None:
        """The `loopback:` settings of a source served by the servers the workflow starts, else None."""
        return self.spec.get("loopback")

    @property
    def shaped(self) -> bool:
        """Served on loopback through a proxy that adds latency or caps bandwidth."""
        lb = self.loopback or {}
        return bool(lb.get("latency_ms") or lb.get("bandwidth_mbps"))

    @property
    def proxy(self) -> tuple[int, float, float] | None:
        """(port, latency_ms, bandwidth_mbps) of its shaping proxy, or None."""
        lb = self.loopback
        return (lb["port"], lb.get("latency_ms", 0), lb.get("bandwidth_mbps", 0)) if self.shaped else None

    @property
    def on_loopback_hub(self) -> bool:
        """Served by the loopback Hub (a hub source, or a bucket with `loopback:`)."""
        return self.kind in ("hub", "bucket") and self.loopback is not None

    @property
    def on_loopback_s3(self) -> bool:
        """Served by the workflow's S3 server (SeaweedFS)."""
        return self.kind == "s3" and self.loopback is not None

    @property
    def gated(self) -> bool:
        """Runs wait for its prewarm check to say warm."""
        return bool(self.spec.get("require_warm"))

    @property
    def on_unreachable(self) -> str:
        return self.spec.get("on_unreachable", "error") if self.remote else "error"

    @property
    def on_cold(self) -> str:
        return self.spec.get("on_cold", "error")

    @property
    def serves_lance(self) -> bool:
        """lance_map can read a Lance copy here (Lance's hf:// client reaches huggingface.co only, and it has no
        HTTP reader)."""
        return self.kind in ("local", "s3")

    # ------------------------------------------------------------------------------------------- its checks
    def check_keys(self) -> None:
        """Every key is one this kind of source uses (checked before the schema, whose message would be vaguer)."""
        allowed = KEYS[self.kind]
        for key in self.spec:
            if key not in allowed:
                raise UserError(
                    f"sources.{self.name}.{key}: a {self.kind} source does not use {key}"
                    f"{_KEY_HINTS.get(self.kind, '')}; its keys: {', '.join(sorted(allowed))}"
                )

    def check(self) -> None:
        """What the schema cannot say of one validated entry; `UserError` naming `sources.<name>` otherwise."""
        lb = self.loopback
        if self.shaped and not lb.get("port"):
            raise UserError(f"sources.{self.name}.loopback: a shaped source needs a port")
        if self.kind in ("s3", "http") and not self.spec.get("url"):
            raise UserError(f"sources.{self.name}: type {self.kind} needs a url")
        if self.kind == "bucket" and not self.spec.get("bucket"):
            raise UserError(f"sources.{self.name}: type bucket needs bucket: OWNER/NAME")
        if self.kind == "hub" and (lb is None or self.shaped or not self.stages):
            raise UserError(
                f"sources.{self.name}: type hub is the loopback Hub: give it `loopback: {{}}` (unshaped) and "
                f"`stage: true`; a dataset on the real Hub is a dataset (v30: hf://datasets/ORG/NAME@REV) read with "
                f"source: local"
            )

    # --------------------------------------------------------------------------------------- where datasets are
    def base_url(self) -> str:
        """The URL under which a remote source holds datasets by name."""
        if self.kind in ("s3", "http"):
            return self.spec["url"].rstrip("/")
        if self.kind == "bucket":
            return f"hf://buckets/{self.spec['bucket']}/{self.spec.get('prefix', '')}".rstrip("/")
        raise UserError(f"sources.{self.name}: a {self.kind} source has no base URL")

    def dataset_url(self, dataset: str, where_it_lives: str) -> str:
        """Where a run reads `dataset` (at `where_it_lives` on local disk or a URL): local reads it there, a remote
        source under its name."""
        if self.kind == "local":
            return where_it_lives
        if self.kind == "hub":  # the tag LeRobot looks for; the loopback Hub serves one tree under every revision
            from .loopback import HUB_ORG

            return f"hf://datasets/{HUB_ORG}/{dataset}@v3.0"
        return f"{self.base_url()}/{dataset}"

    def lance_url(self, dataset: str) -> str:
        """Where lance_map reads the dataset's Lance copy: made under results/, staged beside the v3.0 form."""
        if self.kind == "local":
            return f"results/datasets/{dataset}/lance"
        if self.serves_lance:
            return f"{self.base_url()}/{dataset}-lance"
        raise UserError(
            f"sources.{self.name}: loader lance_map reads local disk or S3 sources only (Lance's hf:// client reaches "
            f"huggingface.co only; it has no HTTP reader); use source: local or an s3 source"
        )

    def data_files_root(self, dataset: str) -> str | None:
        """Where `data_files_root` puts this dataset's data/ and videos/ (None: under the dataset's root)."""
        root = self.spec.get("data_files_root")
        return f"{root.rstrip('/')}/{dataset}" if root else None

    # ---------------------------------------------------------------------------------- how clients reach it
    def endpoint_url(self) -> str | None:
        """The S3 endpoint: its `endpoint_url`, or for a loopback source the running server's address."""
        if self.spec.get("endpoint_url") or self.loopback is None:
            return self.spec.get("endpoint_url")
        from .loopback import endpoint

        return endpoint(self.loopback)

    def hub_endpoint(self) -> str | None:
        """The Hub a `hub` or `bucket` source is read from (HF_ENDPOINT): the loopback Hub, or for a shaped
        loopback bucket its shaping proxy; None for a real bucket (the environment's HF_ENDPOINT, else
        huggingface.co)."""
        if self.spec.get("hf_endpoint"):
            return self.spec["hf_endpoint"]
        if not self.on_loopback_hub:
            return None
        from .loopback import address, hub_address

        return address(self.loopback["port"]) if self.shaped else hub_address()

    def fsspec_env(self) -> dict[str, str]:
        """Environment for jobs reading this source: fsspec picks FSSPEC_<PROTOCOL>_<KWARG> up as defaults; Hub
        clients read HF_ENDPOINT."""
        env = {}
        if self.kind == "s3" and (url := self.endpoint_url()):
            env["FSSPEC_S3_ENDPOINT_URL"] = url
        if url := self.hub_endpoint():
            env.update(HF_ENDPOINT=url, HF_HUB_DISABLE_TELEMETRY="1")
        if self.loopback is not None:  # the local test server accepts any key
            env.update({k: os.environ.get(k, v) for k, v in LOOPBACK_CREDENTIALS.items()})
        return env

    def endpoint_option(self) -> str | None:
        """The `--endpoint-url` value that gives a command this source's settings: its S3 endpoint, or
        `loopback[:PORT]` for the workflow's own S3 server (through its shaping proxy on PORT), whose address is
        known only at run time (`loopback-hub[:PORT]` for the loopback Hub)."""
        if self.on_loopback_hub:
            return f"loopback-hub:{self.loopback['port']}" if self.shaped else "loopback-hub"
        if self.kind == "bucket":
            return None  # a real bucket: HF_ENDPOINT and HF_TOKEN from the environment
        if self.loopback is not None and not self.spec.get("endpoint_url"):
            return f"loopback:{self.loopback['port']}" if self.shaped else "loopback"
        return self.spec.get("endpoint_url")

    @classmethod
    def from_endpoint_option(cls, text: str | None) -> Source | None:
        """The source an `--endpoint-url` value stands for (`endpoint_option`'s inverse), resolved now."""
        if not text:
            return None
        if text == "loopback-hub":
            return cls({"type": "hub", "loopback": {}})
        if text.startswith("loopback-hub:"):  # a loopback bucket behind its shaping proxy on PORT
            port = text.partition(":")[2]
            if not port.isdigit():
                raise UserError(f"--endpoint-url {text}: expected loopback-hub or loopback-hub:PORT (the proxy's port)")
            from .loopback import address

            return cls({"type": "bucket", "hf_endpoint": address(int(port))})
        if text == "loopback" or text.startswith("loopback:"):
            port = text.partition(":")[2]
            if port and not port.isdigit():
                raise UserError(f"--endpoint-url {text}: expected loopback or loopback:PORT (the shaping proxy's port)")
            from .loopback import address

            return cls({"type": "s3", "endpoint_url": address(int(port) if port else None), "loopback": {}})
        if "://" not in text:
            raise UserError(f"--endpoint-url {text}: expected a URL such as http://host:9000, or loopback[:PORT]")
        return cls({"type": "s3", "endpoint_url": text})


def endpoint_option(spec: dict) -> str | None:
    """`Source.endpoint_option` of a config entry."""
    return Source.of(spec).endpoint_option()


def spec_from_endpoint(text: str | None) -> dict | None:
    """The source entry an `--endpoint-url` value stands for (`Source.from_endpoint_option`)."""
    source = Source.from_endpoint_option(text)
    return source.spec if source else None


def apply_env(spec: dict | Source | None) -> None:
    """Set the source's fsspec settings in this process and its children (a run spec's `source_spec`, or what the
    CLI's `--endpoint-url` stands for)."""
    if not spec:
        return
    env = Source.of(spec).fsspec_env()
    os.environ.update(env)  # children (ranks) read it when they import fsspec
    if "FSSPEC_S3_ENDPOINT_URL" in env:  # this process imported fsspec already
        fsspec.config.conf.setdefault("s3", {})["endpoint_url"] = env["FSSPEC_S3_ENDPOINT_URL"]
    if "HF_ENDPOINT" in env:
        point_hub_clients(env["HF_ENDPOINT"])


def point_hub_clients(endpoint: str) -> None:
    """Send this process's Hub clients, and the processes it starts, to `endpoint` (HF_ENDPOINT): huggingface_hub
    reads the variable once, at import, so where it is imported already its constants change too; HfFileSystem
    instances are cached by their arguments, so fsspec's defaults for hf:// name the endpoint."""
    import sys

    os.environ["HF_ENDPOINT"] = endpoint
    fsspec.config.conf.setdefault("hf", {})["endpoint"] = endpoint
    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None:
        constants.ENDPOINT = endpoint
        constants.HUGGINGFACE_CO_URL_TEMPLATE = endpoint + "/{repo_id}/resolve/{revision}/{filename}"
    datasets_config = sys.modules.get("datasets.config")
    if datasets_config is not None:  # `datasets` resolves hf:// data files against its own copy (LeRobot's stream)
        datasets_config.HF_ENDPOINT = endpoint


def _friendly(url: str, e: Exception) -> UserError:
    text = str(e) or type(e).__name__
    if isinstance(e, PermissionError) or "credential" in text.lower() or "AccessDenied" in text:
        return UserError(
            f"{url}: access denied or no credentials ({text}); set AWS_ACCESS_KEY_ID and "
            f"AWS_SECRET_ACCESS_KEY (or HF_TOKEN for hf://) for this source"
        )
    if isinstance(e, FileNotFoundError) or "NoSuchBucket" in text:
        return UserError(f"{url}: bucket or path not found; create it, or check the source's url in config.yaml")
    return UserError(f"{url}: unreachable ({text}); check the endpoint and that the server is running")


def stage(local_root: str | Path, url: str, marker: str | Path, callback=None) -> dict:
    """Upload the dataset at `local_root` to `url` (replacing what is there); write `marker` when complete.

    One fsspec `put` of every file (s3fs uploads them concurrently); `callback` is an fsspec Callback told of each
    file done (a progress bar)."""
    local_root = Path(local_root)
    _check_readable(local_root)
    if url.startswith("hf://datasets/"):
        return _stage_to_loopback_hub(local_root, url, marker)
    if url.startswith("hf://buckets/"):
        return _stage_to_bucket(local_root, url, marker)
    _require_endpoint(url)
    try:
        fs, path = fsspec.core.url_to_fs(url)
        bucket = path.split("/", 1)[0]
        if fs.protocol[0] in ("s3", "s3a") and not fs.exists(bucket):
            fs.mkdir(bucket)
        if fs.exists(path):
            fs.rm(path, recursive=True)
        files = sorted(p for p in local_root.rglob("*") if p.is_file())
        remote = [f"{path}/{p.relative_to(local_root).as_posix()}" for p in files]
        fs.put([str(p) for p in files], remote, callback=callback or fsspec.callbacks.DEFAULT_CALLBACK)
    except Exception as e:  # fsspec back-ends raise many types; name the source and what to check
        raise _friendly(url, e) from None
    info = {"url": url, "files": len(files), "bytes": sum(p.stat().st_size for p in files)}
    atomic.write_json(marker, info)
    return info


def _require_endpoint(url: str) -> None:
    """An S3 endpoint that refuses a connection or has no route is said so at once: botocore retries a connection
    error with backoff as it does a throttled request (8.5 s an operation at its defaults, 40 s for a stage)."""
    import socket
    from urllib.parse import urlsplit

    endpoint = fsspec.config.conf.get("s3", {}).get("endpoint_url") or os.environ.get("FSSPEC_S3_ENDPOINT_URL")
    if not url.startswith(("s3://", "s3a://")) or not endpoint:
        return  # AWS's own endpoints
    parts = urlsplit(endpoint)
    try:
        socket.create_connection((parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)), 10).close()
    except OSError as e:
        raise _friendly(url, ConnectionError(f"cannot connect to {endpoint}: {e.strerror or e}")) from None


def _check_readable(local_root: Path) -> None:
    """A v3.0 dataset whose metadata reads (info, tasks, episodes), checked before anything at the target is
    replaced: a wrong or damaged dataset stops with one line naming it, and the source keeps what it holds."""
    from .format import meta, paths

    meta.require_version(str(local_root), paths.V30)
    meta.read_tasks_v30(str(local_root))
    meta.read_episodes_v30(str(local_root), columns=["episode_index"])


def _stage_to_loopback_hub(local_root: Path, url: str, marker: str | Path) -> dict:
    """A dataset "uploaded" to the loopback Hub: its repo directory links to the dataset where it is."""
    from .loopback import HUB_REPOS

    repo = url.removeprefix("hf://datasets/").partition("@")[0].strip("/")
    if os.environ.get("HF_ENDPOINT", "").startswith("https://"):
        raise UserError(f"{url}: staging to a real Hub is not done here; upload with `hf upload --repo-type dataset`")
    link = Path(HUB_REPOS) / repo
    link.parent.mkdir(parents=True, exist_ok=True)
    tmp = link.with_name(link.name + ".tmp")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(local_root.absolute(), target_is_directory=True)
    os.replace(tmp, link)  # atomic: a reader sees the old link or the new one
    files = [p for p in local_root.rglob("*") if p.is_file()]
    info = {"url": url, "files": len(files), "bytes": sum(p.stat().st_size for p in files), "linked": str(link)}
    atomic.write_json(marker, info)
    return info


def _stage_to_bucket(local_root: Path, url: str, marker: str | Path) -> dict:
    """A dataset put into a storage bucket: on the loopback Hub (HF_ENDPOINT http://) its place in the bucket's
    directory links to the dataset where it is; on a real Hub it is uploaded with huggingface_hub's own
    `sync_bucket` (Xet), the bucket created first if missing."""
    from huggingface_hub.utils import parse_hf_uri

    files = [p for p in local_root.rglob("*") if p.is_file()]
    info = {"url": url, "files": len(files), "bytes": sum(p.stat().st_size for p in files)}
    endpoint = os.environ.get("HF_ENDPOINT", "")
    if endpoint.startswith("http://"):
        from .loopback import HUB_BUCKETS

        uri = parse_hf_uri(url)
        link = Path(HUB_BUCKETS, uri.id, uri.path_in_repo)
        link.parent.mkdir(parents=True, exist_ok=True)
        tmp = link.with_name(link.name + ".tmp")
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(local_root.absolute(), target_is_directory=True)
        os.replace(tmp, link)  # atomic: a reader sees the old link or the new one
        info["linked"] = str(link)
    else:
        from huggingface_hub import HfApi

        try:
            api = HfApi()
            api.create_bucket(parse_hf_uri(url).id, exist_ok=True)
            api.sync_bucket(str(local_root), url, delete=True, quiet=True)
        except Exception as e:  # HTTP, auth and Xet errors alike: name the bucket and what to check
            raise _friendly(url, e) from None
    atomic.write_json(marker, info)
    return info


def check_reachable(url: str) -> None:
    """Fail early, with a clear message, if the dataset's info.json cannot be read at `url`."""
    try:
        fs, path = fsspec.core.url_to_fs(url)
        fs.info(f"{path}/meta/info.json")
    except Exception as e:
        raise _friendly(url, e) from None
