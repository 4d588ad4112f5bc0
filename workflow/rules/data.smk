# Datasets: synth (v2.1) or a v2.1 dataset -> convert plan -> work x N -> finalize (v3.0) -> validate;
# a v3.0 dataset is validated where it is.


rule synth:
    output:
        directory("results/datasets/{dataset}/v21"),
    log:
        "results/logs/synth/{dataset}.log",
    wildcard_constraints:
        dataset=SYNTH_DATASETS,
    priority: PREPARE_PRIORITY
    conda:
        "../envs/cpu.yaml"
    threads: 8  # encoding processes; a local run caps it at --cores
    params:
        args=synth_args,
    shell:
        "dlbench synth {output} {params.args} --workers {threads} > {log} 2>&1"


rule convert_plan:
    input:
        lambda wildcards: local_input(matrix.dataset_source(config, wildcards.dataset)),
    output:
        "results/convert/{dataset}/work/manifest.json",
    log:
        "results/logs/convert/{dataset}/plan.log",
    wildcard_constraints:
        dataset=CONVERTED_DATASETS,
    priority: PREPARE_PRIORITY
    conda:
        "../envs/cpu.yaml"
    params:
        src=lambda wildcards: matrix.dataset_source(config, wildcards.dataset),
        work=subpath(output[0], parent=True),
        args=plan_args(),
    shell:
        "dlbench convert plan {params.src:q} {params.work} {params.args} > {log} 2>&1"


rule convert_work:
    input:
        "results/convert/{dataset}/work/manifest.json",
    output:
        "results/convert/{dataset}/workers/worker-{i}.json",
    log:
        "results/logs/convert/{dataset}/work-{i}.log",
    priority: PREPARE_PRIORITY
    conda:
        "../envs/cpu.yaml"
    params:
        work=subpath(input[0], parent=True),
        lease=config["convert"]["lease_timeout_s"],
    shell:
        "dlbench convert work {params.work} --lease-timeout-s {params.lease} --done-marker {output} > {log} 2>&1"


rule convert_finalize:
    input:
        manifest="results/convert/{dataset}/work/manifest.json",
        workers=expand(
            "results/convert/{{dataset}}/workers/worker-{i}.json",
            i=range(config["convert"]["workers"]),
        ),
    output:
        directory("results/datasets/{dataset}/v30"),
    log:
        "results/logs/convert/{dataset}/finalize.log",
    wildcard_constraints:
        dataset=CONVERTED_DATASETS,
    priority: PREPARE_PRIORITY
    conda:
        "../envs/cpu.yaml"
    params:
        work=subpath(input.manifest, parent=True),
    shell:
        "dlbench convert finalize {params.work} {output} > {log} 2>&1"


rule validate_dataset:
    input:
        lambda wildcards: local_input(matrix.v30_path(config, wildcards.dataset)),
    output:
        "results/validate/{dataset}.json",
    log:
        "results/logs/validate/{dataset}.log",
    priority: PREPARE_PRIORITY
    conda:
        "../envs/cpu.yaml"
    params:
        root=lambda wildcards: matrix.v30_path(config, wildcards.dataset),
        args=validate_args,
    shell:
        "dlbench validate {params.root:q} --out {output} {params.args} > {log} 2>&1"


rule convert_scaling:
    """Time a whole local conversion with N workers (results/tables/conversion.csv compares them)."""
    input:
        lambda wildcards: local_input(matrix.dataset_source(config, wildcards.dataset)),
    output:
        "results/convert/{dataset}/scaling/w{n}.json",
    log:
        "results/logs/convert/{dataset}/scaling-w{n}.log",
    wildcard_constraints:
        dataset=CONVERTED_DATASETS,
    conda:
        "../envs/cpu.yaml"
    threads: measuring(lambda wildcards: int(wildcards.n))  # the workers; the coordinator mostly waits
    resources:
        measure=measure,
    params:
        src=lambda wildcards: matrix.dataset_source(config, wildcards.dataset),
        dst="results/convert/{dataset}/scaling/tmp-w{n}",
        args=plan_args(),
    shell:
        "(rm -rf {params.dst} {params.dst}-work && dlbench convert run {params.src:q} {params.dst} "
        "--work {params.dst}-work --workers {wildcards.n} --out {output} --name {wildcards.dataset} "
        "{params.args} && rm -rf {params.dst} {params.dst}-work) > {log} 2>&1"


rule lance_convert:
    """The dataset's Lance copy for loader lance_map, by lerobot-lancedb's own converter (peer env), timed."""
    input:
        lambda wildcards: local_input(matrix.v30_path(config, wildcards.dataset)),
    output:
        lance=directory("results/datasets/{dataset}/lance"),
        record="results/convert/{dataset}/lance.json",
    log:
        "results/logs/convert/{dataset}/lance.log",
    priority: PREPARE_PRIORITY
    conda:
        "../envs/cpu.yaml"
    threads: measuring(1)
    resources:
        measure=measure,
    params:
        root=lambda wildcards: matrix.v30_path(config, wildcards.dataset),
    shell:
        "dlbench lance-convert {params.root:q} {output.lance} --out {output.record} --name {wildcards.dataset} "
        "> {log} 2>&1"
