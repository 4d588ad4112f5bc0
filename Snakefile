# dlbench: synth -> convert (plan, work x N, finalize) -> validate -> bench runs -> summary.csv -> plots.
# Edit config.yaml to change the matrix; ask for any target, e.g. `snakemake -c all results/summary.csv`.
from snakemake.utils import min_version

min_version("9.20")


configfile: "config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/bench.smk"
include: "workflow/rules/report.smk"


rule all:
    default_target: True
    input:
        "results/summary.csv",
        PLOTS,
