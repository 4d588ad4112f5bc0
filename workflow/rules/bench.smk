# One spec file and one bench job per (scenario, run id); all ranks of the run start together inside the job.


localrules:
    run_spec,


rule run_spec:
    output:
        "results/specs/{scenario}/{run_id}.json",
    log:
        "results/logs/specs/{scenario}/{run_id}.log",
    conda:
        "../envs/cpu.yaml"
    params:
        run=lambda wildcards: run_of(wildcards).to_dict(),
    script:
        "../scripts/run_spec.py"


# Two rules with one recipe, so a profile can send cuda runs (only) to a GPU partition: set-resources: bench_cuda.
rule bench:
    input:
        unpack(bench_inputs),
    output:
        directory("results/runs/{scenario}/{run_id}"),
    log:
        "results/logs/bench/{scenario}/{run_id}.log",
    benchmark:
        "results/benchmarks/bench/{scenario}/{run_id}.tsv"
    wildcard_constraints:
        run_id=".*-cpu",
    priority: bench_priority
    conda:
        "../envs/cpu.yaml"
    threads: measuring(bench_threads)
    resources:
        **BENCH_RESOURCES,
    shell:
        "dlbench -q bench-run --spec {input.spec} --out-dir {output} > {log} 2>&1"


use rule bench as bench_cuda with:
    wildcard_constraints:
        run_id=".*-cuda",
    conda:
        "../envs/cuda.yaml"
    resources:
        **BENCH_RESOURCES,
        gpu=1,
