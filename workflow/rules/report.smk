# Aggregation, tables and plots; captions for `snakemake --report` live in workflow/report/.


rule aggregate:
    input:
        runs=run_dirs(),
        prewarm=prewarm_reports(),
    output:
        report("results/summary.csv", caption="../report/summary.rst", category="Tables"),
    log:
        "results/logs/aggregate.log",
    params:
        targets=shlex.quote(json.dumps(config["targets"])),
        thrash=shlex.quote(json.dumps(config["thrash"])),
        baseline=config["baseline_loader"],
        prewarm=lambda wildcards, input: " ".join(f"--prewarm {Path(p).stem}={p}" for p in input.prewarm),
    conda:
        "../envs/cpu.yaml"
    shell:
        "dlbench aggregate {input.runs} --out {output} --targets {params.targets} --thrash {params.thrash} "
        "--baseline {params.baseline} {params.prewarm} > {log} 2>&1"


rule conversion_table:
    input:
        expand("results/convert/{dataset}/scaling/w{n}.json", dataset=DATASET, n=SCALING_WORKERS),
    output:
        report("results/tables/conversion.csv", caption="../report/conversion_table.rst", category="Tables"),
    log:
        "results/logs/conversion_table.log",
    conda:
        "../envs/cpu.yaml"
    shell:
        "dlbench conversion-table {input} --out {output} > {log} 2>&1"


rule plots:
    input:
        "results/summary.csv",
    output:
        [report(p, caption=f"../report/{Path(p).stem}.rst", category="Plots") for p in PLOTS],
    log:
        "results/logs/plots.log",
    params:
        outdir=subpath(output[0], parent=True),
    conda:
        "../envs/cpu.yaml"
    shell:
        "dlbench plot {input} --outdir {params.outdir} > {log} 2>&1"


rule plot_conversion:
    input:
        "results/tables/conversion.csv",
    output:
        report("results/plots/conversion.png", caption="../report/conversion.rst", category="Plots"),
    log:
        "results/logs/plot_conversion.log",
    params:
        outdir=subpath(output[0], parent=True),
    conda:
        "../envs/cpu.yaml"
    shell:
        "dlbench plot --conversion {input} --outdir {params.outdir} > {log} 2>&1"
