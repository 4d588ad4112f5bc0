"""`dlbench advise`: for each verified run, where its time went, the bound that holds it, and the changes that would
lift it, ranked by the gain the model predicts (`dlbench.model`), or measured where the matrix ran the change
(a re-encoded variant of the dataset). A run within 10% of what its cores allow is said to be at its bound, with
nothing prescribed. Shuffle weighs as much as speed: a run whose batches shuffle below the floor gets the change
that restores it first, and a faster loader is prescribed only where it shuffles as well, or the line says what it
gives up. results/advice.md; docs/model.md#advice.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..config import defaults
from ..model.calibration import Calibration
from ..model.table import predict_run
from ..report.aggregate import SHUFFLE_MEASURES, shuffle_gap, shuffle_low, shuffle_shortfall
from ..run.loaders import LoaderName
from ..run.spec import LEROBOT_STREAM_BUFFER as LEROBOT_BUFFER

RAY_BUFFER = 256  # the local shuffle buffer first prescribed to ray_data (rows), dlbench_stream's own default

AT_BOUND = 0.9  # measured at or above this share of the cores' rate: at the hardware's bound
CACHE_MISSING = 0.5  # a decoder cache that finds fewer of its lookups open than this is too small for the run
WAITING_SHARE = 0.2  # workers waiting on storage this share of their time may outnumber the cores
FETCH_EPISODES = 2  # episodes fetched ahead, as prescribed: one decoding while the next arrives
WAITING_WORKERS = 4  # workers per core considered where workers wait on storage (WAITING_SHARE of their time)
MEMORY_SHARE = 0.8  # a run whose processes hold more of the host's RAM than this is told what fits
WORTH = 1.1  # a change is prescribed when it is predicted to give at least this many times the frames/s
DECODE_SHARE = 0.5  # a map-style run whose workers decode this share of their time is probed for a re-encoding
REENCODABLE = ("dlbench_map", "lerobot_map")  # map-style loaders that read a re-encoded v3.0 dataset as it is
# data files smaller than this are not prescribed: each costs LeRobot's stream an open and a parquet footer, and a
# set whose data is a few MB (the default's 0.2 MB) loads whole in any worker (LeRobot's converter writes 100 MB)
MIN_DATA_FILE_MB = 1.0
CONVERT_KEYS = {"data_file_size_in_mb"}  # prescriptions of config.yaml's convert section, not of a scenario
RUN_KEYS = ("loader", "mode", "batch_size", "num_workers", "decode_device", "step_ms", "ranks", "nodes")


@dataclass(frozen=True)
class Prescription:
    change: dict  # config keys of the scenario and their new values
    frames_per_s_node: float  # predicted (or measured, `measured`) with the change
    gain: float  # that over the run's measured frames/s
    measured: bool = False
    why: str = ""
    shuffle: bool = False  # restores shuffle (the run's batches fell below the floor) rather than adding speed
    reencode: dict | None = None  # a variant the matrix never ran: its `reencode:` entry (from, codec, gop, ...)


def _run(row: dict, spec: dict | None = None) -> dict:
    """The run spec values the model reads, from a summary row (its runs checked their frames) and its spec, where
    known (`fetch_episodes`, the warm-up and windows over which opening reads spread)."""
    run = {k: row.get(k) for k in RUN_KEYS}
    run["num_workers"] = _workers(row["num_workers"])
    run["step_ms"] = 0 if pd.isna(run.get("step_ms")) else run["step_ms"]
    timing = {k: (spec or {}).get(k) for k in ("warmup_s", "duration_s", "repeats", "precision")}
    return {**run, **timing, "verify": True, "fetch_episodes": _int((spec or {}).get("fetch_episodes"), 0)}


def waiting_share(cost) -> float:
    """The share of a calibrated worker's time per sample spent waiting on storage (0 where not calibrated)."""
    if cost is None or cost.worker_s <= 0:
        return 0.0
    return max(0.0, 1.0 - cost.worker_cpu_s / cost.worker_s)


def hosts(row: dict) -> int:
    """The hosts a run's ranks ran on (summary.csv's `nodes_used`; the configured nodes where not recorded): as
    predictions.csv counts them, so that advice and predictions agree for runs of several nodes."""
    used = row.get("nodes_used")
    return max(_int(row.get("nodes") if used is None or pd.isna(used) else used, 1), 1)


