# Re-encoded datasets (`datasets: NAME: {reencode: {from: OTHER, codec: ...}}`): OTHER's v3.0 form -> reencode ->
# results/datasets/NAME/v30, then validated and benchmarked like any dataset. What each encoding costs and gives, per
# camera (bytes, decode in order and at random, PSNR/SSIM against its source): results/tables/encodings.csv.


localrules:
    encodings_table,


rule reencode:
    input:
        lambda wildcards: local_input(source_root(wildcards)),
    output:
        dataset=directory("results/datasets/{dataset}/v30"),
        record="results/encodings/{dataset}/reencode.json",
    log:
        "results/logs/reencode/{dataset}.log",
    wildcard_constraints:
        dataset=REENCODED_DATASETS,
    priority: PREPARE_PRIORITY
    conda:
        "../envs/cpu.yaml"
    threads: 8  # FFmpeg threads in all; a local run caps it at --cores
    params:
        src=source_root,
        args=reencode_args,
        workers=lambda wildcards: config["datasets"][wildcards.dataset]["reencode"]["workers"],
    shell:
        "dlbench reencode {params.src:q} {output.dataset} {params.args} --workers {params.workers} "
        "--threads {threads} --out {output.record} > {log} 2>&1"


rule encoding:
    """Bytes, decode cost and quality of one dataset's encoding, per camera (timed: one measuring job at a time)."""
    input:
        unpack(encoding_inputs),
    output:
        "results/encodings/{dataset}/encoding.json",
    log:
        "results/logs/encoding/{dataset}.log",
    conda:
        "../envs/cpu.yaml"
    threads: measuring(1)
    resources:
        measure=measure,
    params:
        root=lambda wildcards: matrix.v30_path(config, wildcards.dataset),
        args=encoding_args,
    shell:
        "dlbench encoding {params.root:q} --name {wildcards.dataset} {params.args} --out {output} > {log} 2>&1"


rule encodings_table:
    input:
        [f"results/encodings/{d}/encoding.json" for d in ENCODED_DATASETS],
    output:
        table=report("results/tables/encodings.csv", caption="../report/encodings_table.rst", category="Tables"),
        plot=report("results/plots/encodings.png", caption="../report/encodings.rst", category="Plots"),
    log:
        "results/logs/encodings_table.log",
    conda:
        "../envs/cpu.yaml"
    shell:
        "dlbench -q encodings-table {input} --out {output.table} --plot {output.plot} > {log} 2>&1"
