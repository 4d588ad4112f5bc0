# One bench job per (scenario, run id); it reads the validated v3.0 dataset.


rule bench:
    input:
        dataset=f"results/datasets/{DATASET}/v30",
        valid=f"results/validate/{DATASET}.json",
    output:
        json="results/runs/{scenario}/{run_id}/rank0of1.json",
        csv="results/runs/{scenario}/{run_id}/rank0of1.csv",
    log:
        "results/logs/bench/{scenario}/{run_id}.log",
    benchmark:
        "results/benchmarks/bench/{scenario}/{run_id}.tsv"
    params:
        args=bench_args,
    threads: lambda wildcards: run_of(wildcards)["num_workers"] + 1
    resources:
        mem_mb=lambda wildcards: 2000 + 1000 * run_of(wildcards)["num_workers"],
        runtime=lambda wildcards: int(run_of(wildcards)["duration_s"] / 60) + 10,
    conda:
        "../envs/cpu.yaml"
    shell:
        "dlbench -q bench --dataset {input.dataset} {params.args} --out {output.json} > {log} 2>&1"
