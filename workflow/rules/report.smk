# Aggregation and plots.


rule aggregate:
    input:
        run_dirs(),
    output:
        report("results/summary.csv", caption="../report/summary.rst", category="Tables"),
    log:
        "results/logs/aggregate.log",
    params:
        targets=shlex.quote(json.dumps(config["targets"])),
    conda:
        "../envs/cpu.yaml"
    shell:
        "dlbench aggregate {input} --out {output} --targets {params.targets} > {log} 2>&1"


rule plots:
    input:
        "results/summary.csv",
    output:
        report("results/plots/throughput.png", caption="../report/throughput.rst", category="Plots"),
        report("results/plots/latency.png", caption="../report/latency.rst", category="Plots"),
    log:
        "results/logs/plots.log",
    params:
        outdir=subpath(output[0], parent=True),
    conda:
        "../envs/cpu.yaml"
    shell:
        "dlbench plot {input} --outdir {params.outdir} > {log} 2>&1"
