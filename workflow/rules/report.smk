# Aggregation, tables and plots: the same `dlbench aggregate | conversion-table | plot` commands a user runs by hand;
# captions for `snakemake --report` live in workflow/report/.


localrules:
    aggregate,
    advice,
    conversion_table,
    plots,
    plot_conversion,


# `compare_to: path/to/old/results` in config.yaml: this run against that one, in the report
COMPARE_TO = config.get("compare_to")
if COMPARE_TO and not Path(COMPARE_TO).exists():
    config_error(
        f"compare_to: {COMPARE_TO} does not exist; give the results directory (or summary.csv) of the run to "
        f"compare with, or remove the key"
    )
COMPARE = ["results/compare.csv", "results/plots/compare.png"] if COMPARE_TO else []


rule aggregate:
    input:
        runs=run_dirs(),
        prewarm=prewarm_reports(),
        predictions="results/predictions.csv",
    output:
        csv=report("results/summary.csv", caption="../report/summary.rst", category="Tables"),
        # the headline table beside it: a row a run, a newcomer's first read (report/headline.py), and as HTML
        # the report's first entry
        md="results/summary.md",
        html=report("results/summary.html", caption="../report/headline.rst", category="1. Summary"),
    log:
        "results/logs/aggregate.log",
    conda:
        "../envs/cpu.yaml"
    params:
        args=aggregate_args(),
    shell:
        "dlbench -q aggregate {input.runs} --out {output.csv} {params.args} --predictions {input.predictions} "
        "> {log} 2>&1"


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
        only=",".join(PLOT_FILES),
    shell:
        "dlbench -q plot {input} --out-dir results/plots {params.args} --only {params.only} > {log} 2>&1"


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
        "dlbench -q plot --conversion {input} --out-dir results/plots > {log} 2>&1"


# Never fails on a regression: the report is there to show it (CI gates with `dlbench compare --fail-on-regression`).
if COMPARE_TO:

    localrules:
        compare,

    rule compare:
        input:
            base=COMPARE_TO,
            new="results/summary.csv",
        output:
            table=report("results/compare.csv", caption="../report/compare_table.rst", category="Comparison"),
            plot=report("results/plots/compare.png", caption="../report/compare.rst", category="Comparison"),
        log:
            "results/logs/compare.log",
        conda:
            "../envs/cpu.yaml"
        shell:
            "dlbench -q compare {input.base} {input.new} --out {output.table} --plot {output.plot} --all > {log} 2>&1"


rule advice_verify:
    """The top prescription of the runs with the largest predicted gains, each run beside the run as it was, in
    alternating legs on one machine (dlbench advise --verify)."""
    input:
        summary="results/summary.csv",
        calibrations=[calibration_file(d, s) for d, s in CALIBRATED],
        encodings=ENCODINGS[:1],
    output:
        report("results/advice/verified.csv", caption="../report/verified.rst", category="Tables"),
    log:
        "results/logs/advice_verify.log",
    conda:
        "../envs/cpu.yaml"
    threads: measuring(2)
    resources:
        measure=measure,
        loopback=int(USES_LOOPBACK),
    params:
        args=advice_verify_args(),
    shell:
        "dlbench -q advise results --verify {params.args} --verified {output} > {log} 2>&1"


rule advice:
    """Per verified run: where its time went, its bound, and the changes that would lift it (dlbench advise)."""
    input:
        summary="results/summary.csv",
        calibrations=[calibration_file(d, s) for d, s in CALIBRATED],
        encodings=ENCODINGS[:1],
        verified=VERIFIED,
    output:
        report("results/advice.md", caption="../report/advice.rst", category="Tables"),
    log:
        "results/logs/advice.log",
    conda:
        "../envs/cpu.yaml"
    params:
        verified=f"--verified {VERIFIED[0]}" if VERIFIED else "--verified none",
    shell:
        "dlbench -q advise results --out {output} {params.verified} > {log} 2>&1"
