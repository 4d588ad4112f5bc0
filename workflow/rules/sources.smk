# Sources: stage the converted dataset to remote sources, and check that "warm" sources really are.
rule stage_source:
    input:
        LOCAL_V30,
    output:
        temp("results/sources/{source}.staged.json"),
    log:
        "results/logs/sources/stage-{source}.log",
    params:
        url=lambda wildcards: source_url(wildcards.source),
        spec=lambda wildcards: source_spec_arg(wildcards.source),
    resources:
        network=1,
    conda:
        "../envs/cpu.yaml"
    shell:
        "dlbench stage {input} {params.url} --marker {output} --source-spec {params.spec} > {log} 2>&1"


rule prewarm_check:
    input:
        prewarm_inputs,
    output:
        "results/prewarm/{source}.json",
    log:
        "results/logs/sources/prewarm-{source}.log",
    params:
        url=lambda wildcards: source_url(wildcards.source),
        spec=lambda wildcards: source_spec_arg(wildcards.source),
        p=lambda wildcards: source_spec(wildcards.source)["prewarm"],
    resources:
        network=1,
    conda:
        "../envs/cpu.yaml"
    shell:
        "dlbench prewarm-check {params.url} --out {output} --source-spec {params.spec} --files {params.p[files]} "
        "--range-mb {params.p[range_mb]} --ttfb-ms-max {params.p[ttfb_ms_max]} --mbps-min {params.p[mbps_min]} "
        "> {log} 2>&1"
