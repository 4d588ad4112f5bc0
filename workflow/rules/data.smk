# Dataset preparation: synth (v2.1) -> convert plan -> work x N -> finalize (v3.0) -> validate.


rule synth:
    output:
        directory("results/datasets/{dataset}/v21"),
    log:
        "results/logs/synth/{dataset}.log",
    params:
        args=synth_args(),
    threads: 8  # encoding processes; a local run caps it at --cores
    conda:
        "../envs/cpu.yaml"
    shell:
        "dlbench synth {output} {params.args} --workers {threads} > {log} 2>&1"


rule convert_plan:
    input:
        "results/datasets/{dataset}/v21",
    output:
        "results/convert/{dataset}/work/manifest.json",
    log:
        "results/logs/convert/{dataset}/plan.log",
    params:
        work=subpath(output[0], parent=True),
        args=plan_args(),
    conda:
        "../envs/cpu.yaml"
    shell:
        "dlbench convert plan {input} {params.work} {params.args} > {log} 2>&1"


rule convert_work:
    input:
        "results/convert/{dataset}/work/manifest.json",
    output:
        "results/convert/{dataset}/workers/worker-{i}.json",
    log:
        "results/logs/convert/{dataset}/work-{i}.log",
    params:
        work=subpath(input[0], parent=True),
        lease=config["convert"]["lease_timeout_s"],
    conda:
        "../envs/cpu.yaml"
    shell:
        "dlbench convert work {params.work} --lease-timeout-s {params.lease} --done-marker {output} > {log} 2>&1"


rule convert_finalize:
    input:
        manifest="results/convert/{dataset}/work/manifest.json",
        workers=expand("results/convert/{{dataset}}/workers/worker-{i}.json", i=range(CONVERT_WORKERS)),
    output:
        directory("results/datasets/{dataset}/v30"),
    log:
        "results/logs/convert/{dataset}/finalize.log",
    params:
        work=subpath(input.manifest, parent=True),
    conda:
        "../envs/cpu.yaml"
    shell:
        "dlbench convert finalize {params.work} {output} > {log} 2>&1"


rule validate_dataset:
    input:
        "results/datasets/{dataset}/v30",
    output:
        "results/validate/{dataset}.json",
    log:
        "results/logs/validate/{dataset}.log",
    conda:
        "../envs/cpu.yaml"
    shell:
        "dlbench validate {input} --report {output} > {log} 2>&1"


rule convert_scaling:
    """Time a whole local conversion with N workers (results/tables/conversion.csv compares them)."""
    input:
        "results/datasets/{dataset}/v21",
    output:
        "results/convert/{dataset}/scaling/w{n}.json",
    log:
        "results/logs/convert/{dataset}/scaling-w{n}.log",
    params:
        dst="results/convert/{dataset}/scaling/tmp-w{n}",
        args=plan_args(),
    threads: lambda wildcards: int(wildcards.n)  # the workers; the coordinating process mostly waits
    conda:
        "../envs/cpu.yaml"
    shell:
        "(rm -rf {params.dst} {params.dst}-work && dlbench convert run {input} {params.dst} --work {params.dst}-work "
        "--workers {wildcards.n} --record {output} --name {wildcards.dataset} {params.args} && "
        "rm -rf {params.dst} {params.dst}-work) > {log} 2>&1"
