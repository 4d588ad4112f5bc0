# Sources: stage a dataset to a remote source (under its name), and check that "warm" sources really are.


rule stage_source:
    input:
        lambda wildcards: matrix.v30_path(config, wildcards.dataset),
    output:
        temp("results/sources/{source}/{dataset}.staged.json"),
    log:
        "results/logs/sources/stage-{source}-{dataset}.log",
    wildcard_constraints:
        dataset="|".join(map(re.escape, config["datasets"])),  # not "<name>.lance": stage_lance's
    priority: PREPARE_PRIORITY
    conda:
        "../envs/cpu.yaml"
    resources:
        measure=measure,  # uploading loads the server and the network that runs measure
        loopback=lambda wildcards: loopback_jobs(wildcards.source),
    params:
        url=lambda wildcards: matrix.source_url(config, wildcards.source, wildcards.dataset),
        endpoint=lambda wildcards: endpoint_args(wildcards.source),
    shell:
        "dlbench stage {input} {params.url} --marker {output} {params.endpoint} > {log} 2>&1"


rule prewarm_check:
    input:
        prewarm_inputs,
    output:
        "results/prewarm/{source}/{dataset}.json",
    log:
        "results/logs/sources/prewarm-{source}-{dataset}.log",
    priority: PREPARE_PRIORITY
    conda:
        "../envs/cpu.yaml"
    threads: measuring(1)
    resources:
        measure=measure,
        loopback=lambda wildcards: loopback_jobs(wildcards.source),
    params:
        url=lambda wildcards: matrix.source_url(config, wildcards.source, wildcards.dataset),
        endpoint=lambda wildcards: endpoint_args(wildcards.source),
        p=lambda wildcards: SOURCES[wildcards.source].spec["prewarm"],
    shell:
        "dlbench prewarm-check {params.url} --out {output} {params.endpoint} --files {params.p[files]} "
        "--range-mb {params.p[range_mb]} --ttfb-ms-max {params.p[ttfb_ms_max]} --mbps-min {params.p[mbps_min]} "
        "> {log} 2>&1"


rule stage_lance:
    """The dataset's Lance copy staged beside its v3.0 form, for lance_map runs on an S3 source."""
    input:
        "results/datasets/{dataset}/lance",
    output:
        temp("results/sources/{source}/{dataset}.lance.staged.json"),
    log:
        "results/logs/sources/stage-lance-{source}-{dataset}.log",
    priority: PREPARE_PRIORITY
    conda:
        "../envs/cpu.yaml"
    resources:
        measure=measure,
        loopback=lambda wildcards: loopback_jobs(wildcards.source),
    params:
        url=lambda wildcards: matrix.lance_url(config, wildcards.source, wildcards.dataset),
        endpoint=lambda wildcards: endpoint_args(wildcards.source),
    shell:
        "dlbench stage {input} {params.url} --marker {output} {params.endpoint} > {log} 2>&1"
