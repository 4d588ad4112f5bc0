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
