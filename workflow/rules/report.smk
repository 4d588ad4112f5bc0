# Aggregation, tables and plots: the same `dlbench aggregate | conversion-table | plot` commands a user runs by hand;
# captions for `snakemake --report` live in workflow/report/.


localrules:
    aggregate,
    conversion_table,
    plots,
    plot_conversion,


rule aggregate:
    input:
        runs=run_dirs(),
        prewarm=prewarm_reports(),
    output:
        report("results/summary.csv", caption="../report/summary.rst", category="Tables"),
    log:
        "results/logs/aggregate.log",
    conda:
        "../envs/cpu.yaml"
    params:
        args=aggregate_args(),
    shell:
        "dlbench -q aggregate {input.runs} --out {output} {params.args} > {log} 2>&1"


rule conversion_table:
    input:
        [f"results/convert/{d}/scaling/w{n}.json" for d in SCALING_DATASETS for n in SCALING_WORKERS],
    output:
        report("results/tables/conversion.csv", caption="../report/conversion_table.rst", category="Tables"),
    log:
        "results/logs/conversion_table.log",
    conda:
        "../envs/cpu.yaml"
    shell:
        "dlbench -q conversion-table {input} --out {output} > {log} 2>&1"


rule plots:
    input:
        "results/summary.csv",
    output:
        [report(p, caption=f"../report/{Path(p).stem}.rst", category="Plots") for p in PLOTS],
    log:
        "results/logs/plots.log",
    conda:
        "../envs/cpu.yaml"
    params:
        args=thrash_args(),
    shell:
        "dlbench -q plot {input} --outdir results/plots {params.args} > {log} 2>&1"


rule plot_conversion:
    input:
        "results/tables/conversion.csv",
    output:
        report("results/plots/conversion.png", caption="../report/conversion.rst", category="Plots"),
    log:
        "results/logs/plot_conversion.log",
    conda:
        "../envs/cpu.yaml"
    shell:
        "dlbench -q plot --conversion {input} --outdir results/plots > {log} 2>&1"
