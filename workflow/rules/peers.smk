# Named peers (config.yaml `peers:`): each an environment with its own LeRobot, built once into .peers/NAME by
# scripts/peer-env.sh; the bench jobs of `lerobot_map@NAME` / `lerobot_stream@NAME` runs wait for it.


localrules:
    peer_env,


rule peer_env:
    output:
        ".peers/{name}/.dlbench-peer-ready",
    log:
        "results/logs/peers/{name}.log",
    priority: PREPARE_PRIORITY
    conda:
        "../envs/cpu.yaml"  # the driver; the peer's own Python 3.12 venv is what the script builds
    params:
        requirement=lambda wildcards: configured(matrix.peer_requirement, config, wildcards.name),
    shell:
        "PEER_VENV=.peers/{wildcards.name} PEER_REQUIREMENT={params.requirement:q} scripts/peer-env.sh > {log} 2>&1"
