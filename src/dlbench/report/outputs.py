"""Names of outputs that both the library and the workflow know, in a module light enough for parsing the workflow."""

# the summary plots of `dlbench plot` (dlbench.report.plots.PLOTS draws them), in report order
PLOT_NAMES = (
    "throughput.png",
    "baseline.png",
    "latency.png",
    "decode_device.png",
    "workers.png",
    "nodes.png",
    "cache_vs_p99.png",
    "data_wait.png",
    "remote_cost.png",
    "prediction.png",
    "time_split.png",
    "shuffle.png",
)

# the plots of runs that differ by one axis alone: (that axis, what the runs it compares hold fixed); they are drawn
# only where the matrix holds two such runs, so that the report has no page of placeholder text
ONE_AXIS = {
    "workers.png": ("num_workers", {"ranks": 1, "step_ms": 0}),
    "nodes.png": ("ranks", {"step_ms": 0}),
    "data_wait.png": ("step_ms", {}),
}


def plots_for(runs) -> list[str]:
    """The PLOT_NAMES that `runs` (the matrix's RunSpecs) can fill: every plot, less each ONE_AXIS plot whose axis
    takes a single value in every group of runs alike in dataset, source, loader, mode and decode device."""
    names = []
    for name in PLOT_NAMES:
        if name not in ONE_AXIS:
            names.append(name)
            continue
        axis, fixed = ONE_AXIS[name]
        seen: dict[tuple, set] = {}
        for r in runs:
            if all(getattr(r, k) == v for k, v in fixed.items()):
                key = (r.dataset, r.source, r.loader, r.mode, r.decode_device)
                seen.setdefault(key, set()).add(getattr(r, axis))
        if any(len(values) > 1 for values in seen.values()):
            names.append(name)
    return names
