# One bench job per (scenario, run id); all ranks of the run start together inside it.


rule bench:
    input:
        unpack(bench_inputs),
    output:
        directory("results/runs/{scenario}/{run_id}"),
    log:
        "results/logs/bench/{scenario}/{run_id}.log",
    benchmark:
        "results/benchmarks/bench/{scenario}/{run_id}.tsv"
    params:
        args=bench_args,
    threads: bench_threads
    resources:
        mem_mb=lambda wildcards: (2000 + 1000 * run_of(wildcards)["num_workers"]) * run_of(wildcards)["ranks"],
        runtime=lambda wildcards: int(run_of(wildcards)["duration_s"] / 60) + 15,
        gpu=lambda wildcards: 1 if run_of(wildcards)["decode_device"] == "cuda" else 0,
        network=lambda wildcards: 0 if source_spec(run_of(wildcards)["source"])["type"] == "local" else 1,
        # multi-rank runs on SLURM: one job, `ranks` tasks over `nodes` nodes; the job starts them with srun
        tasks=lambda wildcards: run_of(wildcards)["ranks"],
        nodes=lambda wildcards: run_of(wildcards)["nodes"],
        mpi=lambda wildcards: "srun" if run_of(wildcards)["ranks"] > 1 else "",
        cpus_per_task=lambda wildcards, threads: max(1, threads // run_of(wildcards)["ranks"]),
    conda:
        bench_conda_env
    shell:
        "dlbench -q bench-run {params.args} --out-dir {output} > {log} 2>&1"