def per_host_ranks(row: dict) -> int:
    """A host's share of the run's ranks (the ranks its cores are shared by)."""
    return -(-max(_int(row.get("ranks"), 1), 1) // hosts(row))


def _workers(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return value  # "auto"


def cores_rate(row: dict, cal: Calibration) -> float | None:
    """Frames/s per node every core of the calibrated host gives this loader and mode (the hardware's bound)."""
    cost = cal.cost(row["loader"], row["mode"])
    if cost is None:
        return None
    return cal.cores / cost.cpu_s(cal.cores) * cost.frames_per_sample


def spent_rate(row: dict, cal: Calibration) -> float | None:
    """Frames/s per node every core gives at the CPU per sample this run spent: every process of its host (workers,
    main process, storage servers, the host's other ranks) per sample of one rank, over the ranks a host holds.
    None where the run did not record the host's CPU."""
    parts = [row.get(k) for k in ("worker_cpu_ms_per_sample", "main_cpu_ms_per_sample", "other_cpu_ms_per_sample")]
    if parts[2] is None or pd.isna(parts[2]) or pd.isna(parts[1]):
        return None
    spent = sum(0.0 if pd.isna(v) else v for v in parts) / per_host_ranks(row) / 1000
    samples = row.get("samples_per_s_node")
    if spent <= 0 or not samples or pd.isna(samples):
        return None
    return cal.cores / spent * row["frames_per_s_node"] / samples


def bound_rate(row: dict, cal: Calibration) -> float | None:
    """The cores' rate a measured run is judged against: at the lesser CPU per sample of the run's own (where
    recorded) and the calibration's. The machine drifts between the two, and a bound the run beats is no bound; a
    run that spent more may have shared its host with other work, which is not its loader's cost."""
    return max((r for r in (spent_rate(row, cal), cores_rate(row, cal)) if r), default=None)


def prescribe(
    row: dict, cal: Calibration, variants: list[dict] = (), spec: dict | None = None, peers: dict | None = None
) -> list[Prescription]:
    """Up to three changes for one run, best first: the worker count (never past the cores its ranks share), another
    loader of the same access (`peers`: loader -> (frames/s, run id) the matrix measured with this run's settings;
    else predicted from the calibration), a re-encoded variant the matrix measured (`variants`: summary rows of the
    same settings on such a dataset), the loader's own decoder cache where the run's (`spec`: its run spec) missed."""
    peers = peers or {}
    measured = row["frames_per_s_node"]
    run = _run(row, spec)
    on = hosts(row)
    restore = restore_shuffle(row, spec or {}, cal.episodes)  # first: a run below the floor does not pass
    found: list[Prescription] = [] if restore is None else [restore]
    now = predict_run(run, cal, hosts=on)
    if isinstance(now, str) or not now.frames_per_s_node:
        return found
    scale = measured / now.frames_per_s_node  # the model's miss on this run, carried to its what-ifs
    size = (spec or {}).get("decoder_cache_size")
    hits = row.get("cache_hit_rate")
    if size and pd.notna(hits) and hits < CACHE_MISSING and now.frames_per_s_node >= WORTH * measured:
        # the calibration ran with the loader's default cache: its prediction is this run without the small cache
        why = (f"its cache of {size} decoder(s) found {hits:.0%} of lookups open; the calibration, with the "
               f"loader's default, measured the rate")  # fmt: skip
        fps = now.frames_per_s_node
        found.append(Prescription({"decoder_cache_size": None}, fps, fps / measured, why=why))
        scale = 1.0  # the model's figures are this run's without the miss: its other what-ifs too

    fetch = _fetch_ahead(row, spec or {}, measured, bound_rate(row, cal))
    if fetch is not None:
        found.append(fetch)
    per_rank = max(1, cal.cores // per_host_ranks(row))  # the cores of a host over the ranks it holds
    # workers that wait on storage hold no core while they wait: past the cores, as many as overlap the waits
    waits = waiting_share(cal.cost(row["loader"], row["mode"]))
    most = per_rank * (WAITING_WORKERS if waits >= WAITING_SHARE else 1)
    options = sorted({0, 1, 2, 4, 8, 16, 32, 64, per_rank, most} & set(range(most + 1)))
    predicted = {w: predict_run({**run, "num_workers": w}, cal, hosts=on) for w in options}
    rates = {w: p.frames_per_s_node * scale for w, p in predicted.items() if not isinstance(p, str)}
    best = max(rates.values())
    w = min(k for k, v in rates.items() if v >= 0.98 * best)  # the fewest workers within 2% of the best
    if w != run["num_workers"] and rates[w] >= WORTH * measured:
        why = f"the model, over {min(rates)} to {per_rank} workers (the cores a rank has)"
        if most > per_rank:
            why = (f"the model, over {min(rates)} to {most} workers: a worker waits on storage {waits:.0%} of its "
                   f"time, holding no core")  # fmt: skip
        found.append(Prescription({"num_workers": w}, rates[w], rates[w] / measured, why=why))
    calibrated = {c.loader for c in cal.costs if c.mode == row["mode"]}
    for other in sorted((calibrated | set(peers)) - {row["loader"]}):
        if (
            LoaderName.parse(other).kind != LoaderName.parse(row["loader"]).kind
        ):  # loaders of the same access: random (map) or in order (stream)
            continue
        if other in peers:  # the matrix ran it with these settings: what it measured, its shuffle too
            fps, run_id, seen = peers[other]
            why = f"measured with these settings: run {run_id}"
            if shuffle_shortfall(seen, floor_of(row)):
                continue  # it would not pass: a faster loader that does not shuffle has not won
            if lost := shuffle_gap(seen, row):
                why += f"; its batches' shuffle differs: {lost} (this run)"
        else:
            alt = {**run, "loader": other}
            alts = [predict_run({**alt, "num_workers": k}, cal, hosts=on) for k in options]
            fps = max(p.frames_per_s_node for p in alts if not isinstance(p, str)) * scale
            why = "the model, at that loader's best worker count; its shuffle is not measured here: verify it"
        if fps >= WORTH * measured:
            found.append(Prescription({"loader": other}, fps, fps / measured, measured=other in peers, why=why))
    for v in variants:
        fps = v["frames_per_s_node"]
        if fps >= WORTH * measured:
            why = f"re-encoded: {v['bytes_vs_source']:.2f}x the bytes at {v['psnr_db']:.1f} dB PSNR; run {v['run_id']}"
            found.append(Prescription({"dataset": v["dataset"]}, fps, fps / measured, measured=True, why=why))
    if not variants and (probed := _probed_reencoding(row, cal, spec or {}, run, scale, on)) is not None:
        found.append(probed)
    if (files := _lerobot_data_files(row, cal, spec or {}, run, scale, on)) is not None:
        found.append(files)
    return sorted(found, key=lambda p: (not p.shuffle, -p.gain))[:3]


_PROBES: dict[str, list] = {}  # dataset root -> its encoding probes (one probe a dataset per advice)


def _probed_reencoding(row: dict, cal: Calibration, spec: dict, run: dict, scale: float, on: int):
    """A map-style run whose workers spend most of their time decoding, on a dataset the matrix has no re-encoding
    of: a few seconds of its video re-encoded at candidate settings (`encoding.probe`) say what a random frame would
    cost; the calibrated worker's decode share shrinks by that ratio, and the model predicts the run with it."""
    from dataclasses import replace

    from ..encoding import probe
    from ..errors import UserError
    from ..format.paths import is_remote

    item, decode = row.get("worker_item_ms_per_sample"), row.get("worker_decode_ms_per_sample")
    cost = cal.cost(row["loader"], row["mode"])
    if (
        LoaderName.parse(row["loader"]).base not in REENCODABLE
        or not spec.get("root")
        or is_remote(spec["root"])  # its server may be gone, its credentials this process's no more: local only
        or cost is None
        or not (pd.notna(item) and pd.notna(decode) and item > 0 and decode / item >= DECODE_SHARE)
    ):
        return None
    try:
        if spec["root"] not in _PROBES:  # once a dataset: every run of it asks
            _PROBES[spec["root"]] = probe.probe(spec["root"])
    except UserError:
        return None  # a video the probe cannot read: validate names it
    probes = _PROBES[spec["root"]]
    choice = probe.best(probes)
    if choice is None:
        return None
    enc, ratio, size, psnr = choice
    # the part of a worker's item that the encoding sets: what the probe measured a random frame of the source to
    # cost, for each frame of a sample, against the worker's item time (the decoders' own timers leave out the seeks
    # and demuxing around them: on HEVC GOP 60 they counted 91% where re-encoding removed 92% of the item)
    mine = [p for p in probes if p.encoding == enc]
    source_ms = sum(p.source_ms_per_frame for p in mine) / len(mine)  # a camera's random frame
    share = min(1.0, max(decode, cost.frames_per_sample * source_ms) / item)
    saved = cost.worker_cpu_s * share * (1.0 - ratio)  # the worker's decoding, per sample
    p = predict_run(run, replace(cal, costs=[cost.lighter(saved)]), hosts=on)
    if isinstance(p, str) or p.frames_per_s_node * scale < WORTH * row["frames_per_s_node"]:
        return None
    fps = p.frames_per_s_node * scale
    entry = {"from": row["dataset"], "codec": enc.codec, "gop": enc.gop, "crf": enc.crf, "fast_decode": enc.fast_decode}
    name = f"{row['dataset']}_{enc.codec}g{enc.gop}"
    why = (f"probed, not measured: {probe.CLIP_S:g} s of its video re-encoded to {enc.label()} decode a random frame "
           f"in {ratio:.0%} of the time, at {size:.2f}x the bytes and {psnr:.1f} dB PSNR; under datasets: "
           f"`{name}: {{reencode: {yaml_map(entry)}}}`")  # fmt: skip
    return Prescription({"dataset": name}, fps, fps / row["frames_per_s_node"], why=why, reencode=entry)


def _lerobot_data_files(row: dict, cal: Calibration, spec: dict, run: dict, scale: float, on: int):
    """LeRobot's stream, in its own terms: it gives each worker whole data files, so with fewer data files than a
    rank's workers some idle; data files of at most total / (workers x ranks) MB (`convert: data_file_size_in_mb`,
    the dataset converted again) give each worker one. Predicted with that many files; `--verify` cannot run it
    without the conversion."""
    from dataclasses import replace

    from ..format.paths import is_remote

    if LoaderName.parse(row["loader"]).base != "lerobot_stream" or not spec.get("root") or is_remote(spec["root"]):
        return None
    workers = run["num_workers"] if isinstance(run["num_workers"], int) else cal.cores // per_host_ranks(row)
    needed = max(workers, 1) * max(_int(row.get("ranks"), 1), 1)
    if cal.data_files >= needed:
        return None
    p = predict_run(run, replace(cal, data_files=needed), hosts=on)
    if isinstance(p, str) or p.frames_per_s_node * scale < WORTH * row["frames_per_s_node"]:
        return None
    total_mb = _data_mb(spec["root"])
    if total_mb is None:
        return None
    size = round(total_mb / needed, 1)
    if size < MIN_DATA_FILE_MB:  # a set this small: the workers it would feed cost more than its data
        return None
    why = (f"LeRobot's stream reads whole data files, one per worker: {cal.data_files} file(s) for {needed} workers; "
           f"convert the dataset again with data files of at most {size:g} MB ({total_mb:.1f} MB of data)")  # fmt: skip
    fps = p.frames_per_s_node * scale
    return Prescription({"data_file_size_in_mb": size}, fps, fps / row["frames_per_s_node"], why=why)


def _data_mb(root: str) -> float | None:
    """The dataset's data parquet files, in MB (None where they cannot be listed)."""
    import fsspec

    try:
        fs, path = fsspec.core.url_to_fs(f"{root.rstrip('/')}/data")
        return fs.du(path) / 1e6
    except (OSError, ValueError):
        return None


def yaml_map(values: dict) -> str:
    """A flow mapping, as config.yaml writes one: `{from: d, codec: h264, gop: 1}`."""
    return "{" + ", ".join(f"{k}: {str(v).lower() if isinstance(v, bool) else v}" for k, v in values.items()) + "}"


def floor_of(row: dict) -> dict:
    """The shuffle floor the run was judged by (summary.csv's `shuffle_floor`), else the schema's default."""
    given = row.get("shuffle_floor")
    return json.loads(given) if isinstance(given, str) and given else defaults("shuffle_floor")


def restore_shuffle(row: dict, spec: dict, episodes: int | None) -> Prescription | None:
    """The change that lifts a streaming run whose batches fell below the floor (`shuffle_low`): for dlbench_stream,
    where its batches repeat frames, one row a block (`read_ahead: 1`: no two items of a batch share a decoded
    block's frames), else more live episodes a worker (`pool_size`, up to the episodes a worker reads); for LeRobot's
    stream a larger shuffle buffer in its own terms (`buffer_size`, at least its default of 1000), only where the
    frames it would hold fit in half this machine's memory. Its frames/s is the run's until `--verify` measures the
    cost. None where the run is above the floor, or no setting can help."""
    floor = floor_of(row)
    short = shuffle_low(row, floor)
    if not short or LoaderName.parse(row["loader"]).kind != "stream":
        return None
    fps = row["frames_per_s_node"]
    workers = max(_int(row.get("num_workers"), 1), 1) * max(_int(row.get("ranks"), 1), 1)
    base = LoaderName.parse(row["loader"]).base
    if base == "dlbench_stream":
        frames = row.get("shuffle_distinct_frames")
        ahead = spec.get("read_ahead")
        if pd.notna(frames) and frames < floor.get("distinct_frames", 0.0) and ahead != 1:
            why = f"{short}: items decoded in one block share frames and meet in a batch; one row a block shares none"
            return Prescription({"read_ahead": 1}, fps, 1.0, why=why, shuffle=True)
        mine = (episodes or 0) // workers  # the episodes one worker reads: a batch mixes no more
        if spec.get("pool_size") is None:  # every piece live already: the blocks buffer_mb keeps bound the lanes
            mb = float(spec.get("buffer_mb") or 512)  # unset: at most 512 (`loader.stream.BUFFER_MB_RANGE`)
            if 2 * mb * 2**20 * workers > host_memory_bytes() / 2:
                return None
            why = (f"{short}: every piece is live, but a worker keeps only the blocks {mb:g} MB of buffer holds; "
                   f"{2 * mb:g} MB keeps twice as many episodes in play")  # fmt: skip
            return Prescription({"buffer_mb": 2 * mb}, fps, 1.0, why=why, shuffle=True)
        pool = _int(spec.get("pool_size"), mine)
        if mine <= pool:
            return None
        new = min(2 * pool, mine)
        why = (f"{short}: each worker reads about {mine} episodes but keeps {pool} live; "
               f"{new} live mix more of them in a batch")  # fmt: skip
        return Prescription({"pool_size": new}, fps, 1.0, why=why, shuffle=True)
    if base == "lerobot_stream":
        buffer = _int(spec.get("buffer_size"), LEROBOT_BUFFER)
        new = LEROBOT_BUFFER if buffer < LEROBOT_BUFFER else 4 * buffer  # its own default first
        held = new * item_bytes(row) * workers  # each worker's stream keeps its own buffer
        room = host_memory_bytes() / 2
        if held > room:
            return None  # no buffer that fits: the line under the run says it is below the floor
        size = f"{new}, its own default," if new == LEROBOT_BUFFER else f"{new}"
        why = (f"{short}: LeRobot's stream draws from a buffer of {buffer} items; {size} mixes more episodes, "
               f"holding about {held / 1e9:.1f} GB of frames")  # fmt: skip
        return Prescription({"buffer_size": new}, fps, 1.0, why=why, shuffle=True)
    if base == "ray_data":
        return _ray_shuffle(row, spec, short, fps, workers)
    return None


def _ray_shuffle(row: dict, spec: dict, short: str, fps: float, workers: int) -> Prescription | None:
    """Ray Data in its own terms: blocks read in random order first (`randomize_block_order`, free), then a larger
    local shuffle buffer while its frames fit in half of this machine's memory (Ray's object store holds them)."""
    if (spec.get("ray_shuffle") or "none") == "none":
        buffer = _int(spec.get("buffer_size"), 0) or RAY_BUFFER
        why = (f"{short}: Ray Data reads blocks in file order by default; randomize_block_order and a local shuffle "
               f"buffer of {buffer} rows mix episodes in a batch")  # fmt: skip
        return Prescription({"ray_shuffle": "blocks", "buffer_size": buffer}, fps, 1.0, why=why, shuffle=True)
    buffer = _int(spec.get("buffer_size"), 0)
    new = 4 * buffer if buffer else RAY_BUFFER
    held = new * item_bytes(row)  # one local buffer per rank, on the consumer's side
    if held > host_memory_bytes() / 2:
        return None
    why = (f"{short}: Ray Data's local shuffle buffer of {buffer} rows mixes few blocks; {new} mixes more, holding "
           f"about {held / 1e9:.1f} GB of frames")  # fmt: skip
    return Prescription({"buffer_size": new}, fps, 1.0, why=why, shuffle=True)


def item_bytes(row: dict) -> float:
    """Decoded bytes of one item (uint8 frames: every camera's window), from summary.csv's image_shape and
    frames_per_sample; 0 where unknown."""
    try:
        shape = [int(v) for v in str(row.get("image_shape")).split("x")]
        return float(np.prod(shape)) * float(row.get("frames_per_sample") or 1)
    except ValueError:
        return 0.0


def host_memory_bytes() -> float:
    """This machine's memory, in bytes."""
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def _int(value, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _fetch_ahead(row: dict, spec: dict, measured: float, ceiling: float | None) -> Prescription | None:
    """dlbench_stream reading remote video as its decoders ask (fetch_episodes 0), its workers waiting on storage for
    a measured share of their time: fetching episodes ahead overlaps those waits with decoding, so a worker's time per
    sample loses its fetch part (`split_fetch_ms`), up to the run's bound (`ceiling`: `bound_rate`); prescribed
    where that is worth it (WORTH), however small a share the waits are."""
    split = [row.get(k) for k, _ in SPLIT]
    if (
        LoaderName.parse(row["loader"]).base != "dlbench_stream"
        or spec.get("fetch_episodes") != 0
        or not all(pd.notna(v) for v in split)
    ):
        return None
    total, waited = sum(split), split[0]
    if total <= 0 or not waited:
        return None
    fps = measured * total / (total - waited)
    fps = min(fps, ceiling) if ceiling else fps
    if fps < WORTH * measured:
        return None
    why = (f"its workers waited on storage {waited / total:.0%} of their time; episodes fetched ahead (one request "
           f"per file) overlap the waits with decoding")  # fmt: skip
    return Prescription({"fetch_episodes": FETCH_EPISODES}, fps, fps / measured, why=why)


SPLIT = (("split_fetch_ms", "fetch"), ("split_decode_ms", "decode"), ("split_assembly_ms", "assembly"),
         ("split_idle_ms", "idle"))  # fmt: skip


def time_split(row: dict) -> str:
    """Where one run's time went: a worker's wall time per sample split (`bench.metrics.time_split`), else its CPU."""
    parts = []
    split = [(name, row.get(key)) for key, name in SPLIT]
    if all(pd.notna(v) for _, v in split):
        total = sum(v for _, v in split) or 1.0
        shares = ", ".join(f"{name} {v:.2f} ({v / total:.0%})" for name, v in split)
        parts.append(f"a worker's {total:.2f} ms per sample: {shares}")
    elif pd.notna(row.get("worker_item_ms_per_sample")):
        parts.append(f"a worker builds an item in {row['worker_item_ms_per_sample']:.2f} ms")
    if pd.notna(row.get("worker_cpu_ms_per_sample")):
        busy = row.get("worker_busy_frac")
        busy_text = f", busy {busy:.0%} of the window" if pd.notna(busy) else ""
        parts.append(f"workers {row['worker_cpu_ms_per_sample']:.2f} ms CPU per sample{busy_text}")
    if pd.notna(row.get("main_cpu_ms_per_sample")):
        checks = row.get("check_ms_per_sample")
        of = f"; its frame checks took {checks:.2f} ms of it" if pd.notna(checks) else ""
        parts.append(f"main process {row['main_cpu_ms_per_sample']:.2f} ms CPU per sample{of}")
    if pd.notna(row.get("data_wait_frac")):
        parts.append(f"the consumer waited on data {row['data_wait_frac']:.0%} of the time")
    if pd.notna(row.get("slowest_rank")):
        parts.append(f"slowest rank {int(row['slowest_rank'])} at {row['slowest_rank_vs_median']:.0%} of the median")
    return "; ".join(parts) or "no time split recorded"


def memory(row: dict, cal: Calibration, ram_mb: float | None) -> str:
    """The run's memory against the host's: its peak PSS (per rank, times the ranks a host holds), and where that
    passes MEMORY_SHARE of the host's RAM, the workers that fit by the calibration's memory per worker."""
    peak = row.get("peak_pss_mb")
    if not ram_mb or peak is None or pd.isna(peak):
        return ""
    here = per_host_ranks(row)
    used = peak * here
    line = f"Memory: peak PSS {used:,.0f} MB on a host, {used / ram_mb:.0%} of its {ram_mb:,.0f} MB."
    cost = cal.cost(row["loader"], row["mode"])
    if used <= MEMORY_SHARE * ram_mb or cost is None or not cost.worker_pss_mb:
        return line
    fit = int((MEMORY_SHARE * ram_mb / here - cost.main_pss_mb) // cost.worker_pss_mb)
    return (f"{line} Over {MEMORY_SHARE:.0%}: `num_workers: {max(fit, 0)}` fits (the calibration's "
            f"{cost.worker_pss_mb:,.0f} MB a worker beside {cost.main_pss_mb:,.0f} MB of main process), or smaller "
            f"decoder caches (`decoder_cache_mb`).")  # fmt: skip


def yaml(change: dict) -> str:
    """A prescription's config lines, as one line to paste into the scenario (None: remove the key)."""
    return ", ".join(f"{key}: {value}" if value is not None else f"no {key}" for key, value in change.items())


def judge(
    row: dict, cal: Calibration, variants_of: dict, ok: pd.DataFrame, spec: dict | None = None
) -> tuple[str, list[Prescription]]:
    """One run's bound line and its prescriptions (none for the worker count where the run is at its cores' bound)."""
    bound = row.get("bound") if pd.notna(row.get("bound")) else "unknown"
    ceiling, calibrated = bound_rate(row, cal), cores_rate(row, cal)
    same = [v for v in variants_of.get(row["dataset"], []) if _same_settings(v, row, ok)]
    peers = {}
    for loader in set(ok["loader"]) - {row["loader"]}:
        m = _matching(ok, row["dataset"], {**row, "loader": loader})
        if not m.empty:
            peers[loader] = (m.iloc[0]["frames_per_s_node"], m.iloc[0]["run_id"], m.iloc[0].to_dict())
    found = prescribe(row, cal, [_variant_row(v, row, ok) for v in same], spec, peers)
    if ceiling and row["frames_per_s_node"] >= AT_BOUND * ceiling:
        share = row["frames_per_s_node"] / ceiling
        line = (
            f"At its bound: {share:.0%} of what every core gives this loader on this encoding "
            f"({ceiling:,.0f} frames/s per node{_by(ceiling, calibrated)}): more workers cannot help."
        )
        return line, [p for p in found if "num_workers" not in p.change]
    every = f"; every core would give {ceiling:,.0f} frames/s{_by(ceiling, calibrated)}." if ceiling else "."
    return f"Bound: {bound}{every}", found


def _by(ceiling: float, calibrated: float | None) -> str:
    """Where a bound comes from: the calibration's CPU per sample, or the run's where it spent less."""
    if calibrated is None or ceiling == calibrated:
        return " by the calibration"
    return f" at the CPU per sample it spent; {calibrated:,.0f} at the calibration's"


def prescriptions(
    summary: pd.DataFrame, calibrations: dict, encodings: pd.DataFrame | None = None, specs: dict | None = None
):
    """(summary row, its prescriptions) for each verified CPU-decoded run with a calibration. `specs`: (scenario,
    run_id) -> the run's spec (dict), where known."""
    ok = summary[summary["status"] == "ok"]
    variants_of = _variants(encodings)
    for _, r in ok.iterrows():
        row = r.to_dict()
        cal = calibrations.get((row["dataset"], row["source"]))
        if cal is not None and row.get("decode_device") == "cpu":
            yield row, judge(row, cal, variants_of, ok, (specs or {}).get((row["scenario"], row["run_id"])))[1]


def shuffle_line(row: dict) -> str:
    """What the run's batches are worth to training beside its speed, against the floor it was judged by."""
    floor = floor_of(row)
    one, ten, frames = (row.get(f"shuffle_{m}") for m in SHUFFLE_MEASURES)
    if one is None or pd.isna(one):
        return "Effective batch size: not measured (too few batches in the windows)."
    text = (f"Effective / nominal batch size {one:.2f} over one batch, {_fmt(ten)} over 10 in a row; distinct frames "
            f"{_fmt(frames)} (floor {floor.get('effective_batch', 0):g}, {floor.get('effective_window', 0):g}, "
            f"{floor.get('distinct_frames', 0):g})")  # fmt: skip
    low = shuffle_low(row, floor)
    return text + (f": below it ({low}), so the run does not pass." if low else ".")


def _fmt(value) -> str:
    return "n/a" if value is None or pd.isna(value) else f"{value:.2f}"


def _verified_line(v: dict) -> str:
    if str(v["verdict"]).startswith("not verified"):
        return f"   {v['verdict']}."
    shuffle = ""
    if pd.notna(v.get("before_shuffle_effective_batch")) and pd.notna(v.get("after_shuffle_effective_batch")):
        shuffle = (f", effective / nominal batch size {v['before_shuffle_effective_batch']:.2f} -> "
                   f"{v['after_shuffle_effective_batch']:.2f}, distinct frames "
                   f"{_fmt(v.get('before_shuffle_distinct_frames'))} -> "
                   f"{_fmt(v.get('after_shuffle_distinct_frames'))}")  # fmt: skip
    return (f"   Verified here, {len(json.loads(v['before_windows']))} alternating legs each: "
            f"{v['before_frames_per_s_node']:,.0f} -> {v['after_frames_per_s_node']:,.0f} frames/s, "
            f"{v['measured_gain']:.2f}x measured against {v['predicted_gain']:.2f}x predicted{shuffle}: "
            f"{v['verdict']}.")  # fmt: skip


def advise(
    summary: pd.DataFrame,
    calibrations: dict,
    encodings: pd.DataFrame | None = None,
    verified: pd.DataFrame | None = None,
    specs: dict | None = None,
    ram_mb: float | None = None,
) -> str:
    """advice.md: a section per verified run. `calibrations`: (dataset, source) -> Calibration; `verified`: the
    table of `verify.verify` (each run's top prescription measured beside it), where made; `specs`: (scenario,
    run_id) -> the run's spec, where known (`read_specs`); `ram_mb`: the host's memory (the runs' host)."""
    ok = summary[summary["status"].isin(["ok"])]
    variants_of = _variants(encodings)
    checked = {} if verified is None else {(v["scenario"], v["run_id"]): v for v in verified.to_dict("records")}
    detail, answers = [], {}
    for _, r in ok.iterrows():
        row = r.to_dict()
        target = row.get("target_frames_per_s_node")
        head = f"{row['frames_per_s_node']:,.0f} frames/s per node"
        if pd.notna(target):
            # the speed against its target only: whether the run passes also takes its shuffle (`shuffle_line`)
            head += f" (target {target:,.0f}: {'met' if row['frames_per_s_node'] >= target else 'missed'})"
        detail += ["", f"## {row['scenario']} / {row['run_id']}", "", f"{head}: {time_split(row)}."]
        cal = calibrations.get((row["dataset"], row["source"]))
        if cal is None or row.get("decode_device") != "cpu":
            detail.append("No calibration of this run (GPU decoding, or none made): no prescription.")
            continue
        line, found = judge(row, cal, variants_of, ok, (specs or {}).get((row["scenario"], row["run_id"])))
        detail.append(line)
        if memory(row, cal, ram_mb):
            detail.append(memory(row, cal, ram_mb))
        detail.append(shuffle_line(row))
        if not found:
            detail.append("Nothing to prescribe: no change the model or the matrix knows gives 10% more.")
        v = checked.get((row["scenario"], row["run_id"]))
        for k, p in enumerate(found, 1):
            detail.append(f"{k}. {_change_text(p, row)}")
            if k == 1 and v is not None and v["change"] == yaml(p.change):
                detail.append(_verified_line(v))
        if found:
            answers.setdefault((row["dataset"], row["source"]), []).append((row, found[0], v))
    lines = ["# Advice", "", *short_answer(answers, ok), "", "# Per run", "",
             "Where the time went, the bound, and what would lift it (docs/model.md)."]  # fmt: skip
    return "\n".join(lines + detail) + "\n"


def _change_text(p: Prescription, row: dict) -> str:
    """A prescription as one line: the change, where it goes, and what it gives."""
    if p.shuffle:
        return (f"`{yaml(p.change)}` in scenario {row['scenario']} to restore its shuffle ({p.why}); its cost in "
                "frames/s is what `--verify` measures")  # fmt: skip
    how = "measured" if p.measured else "predicted"
    where = "in the convert section" if set(p.change) <= CONVERT_KEYS else f"in scenario {row['scenario']}"
    return f"`{yaml(p.change)}` {where}: {p.frames_per_s_node:,.0f} frames/s per node ({how}, {p.gain:.2f}x; {p.why})"


def short_answer(answers: dict, ok: pd.DataFrame) -> list[str]:
    """Per dataset and source, the one change that lifts training most: a run's top prescription proven beside it
    (its measured gain) before one only predicted; a shuffle restored before speed (a batch below the floor is not
    worth its frames). A line per dataset, the runs' detail below."""
    if ok.empty:
        return ["No run finished verified: nothing to advise (results/summary.md says why each did not)."]
    out = ["The change that lifts each dataset's training most (each run's detail below)."]
    for (dataset, source), found in sorted(answers.items()):

        def rank(entry):
            row, p, v = entry
            proof = _proof_of(p, v)
            withdrawn = _withdrew(proof)
            gain = float(proof["measured_gain"]) if proof is not None and not withdrawn else p.gain
            # a change its proof withdrew lifts nothing: any other first; then a shuffle restored before speed
            return (not withdrawn, p.shuffle, proof is not None, gain)

        row, p, v = max(found, key=rank)
        proof = _proof_of(p, v)
        if _withdrew(proof):
            said = (
                f"`{yaml(p.change)}` in scenario {row['scenario']} was the best the model knew, and its "
                f"proof here withdrew it ({proof['verdict']}); the detail below says what else would help"
            )
        elif proof is not None and p.shuffle:
            said = (f"restore the shuffle of {row['scenario']}: `{yaml(p.change)}`, {proof['verdict']} "
                    f"({proof['before_frames_per_s_node']:,.0f} -> {proof['after_frames_per_s_node']:,.0f} frames/s "
                    "per node)")  # fmt: skip
        elif p.shuffle:  # the change and why, once; its cost unmeasured
            said = (f"restore the shuffle of {row['scenario']}: `{yaml(p.change)}` ({p.why}); not proven here "
                    "(advice.verify proves the top ones), its cost in frames/s unmeasured")  # fmt: skip
        elif proof is not None:
            said = (f"`{yaml(p.change)}` ({row['scenario']}): {proof['before_frames_per_s_node']:,.0f} -> "
                    f"{proof['after_frames_per_s_node']:,.0f} frames/s per node, {proof['measured_gain']:.2f}x "
                    f"measured ({proof['verdict']})")  # fmt: skip
        else:
            said = f"{_change_text(p, row)}; not proven here (advice.verify proves the top ones)"
        out.append(f"- **{dataset}** from {source}: {said}.")
    left = sorted(set(zip(ok["dataset"], ok["source"])) - set(answers))
    out += [f"- **{d}** from {s}: no change the model or the matrix knows gives 10% more." for d, s in left]
    return out


def _proof_of(p: Prescription, v: dict | None) -> dict | None:
    """The proof of prescription `p` in verified.csv's row `v` (None where it was not measured)."""
    if v is None or v["change"] != yaml(p.change) or pd.isna(v.get("measured_gain")):
        return None
    return v


def _withdrew(proof: dict | None) -> bool:
    """True where a proof was measured and withdrew its prescription (`prove.verdict`: only "proven..." stands)."""
    return proof is not None and not str(proof["verdict"]).startswith("proven")


def _variants(encodings: pd.DataFrame | None) -> dict[str, list[dict]]:
    """Source dataset name -> its re-encoded variants' rows in encodings.csv (one per variant)."""
    if encodings is None or encodings.empty:
        return {}
    roots = dict(zip(encodings["root"], encodings["dataset"]))
    out: dict[str, list[dict]] = {}
    for _, v in encodings[encodings["reference"].notna()].drop_duplicates("dataset").iterrows():
        if v["reference"] in roots:
            out.setdefault(roots[v["reference"]], []).append(v.to_dict())
    return out


def _matching(ok: pd.DataFrame, dataset: str, row: dict) -> pd.DataFrame:
    keys = ["source", "loader", "mode", "batch_size", "num_workers", "decode_device", "ranks"]
    m = ok[ok["dataset"] == dataset]
    for k in keys:
        m = m[m[k].astype(str) == str(row[k])]
    return m


def _same_settings(variant: dict, row: dict, ok: pd.DataFrame) -> bool:
    return not _matching(ok, variant["dataset"], row).empty


def _variant_row(variant: dict, row: dict, ok: pd.DataFrame) -> dict:
    """The summary row of the variant's run with `row`'s settings, with the encoding's cost beside it."""
    run = _matching(ok, variant["dataset"], row).iloc[0].to_dict()
    return {**run, "bytes_vs_source": variant["bytes_vs_source"], "psnr_db": variant["psnr_db"]}


def read_specs(results) -> dict:
    """(scenario, run_id) -> run spec (dict) of each run spec the workflow wrote under results/specs."""
    from pathlib import Path

    out = {}
    for path in sorted(Path(results).glob("specs/*/*.json")):
        try:
            out[(path.parent.name, path.stem)] = json.loads(path.read_text())
        except ValueError:
            continue  # a spec being written: its run is not in the summary yet
    return out
