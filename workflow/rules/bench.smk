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
        run=run_of,
    script:
        "../scripts/run_spec.py"


rule bench:
    input:
        unpack(bench_inputs),
    output:
        directory("results/runs/{scenario}/{run_id}"),
    log:
        "results/logs/bench/{scenario}/{run_id}.log",
    benchmark:
        "results/benchmarks/bench/{scenario}/{run_id}.tsv"
    threads: bench_threads
    resources:
        mem_mb=bench_mem_mb,
        runtime=lambda wildcards: int(run_of(wildcards)["duration_s"] / 60) + 15,
        gpu=lambda wildcards: 1 if run_of(wildcards)["decode_device"] == "cuda" else 0,
        network=lambda wildcards: int(runspec.is_url(run_of(wildcards)["root"])),
        # multi-rank runs on SLURM: one job, `ranks` tasks over `nodes` nodes; the job starts them with srun
        tasks=lambda wildcards: run_of(wildcards)["ranks"],
        nodes=lambda wildcards: run_of(wildcards)["nodes"],
        mpi=lambda wildcards: "srun" if run_of(wildcards)["ranks"] > 1 else "",
        cpus_per_task=lambda wildcards, threads: max(1, threads // run_of(wildcards)["ranks"]),
    conda:
        bench_conda_env
    shell:
        "dlbench -q bench-run --spec {input.spec} --out-dir {output} > {log} 2>&1"
