# dlbench: datasets (synth | v2.1 -> convert: plan, work x N, finalize | v3.0 in place) -> validate -> run specs
# -> bench runs -> summary.csv -> plots.
# Edit config.yaml to change the matrix; ask for any target, e.g. `snakemake -c all results/summary.csv`.
from snakemake.utils import min_version

min_version("9.20")


configfile: "config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/sources.smk"
include: "workflow/rules/bench.smk"
include: "workflow/rules/report.smk"


rule all:
    default_target: True
    input:
        "results/summary.csv",
        CONVERSION_TABLE,
        PLOTS,
        CONVERSION_PLOT,


# The loopback S3 server (and its shaping proxies) lives as long as this run, if a source uses it.
onstart:
    if USES_LOOPBACK:
        dlbench.loopback.start(config["loopback_server"]["port"], LOOPBACK_PROXIES, LOOPBACK_STATE, "results/logs/loopback")


onsuccess:
    dlbench.loopback.stop(LOOPBACK_STATE)


onerror:
    dlbench.loopback.stop(LOOPBACK_STATE)
