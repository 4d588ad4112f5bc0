"""`RunSpec`: one benchmark run, as every step sees it.

The workflow expands config.yaml's matrix into RunSpecs (`dlbench.run.matrix`) and writes one per run
(results/specs/...); `dlbench bench-run` reads that file, or builds one from its options (`make_run`); every rank
process runs it (with its own `rank`); the rank records carry it as their `config`. Its fields are the config
schema's run properties (`definitions.run`: validation, descriptions and defaults live there, and a test holds the
two lists equal) followed by what resolving a run adds (`RESOLVED`): where the run reads and how it treats a missing
GPU, a cold or unreachable source. A new run setting is one property in the schema, one field here, and the code that
uses it. `check` holds every rule of a run; `resolve_workers` is the one meaning of `num_workers: auto`. Torch-free.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path

from .. import atomic
from ..config import check_deltas, check_run_values, defaults, schema
from ..errors import UserError
from ..format.paths import is_remote
from .loaders import DAFT_LOADERS, LANCE_LOADERS, LEROBOT_LOADERS, PEER_LOADERS, RAY_LOADERS, LoaderName
from .modes import BUILTIN_MODES

_TYPES = {"integer": int, "number": float, "boolean": bool, "string": str, "array": list}


def _props() -> dict:
    return schema()["definitions"]["run"]["properties"]


def _branches(prop: dict) -> list[dict]:
    """A run property's alternatives (`oneOf`, or the axis definition it refers to), each a plain schema."""

    def resolved(node: dict) -> dict:
        ref = node.get("$ref", "")
        return schema()["definitions"][ref.rsplit("/", 1)[1]] if ref else node

    prop = resolved(prop)
    return [resolved(b) for b in prop.get("oneOf", [prop])]


def is_axis(name: str) -> bool:
    """A run property a scenario may give as a list: the matrix takes every value."""
    return any(b.get("type") == "array" for b in _branches(_props()[name]))


def value_type(name: str) -> type | tuple:
    """The Python type of one value of a run property (an axis: of one of its values)."""
    found = tuple(dict.fromkeys(_TYPES[b["type"]] for b in _branches(_props()[name]) if b.get("type") != "array"))
    return found[0] if len(found) == 1 else found


def choices(name: str) -> list | None:
    """The values a run property allows, where the schema lists them."""
    return next((b["enum"] for b in _branches(_props()[name]) if "enum" in b), None)


def description(name: str) -> str:
    return _props()[name].get("description", "")


# the axes, in the schema's order: a scenario's lists of them expand into runs; with `source`, a run's identity
# (summary.csv's and compare.csv's key)
AXES = tuple(name for name in _props() if is_axis(name))
IDENTITY = tuple(name for name in _props() if name in AXES or name == "source")


def _resolved(default, help_: str | None = None, choices: list | None = None):
    """A field that resolving a run adds to the schema's properties; `help_`: its `dlbench bench-run` option's help
    (None: no option of that name)."""
    return dataclasses.field(default=default, metadata={"resolved": True, "help": help_, "choices": choices})


STREAM_BUFFER = 256  # dlbench_stream's buffer_size default
LEROBOT_STREAM_BUFFER = 1000  # LeRobot 0.6.1's StreamingLeRobotDataset buffer_size default
RAY_LOCAL_BUFFER = 0  # Ray Data's local_shuffle_buffer_size default: None, no shuffle


