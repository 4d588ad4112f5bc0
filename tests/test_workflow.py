"""The whole Snakemake workflow on a tiny config, in a temporary working directory."""

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile")]

TINY = {
    "dataset": {"synth": {"episodes": 4, "length_min": 10, "length_max": 20,
                          "cameras": [{"key": "observation.images.front", "height": 32, "width": 32}]}},
    "convert": {"workers": 2, "episodes_per_batch": 2},
    "bench": {"defaults": {"batch_size": 4, "num_workers": 1, "duration_s": 2, "warmup_s": 0.5, "probe_samples": 4},
              "scenarios": {"mmap_local": {"mode": ["single", "sarm"]}}},
}


def snakemake(workdir: Path, config: dict, *args: str) -> subprocess.CompletedProcess:
    cfg = workdir / "tiny.yaml"
    cfg.write_text(yaml.safe_dump(config))
    return subprocess.run([*SNAKEMAKE, "-d", str(workdir), "--configfile", str(cfg), *args],
                          capture_output=True, text=True, timeout=900)


@pytest.mark.slow
def test_default_dag_end_to_end(tmp_path):
    dry = snakemake(tmp_path, TINY, "-n", "-c", "2")
    assert dry.returncode == 0, dry.stderr
    for rule in ("synth", "convert_plan", "convert_work", "convert_finalize", "validate_dataset", "bench",
                 "aggregate", "plots"):
        assert rule in dry.stdout
    proc = snakemake(tmp_path, TINY, "-c", "2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = pd.read_csv(tmp_path / "results/summary.csv")
    assert sorted(summary["run_id"]) == ["dlbench_map-sarm-b4-w1-cpu", "dlbench_map-single-b4-w1-cpu"]
    for col in ("frames_per_s_node", "samples_per_s_node", "latency_p99_ms", "peak_rss_mb", "pass"):
        assert col in summary.columns
    assert (summary["frames_per_s_node"] > 0).all()
    assert (summary["frames_verified"] > 0).all() and (summary["frames_wrong"] == 0).all()
    for png in ("throughput.png", "latency.png"):
        assert (tmp_path / "results/plots" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for log in ("synth/synthetic.log", "convert/synthetic/finalize.log", "aggregate.log"):
        assert (tmp_path / "results/logs" / log).exists()


@pytest.mark.parametrize("bad, message", [
    ({"bench": {"scenarios": {"s": {"mode": "fast"}}}}, r"bench.scenarios.s.mode: 'fast' is not allowed; choose one of \['single', 'sarm'\]"),
    ({"convert": {"wrokers": 2}}, r"convert: unknown key\(s\) \['wrokers'\]; allowed keys: .*workers"),
    ({"dataset": {"synth": {"codec": "vp9"}}}, r"dataset.synth.codec: 'vp9' is not allowed"),
])
def test_invalid_config_names_the_key(tmp_path, bad, message):
    import re

    proc = snakemake(tmp_path, bad, "-n", "-c", "1")
    assert proc.returncode != 0
    assert re.search(message, proc.stderr + proc.stdout), proc.stderr


def test_lint_is_clean():
    proc = subprocess.run([*SNAKEMAKE, "--lint", "-d", str(REPO)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
