# Calibrate each (dataset, source) the matrix reads, then predict every run from it: results/predictions.csv needs
# no bench job, so `snakemake -c all results/predictions.csv` shows the plan's expected numbers first.


localrules:
    predictions,


rule calibrate:
    input:
        unpack(calibrate_inputs),
    output:
        "results/calibration/{dataset}/{source}.json",
    log:
        "results/logs/calibration/{dataset}-{source}.log",
    priority: calibrate_priority
    conda:
        "../envs/cpu.yaml"
    threads: measuring(2)  # one DataLoader worker and the main process
    resources:
        measure=measure,
        loopback=lambda wildcards: loopback_jobs(wildcards.source),
    params:
        specs=lambda wildcards, input: " ".join(f"--spec {s}" for s in input.specs),
        contention=calibrate_args,
    shell:
        "dlbench -q calibrate {params.specs} --dataset {wildcards.dataset} --source {wildcards.source} "
        "{params.contention} --out {output} > {log} 2>&1"


rule predictions:
    input:
        [calibration_file(d, s) for d, s in CALIBRATED],
    output:
        report("results/predictions.csv", caption="../report/predictions.rst", category="Tables"),
    log:
        "results/logs/predictions.log",
    conda:
        "../envs/cpu.yaml"
    params:
        runs=[r.to_dict() for r in RUNS.values()],
        calibrations={f"{d}/{s}": calibration_file(d, s) for d, s in CALIBRATED},
        hosts_spread=not workflow.local_exec,  # on a cluster each rank of a multi-node run has a host
    script:
        "../scripts/predictions.py"


rule tune:
    """The fastest loader configuration of a dataset on a source that meets the floor and budget, proven here."""
    input:
        unpack(tune_inputs),
    output:
        md="results/tune/{dataset}/{source}.md",
        json="results/tune/{dataset}/{source}.json",
        png="results/tune/{dataset}/{source}.png",
    log:
        "results/logs/tune/{dataset}-{source}.log",
    conda:
        "../envs/cpu.yaml"
    threads: measuring(2)
    resources:
        measure=measure,
        loopback=lambda wildcards: loopback_jobs(wildcards.source),
    params:
        root=lambda wildcards: matrix.source_url(config, wildcards.source, wildcards.dataset),
        args=tune_args,
    shell:
        "dlbench -q tune {params.root} --name {wildcards.dataset} --source {wildcards.source} "
        "--out results/tune/{wildcards.dataset}/{wildcards.source} {params.args} > {log} 2>&1"