@dataclass
class RunSpec:
    """One run. First the schema's run properties (`definitions.run` in config.schema.yaml: their types, defaults and
    descriptions are there; `tests/test_runspec.py` checks this list against it), then what resolving a run adds:
    where it reads and how it treats a missing GPU, a cold or an unreachable source."""

    # the matrix's axes (a scenario may list several values of each) and the source: the run's identity
    dataset: str | None = None
    source: str = "local"
    loader: str = "dlbench_map"
    mode: str = "single"
    batch_size: int = 16
    num_workers: int | str = 2  # "auto": `resolve_workers`
    decode_device: str = "cpu"
    step_ms: int = 0
    policy: str | None = None  # its window, resolved in the bench job (`bench.launch`), stands in for `mode`
    step_sd_ms: float | None = None
    # processes and windows
    ranks: int = 1
    nodes: int = 1
    pool_size: int | None = None  # dlbench_stream's own default where unset
    buffer_size: int | None = None  # the loader's own default: `shuffle_buffer`
    read_ahead: int | None = None
    episode_order: str | None = None  # dlbench_stream's own default where unset (`_forward_by_default`)
    pieces: int | None = None
    gop_run: int | None = None
    buffer_mb: float | None = None  # dlbench_stream's own default where unset
    decode_ahead: int | None = None
    max_num_shards: int | None = None
    ray_shuffle: str | None = None  # Ray's own default (none) where unset
    daft_shuffle: str | None = None  # Daft's own default (none) where unset
    concurrency: int | None = None
    override_num_blocks: int | None = None
    read_granularity: str | None = None
    on_unavailable: str = "skip"
    duration_s: float = 15
    repeats: int = 3
    precision: float = 0.0  # >0: the windows stop, after 3 at least, once their median rate is known this closely
    warmup_s: float = 3
    num_batches: int | None = None
    min_batches: int = 48  # batches the windows take at least, together: the effective batch size's figures
    # the loaders' settings and the checks
    decoder_cache_size: int | None = None
    decoder_cache_mb: float | None = None
    remote_block_kb: float | None = None
    fetch_episodes: int = 0
    probe_samples: int = 32
    seed: int = 0
    prefetch_factor: int = 2
    lookahead: bool = True
    in_order: bool = False
    verify: bool = True
    check_frames: int = 32
    resume_check: bool = False
    # resolved from the config (or given by hand)
    root: str | None = _resolved(None, "the v3.0 dataset: local path or URL (s3://, hf://datasets/ORG/NAME@REV)")
    scenario: str = _resolved("adhoc", "scenario name in records")
    run_id: str = _resolved("")
    data_files_root: str | None = _resolved(
        None, "where data/ and videos/ are when not under --root (which then holds meta/)"
    )
    lance_root: str | None = _resolved(
        None, "lance_map: the dataset's Lance copy (dlbench lance-convert): local path or s3://"
    )
    source_spec: dict | None = _resolved(None)  # a remote source's config entry (`dlbench.sources.Source`)
    delta_timestamps: dict | None = _resolved(None)  # a mode of config.yaml's `modes:`; overrides `mode`
    on_unreachable: str = _resolved(
        "error", "a remote dataset that cannot be reached: fail, or write skipped records", ["error", "skip"]
    )
    require_warm: str | None = _resolved(None, "a prewarm report (dlbench prewarm-check) that must say warm")
    on_cold: str = _resolved("error", "a cold prewarm report: stop, or measure anyway", ["error", "warn"])
    num_workers_requested: int | str | None = _resolved(None)  # "auto" when the bench job sized the workers
    # dlbench_stream: pieces and GOP runs planned as for this many DataLoader workers, whatever the DataLoader has (a
    # calibration pass of one worker reads as each worker of the run it stands for; `LeRobotStreamingDataset.plan_for`)
    plan_workers: int | None = _resolved(None)
    rank: int = _resolved(0)  # this process's rank: 0 in the spec file, each rank process sets its own

    @property
    def world_size(self) -> int:
        return self.ranks

    @property
    def ranks_per_node(self) -> int:
        """The most ranks one node holds (srun's block distribution fills nodes in order)."""
        return -(-self.ranks // max(self.nodes, 1))

    @property
    def shuffle_buffer(self) -> int:
        """The stream's shuffle buffer in items: `buffer_size`, else the loader's own default (LeRobot's is 1000;
        a baseline shuffles as its users' does)."""
        if self.buffer_size is not None:
            return self.buffer_size
        own = {"lerobot_stream": LEROBOT_STREAM_BUFFER, "ray_data": RAY_LOCAL_BUFFER}
        return own.get(self.loader_name.base, STREAM_BUFFER)

    @property
    def loader_name(self) -> LoaderName:
        """`loader` parsed once: the loader itself, the peer environment that runs it, how it reads."""
        return LoaderName.parse(self.loader)

    @classmethod
    def from_dict(cls, values: dict, where: str = "run spec") -> RunSpec:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise UserError(f"{where} has unknown key(s) {unknown}; rebuild it with this version of dlbench")
        return cls(**values)

    def to_dict(self) -> dict:
        """The spec file's content: every field but the process's rank."""
        out = dataclasses.asdict(self)
        del out["rank"]
        return out

    def record(self) -> dict:
        """What a rank record carries as its `config`."""
        return dataclasses.asdict(self)

    def with_id(self) -> RunSpec:
        return dataclasses.replace(self, run_id=run_id(self))

    def check(self, where: str, label=None) -> None:
        """Every rule of this run, in one place (see `check`)."""
        check(self, where, label)


# the fields resolving a run adds: (name, help of its bench-run option, or None: no option)
RESOLVED = tuple((f.name, f.metadata["help"]) for f in dataclasses.fields(RunSpec) if f.metadata.get("resolved"))
RESOLVED_CHOICES = {
    f.name: f.metadata["choices"] for f in dataclasses.fields(RunSpec) if f.metadata.get("choices") is not None
}

# how the axes read in a run id, in this order (`run_id`)
ID_ALWAYS = {"dataset": "", "loader": "", "mode": "", "batch_size": "b", "num_workers": "w"}
ID_SHORT = {"step_ms": "s"}  # any other axis reads <short or its name><value>, and only off its default
ID_LAST = "decode_device"  # last: the workflow sends `-cuda` runs to their own rule


def run_id(run, axes: tuple[str, ...] = AXES) -> str:
    """`<dataset>-<loader>-<mode>-b<batch>-w<workers>[-s<step ms>][-<axis><value>...]-<decode device>`: every axis
    a scenario can list shows in the id (those beyond `ID_ALWAYS` only off their schema default, so an axis added
    later leaves existing ids as they were), so no two runs of a scenario share one. `run`: a RunSpec or a dict."""
    r = run if isinstance(run, dict) else dataclasses.asdict(run)
    parts = [f"{prefix}{r[name]}" for name, prefix in ID_ALWAYS.items()]
    schema_defaults = defaults("bench", "defaults")
    for name in axes:
        if name in ID_ALWAYS or name == ID_LAST or r.get(name) in (None, schema_defaults.get(name)):
            continue
        value = str(r[name]).replace("/", "_").replace(" ", "")
        parts.append(f"{ID_SHORT.get(name, name)}{value}")
    return "-".join([*parts, str(r[ID_LAST])])


# ----------------------------------------------------------------------------------------- the rules of a run
MIN_WINDOWS = 3  # with `precision`, the fewest windows a run measures: the fewest whose spread says anything


def windows_s(run: dict | RunSpec) -> float:
    """How long a run's windows last as planned: `repeats` of `duration_s`, or with `precision` the MIN_WINDOWS it
    stops after where they agree (a noisier run measures more, up to `repeats`)."""
    get = run.get if isinstance(run, dict) else lambda k: getattr(run, k)
    repeats = get("repeats") or 1
    if get("precision"):
        repeats = min(repeats, MIN_WINDOWS)
    return (get("duration_s") or 0) * repeats


def check(run: RunSpec, where: str, label=None) -> None:
    """Check every rule of one resolved run: the workflow calls it for each run of the matrix when it is parsed
    (`snakemake -n` finds every mistake), `make_run` and `dlbench bench-run` for a run given by hand.

    The schema's run definition gives each value's type, bounds and choices; the rules below tie values together
    (what each loader can do). Raises `UserError`: one line naming the key, as `label(key)` writes it (default
    `<where>.<key>`), and what to do."""
    label = label or (lambda key: f"{where}.{key}")
    check_run_values(dataclasses.asdict(run), label)
    _check_mode(run, label)
    _check_lerobot(run, where)
    _check_lance(run, where)
    _check_ray(run, where)
    _check_daft(run, where)
    _check_dlbench_only(run, label)
    if run.step_sd_ms and not run.step_ms:
        raise UserError(f"{label('step_sd_ms')}: a step's spread needs its mean; give step_ms > 0 or unset it")
    if run.nodes > run.ranks:
        raise UserError(
            f"{where}: nodes ({run.nodes}) must not exceed ranks ({run.ranks}): every node runs at least one rank"
        )


def _check_mode(run: RunSpec, label) -> None:
    """The mode is built in, or comes with its delta_timestamps (config.yaml's `modes:`, or --delta-timestamps);
    a policy's window stands in for both."""
    if run.policy and (run.mode != "single" or run.delta_timestamps is not None):
        raise UserError(
            f"{label('policy')}: give a policy or a mode ({run.mode}), not both: the policy's config decides the window"
        )
    if run.delta_timestamps is not None:
        check_deltas(run.delta_timestamps, label("delta_timestamps"))
    elif run.mode not in BUILTIN_MODES:
        raise UserError(
            f"{label('mode')}: {run.mode!r} is neither single nor sarm; give its delta_timestamps "
            f"(--delta-timestamps FILE: seconds per feature key)"
        )


def lerobot_reads(loader: str, root: str) -> bool:
    """Whether LeRobot 0.6.1's `loader` reads the dataset at `root`: local paths and Hub repos; storage buckets too
    for its stream (which splits by rank with datasets' split_dataset_by_node: bench.adapters.lerobot_buckets)."""
    root = str(root)
    bucket = loader == "lerobot_stream" and root.startswith("hf://buckets/")
    return not is_remote(root) or root.startswith("hf://datasets/") or bucket


def _check_lerobot(run: RunSpec, where: str) -> None:
    """What LeRobot 0.6.1's loaders cannot do: decode on a GPU, read other stores (buckets: the stream only), read
    data files apart from the metadata."""
    loader = run.loader_name.base
    if loader not in LEROBOT_LOADERS:
        return
    if run.decode_device != "cpu":
        raise UserError(
            f"{where}: loader {loader} decodes on the CPU only (LeRobot 0.6.1); use "
            f"decode_device: cpu, or loader dlbench_map / dlbench_stream for cuda"
        )
    root = str(run.root)
    if not lerobot_reads(loader, root):
        raise UserError(
            f"{where}: loader {loader} reads local datasets and Hub repos only (lerobot_stream also hf://buckets), "
            f"not {root}; use dlbench_map or dlbench_stream there"
        )
    if run.data_files_root:
        raise UserError(
            f"{where}: loader {loader} reads data files under its root only; data_files_root needs a dlbench loader"
        )


def _check_lance(run: RunSpec, where: str) -> None:
    """What lance_map (lerobot-lancedb's LanceDBDataset) cannot do: decode on a GPU, read hf:// (Lance's own Hub
    client reaches huggingface.co only) or plain HTTP, read data files apart from its copy."""
    if run.loader_name.base not in LANCE_LOADERS:
        return
    if run.decode_device != "cpu":
        raise UserError(f"{where}: loader lance_map decodes on the CPU only; use decode_device: cpu")
    if not run.lance_root:
        raise UserError(
            f"{where}: loader lance_map reads the dataset's Lance copy: give lance_root (--lance-root PATH_OR_URL), "
            f"made by `dlbench lance-convert {run.root} OUT`"
        )
    lance = str(run.lance_root)
    if is_remote(lance) and not lance.startswith("s3://"):
        raise UserError(
            f"{where}: loader lance_map reads Lance copies on local disk or S3 only, not {lance}; use source: local "
            f"or an s3 source"
        )
    if run.data_files_root:
        raise UserError(f"{where}: loader lance_map reads its Lance copy only; data_files_root needs a dlbench loader")


def _check_ray(run: RunSpec, where: str) -> None:
    """What ray_data (Ray Data's read_lerobot) cannot do here: decode on a GPU (its reader takes num_gpus for its
    tasks, not a decode device), read plain HTTP or the Hub's buckets (it reads local paths and fsspec URLs), read
    data files apart from the metadata."""
    if run.loader_name.base not in RAY_LOADERS:
        return
    if run.decode_device != "cpu":
        raise UserError(f"{where}: loader ray_data decodes on the CPU only; use decode_device: cpu")
    root = str(run.root)
    if is_remote(root) and not root.startswith(("s3://", "hf://datasets/")):
        raise UserError(
            f"{where}: loader ray_data reads local datasets, S3 and Hub repos here, not {root}; use source: local, "
            f"an s3 source or hub"
        )
    if run.data_files_root:
        raise UserError(f"{where}: loader ray_data reads data files under its root only; data_files_root needs a "
                        f"dlbench loader")  # fmt: skip


def _check_daft(run: RunSpec, where: str) -> None:
    """What daft_data (Daft 0.7.26's daft.datasets.lerobot) cannot do here: a GPU; remote sources other than S3 (its
    S3 client reads through the rank's metering proxy, `daft_data.io_config`; its hf:// client has
    https://huggingface.co built in, with no endpoint setting in `HuggingFaceConfig` nor HF_ENDPOINT read, so a Hub
    server of one's own, the loopback one included, cannot be read)."""
    if run.loader_name.base not in DAFT_LOADERS:
        return
    if run.decode_device != "cpu":
        raise UserError(f"{where}: loader daft_data decodes on the CPU only; use decode_device: cpu")
    if (is_remote(str(run.root)) and not str(run.root).startswith("s3://")) or run.data_files_root:
        raise UserError(
            f"{where}: loader daft_data reads local and S3 datasets here (Daft 0.7.26 reads hf:// from huggingface.co "
            f"only, no other Hub endpoint); use source: local or an s3 one"
        )


# settings only dlbench's loaders have (LeRobot's would ignore them, measuring something else than asked)
DLBENCH_ONLY = ("decoder_cache_size", "decoder_cache_mb", "remote_block_kb")
# dlbench_stream alone fetches ahead, resumes from a state and decodes blocks of rows
STREAM_ONLY = ("fetch_episodes", "resume_check", "read_ahead", "episode_order", "pieces", "gop_run", "decode_ahead")
RAY_ONLY = ("ray_shuffle", "concurrency", "override_num_blocks", "read_granularity")  # Ray Data's own knobs


def _check_dlbench_only(run: RunSpec, label) -> None:
    """Settings a run's loader does not have are refused rather than silently ignored."""
    loader = run.loader_name.base
    for key in STREAM_ONLY:
        if getattr(run, key) and loader != "dlbench_stream":
            raise UserError(
                f"{label(key)}: applies to loader dlbench_stream only, not {loader}; turn it off for this run "
                f"(set it only where the loader is dlbench_stream)"
            )
    for key in RAY_ONLY:
        if getattr(run, key) is not None and loader != "ray_data":
            raise UserError(f"{label(key)}: applies to loader ray_data only, not {loader}; leave it unset")
    if run.daft_shuffle is not None and loader != "daft_data":
        raise UserError(f"{label('daft_shuffle')}: applies to loader daft_data only, not {loader}; leave it unset")
    if run.max_num_shards is not None and loader != "lerobot_stream":
        raise UserError(
            f"{label('max_num_shards')}: applies to loader lerobot_stream only, not {loader}; leave it unset"
        )
    for key in DLBENCH_ONLY:
        if getattr(run, key) is not None and loader in PEER_LOADERS:
            raise UserError(
                f"{label(key)}: applies to dlbench_map and dlbench_stream only, not {loader}; leave it unset for "
                f"this run"
            )


# ------------------------------------------------------------------------------------------ runs by hand, files
def make_run(values: dict, scenario: str = "adhoc", label=None) -> RunSpec:
    """A run by hand (the CLI, the library): the schema's run defaults under `values`, which needs `root`; checked
    by `check` (`label` names a key in its messages, e.g. as a command-line option)."""
    values = {k: v for k, v in values.items() if v is not None}
    if not values.get("root"):
        raise UserError("a run needs the dataset's root (--root PATH_OR_URL)")
    values.setdefault("dataset", Path(str(values["root"]).rstrip("/").split("@")[0]).name or "dataset")
    values["scenario"] = values.get("scenario") or scenario
    run = RunSpec.from_dict(values).with_id()
    check(run, f"run {run.run_id}", label=label)
    return run


def resolve_workers(num_workers: int | str, ranks_here: int = 1) -> int:
    """`auto`: one worker per core this job may use, shared by the ranks on this host (a worker decodes every
    camera of its items in turn, so dividing by cameras would leave cores idle)."""
    if num_workers != "auto":
        return int(num_workers)
    cores = int(os.environ.get("SLURM_CPUS_PER_TASK", 0)) * ranks_here or len(os.sched_getaffinity(0))
    return max(1, cores // max(1, ranks_here))


def write(run: RunSpec, path: str | Path) -> None:
    atomic.write_json(path, run.to_dict())


def read(path: str | Path) -> RunSpec:
    try:
        values = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise UserError(
            f"{path}: run spec not found; build it with the workflow (results/specs/...) or pass the "
            f"run's options instead"
        ) from None
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: not a valid run spec ({e}); delete it and rerun") from None
    return RunSpec.from_dict(values, where=str(path))
