# dlbench: datasets (synth | v2.1 -> convert: plan, work x N, finalize | v3.0 in place | reencode of another)
# -> validate -> run specs -> bench runs -> summary.csv -> plots.
# Edit config.yaml to change the matrix; ask for any target, e.g. `snakemake -c all results/summary.csv`.
from snakemake.utils import min_version

min_version("9.20")


configfile: "config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/encoding.smk"
include: "workflow/rules/sources.smk"
include: "workflow/rules/peers.smk"
include: "workflow/rules/bench.smk"
include: "workflow/rules/model.smk"
include: "workflow/rules/report.smk"


redo_removed_runs()  # a run removed by hand is measured again, not left out of a summary that looks complete


rule all:
    default_target: True
    input:
        "results/summary.csv",
        "results/advice.md",
        CONVERSION_TABLE,
        PLOTS,
        CONVERSION_PLOT,
        ENCODINGS,
        COMPARE,
        TUNE,


# The S3 server of loopback sources (and its shaping proxies) lives as long as this run, if a run reads one. It
# starts before any job is submitted; a server that cannot start (or that compute nodes could not reach) stops here.
onstart:
    if USES_LOOPBACK:
        checked(start_loopback, what="loopback server")


onsuccess:
    dlbench.loopback.stop()
    dlbench.report.failed.clear_finished("results", list(RUNS))


onerror:
    dlbench.loopback.stop()
    summarize_failures()
