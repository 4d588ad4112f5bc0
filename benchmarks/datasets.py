"""The datasets the benchmark commands measure on: the quick default and the realistic one (config/realistic.yaml's
frames: 2 cameras at 480x640, AV1 g=2 crf=30 as LeRobot records, camera-like content, episodes of 10-20 s)."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from dlbench.synth import Camera, SynthConfig, synthesize

QUICK = SynthConfig(
    episodes=24,
    length_min=60,
    length_max=150,
    cameras=(Camera("observation.images.front", 96, 128), Camera("observation.images.wrist", 96, 128)),
)
REALISTIC = SynthConfig(
    episodes=10,
    length_min=300,
    length_max=600,
    codec="av1",
    content="camera",
    tasks=3,
    cameras=(Camera("observation.images.front", 480, 640), Camera("observation.images.wrist", 480, 640)),
)


def v21(work: Path, realistic: bool, episodes: int | None = None) -> Path:
    """A synthetic v2.1 dataset under `work`, written once and reused (realistic: about 50 s per episode on 2
    cores)."""
    cfg = REALISTIC if realistic else QUICK
    if episodes is not None:
        cfg = replace(cfg, episodes=episodes)
    out = work / f"v21-{'realistic' if realistic else 'quick'}-{cfg.episodes}"
    if not (out / "meta/info.json").exists():
        t0 = time.perf_counter()
        synthesize(cfg, out, overwrite=True, progress=False)
        print(f"synthesized {cfg.episodes} episodes in {time.perf_counter() - t0:.0f} s: {out}")
    return out


def v30(work: Path, realistic: bool, episodes: int | None = None) -> Path:
    """The same dataset converted to v3.0 (also reused)."""
    from dlbench.convert.run import run as convert

    src = v21(work, realistic, episodes)
    out = src.with_name(src.name.replace("v21", "v30"))
    if not (out / "meta/info.json").exists():
        convert(str(src), out, workers=2, progress=False)
    return out


def tile(src: Path, times: int, out: Path) -> Path:
    """`src` (v2.1) with its episodes repeated `times` times, renumbered: a bigger dataset of the same files for
    conversion benchmarks. Videos are hard links where `out` shares src's filesystem (copies otherwise); the
    barcodes in them still name the source episodes, so validate the conversion of `src` itself, not of this."""
    import json
    import os
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    from dlbench.format import meta, paths

    if (out / "meta/info.json").exists():
        return out
    info = meta.read_info(str(src))
    chunks, cams = int(info["chunks_size"]), meta.video_keys(info)
    episodes = list(meta.iter_episodes_v21(str(src)))
    stats = [json.loads(line) for line in (src / paths.EPISODES_STATS_JSONL_PATH).read_text().splitlines() if line]
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "meta").mkdir(parents=True)
    tables = {
        int(e["episode_index"]): pq.read_table(src / paths.v21_data_path(int(e["episode_index"]), chunks))
        for e in episodes
    }
    rows, new_eps, new_stats = 0, [], []
    for _ in range(times):
        for e, s in zip(episodes, stats):
            old, new = int(e["episode_index"]), len(new_eps)
            table = tables[old]  # read once: tiling to tens of thousands of episodes
            n = table.num_rows
            for name, values in (("episode_index", [new] * n), ("index", range(rows, rows + n))):
                i = table.schema.get_field_index(name)
                table = table.set_column(i, table.schema.field(i), pa.array(values, table.schema.field(i).type))
            target = tmp / paths.v21_data_path(new, chunks)
            target.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(table, target)
            for cam in cams:
                video = tmp / paths.v21_video_path(new, cam, chunks)
                video.parent.mkdir(parents=True, exist_ok=True)
                try:
                    os.link(src / paths.v21_video_path(old, cam, chunks), video)
                except OSError:
                    shutil.copyfile(src / paths.v21_video_path(old, cam, chunks), video)
            new_eps.append({**e, "episode_index": new})
            new_stats.append({**s, "episode_index": new})
            rows += n
    total = len(new_eps)
    info.update(
        total_episodes=total,
        total_frames=rows,
        total_videos=total * len(cams),
        total_chunks=(total + chunks - 1) // chunks,
        splits={"train": f"0:{total}"},
    )
    (tmp / "meta/info.json").write_text(json.dumps(info, indent=4))
    (tmp / paths.EPISODES_JSONL_PATH).write_text("".join(json.dumps(e) + "\n" for e in new_eps))
    (tmp / paths.EPISODES_STATS_JSONL_PATH).write_text("".join(json.dumps(s) + "\n" for s in new_stats))
    shutil.copyfile(src / paths.TASKS_JSONL_PATH, tmp / paths.TASKS_JSONL_PATH)
    os.replace(tmp, out)
    return out
