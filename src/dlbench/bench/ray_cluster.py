"""The Ray cluster of a ray_data run of several ranks, started and stopped by its job (`launch.launch`).

Ray's model is one Ray node per host, shared by every process there: so a run of W ranks starts one cluster, not W
instances. The head runs on the job's first node (where `launch` runs), a worker joins from each other node of the
allocation (one `srun` step, sharing the ranks' CPUs: `--overlap`), and the ranks connect to it as drivers
(`adapters.ray_data.start_ray`), each waiting until every node has joined. Both are `ray start --block`, which stops
the Ray processes it started when it is terminated, so nothing outlives the job. Ray's own logs are in
`<out_dir>/ray.log`.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from ..errors import UserError

RAY_ADDRESS_ENV = "DLBENCH_RAY_ADDRESS"  # the cluster's address, for the ranks
RAY_NODES_ENV = "DLBENCH_RAY_NODES"  # how many nodes a rank waits for before it reads
HEAD_TIMEOUT_S = 60.0
LOG = "ray.log"


TMPDIR_ENV = "RAY_TMPDIR"  # the root of a Ray node's sockets, session and logs (default /tmp)


def node_name() -> str:
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def node_temp_dir(port: int | str, node: str) -> str:
    """The cluster's temporary directory (sockets, session, logs), of its own per job: removed with the job, never
    another job's. Ray gives the nodes that join the head's. Short: a socket path is at most 107 bytes."""
    return f"/tmp/ray-{port}-{node}"


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _cpus() -> list[str]:
    """The CPUs a Ray node may use: the job's per-task CPUs on SLURM, else Ray's own count."""
    cpus = os.environ.get("SLURM_CPUS_PER_TASK")
    return [f"--num-cpus={cpus}"] if cpus else []


def _stop(proc: subprocess.Popen | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _wait_for_head(head: subprocess.Popen, host: str, port: int, log: Path) -> None:
    deadline = time.time() + HEAD_TIMEOUT_S
    while time.time() < deadline:
        if head.poll() is not None:
            raise UserError(f"the Ray head did not start (exit {head.returncode}); see {log}")
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1):
            return
        time.sleep(0.5)
    raise UserError(f"the Ray head did not listen on {host}:{port} within {HEAD_TIMEOUT_S:.0f} s; see {log}")


def _tell(log_path: Path, died: list[str]) -> None:
    """The error lines of Ray's log, on stderr, after its head or worker step ended before the ranks did."""
    import sys

    lines = log_path.read_text(errors="replace").splitlines()
    errors = [line for line in lines if any(w in line for w in ("ERROR", "PANIC", "Error", "error:"))]
    print(f"ray: the {' and '.join(died)} ended before the ranks; from {log_path}:", file=sys.stderr)
    for line in errors[-10:] or lines[-10:]:
        print(f"  {line}", file=sys.stderr)


@contextlib.contextmanager
def ray_cluster(ray: Path, nodes: int, use_srun: bool, env: dict, out_dir: Path) -> Iterator[dict]:
    """Start the cluster (`ray`: the peer environment's `ray` command), yield the ranks' environment, stop it."""
    from ..loopback import routable_address

    across = use_srun and nodes > 1
    # the address Ray gives the head anyway (it takes a loopback address for this machine's); other nodes reach it
    host = routable_address() or "127.0.0.1"
    port = _free_port(host)
    # a token of this job's own: Ray's token auth (on by default) without a file in $HOME shared by other jobs
    env = {**env, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    # stopped once every rank has ended: nothing to drain (Ray waits out 30 s for idle workers otherwise)
    env["RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S"] = "0"
    log_path = out_dir / LOG
    with open(log_path, "ab") as log:
        start = [str(ray), "start", "--block", "--disable-usage-stats", *_cpus()]
        head_only = ["--head", "--include-dashboard=false", f"--node-ip-address={host}", f"--port={port}"]
        here = node_name()
        head = subprocess.Popen(
            [*start, *head_only], env={**env, TMPDIR_ENV: node_temp_dir(port, here)}, stdout=log, stderr=log
        )
        workers = None
        try:
            _wait_for_head(head, host, port, log_path)
            if across:
                step = ["srun", f"--nodes={nodes - 1}", f"--ntasks={nodes - 1}", "--ntasks-per-node=1", "--overlap"]
                join = [*start, f"--address={host}:{port}"]  # the head's temporary directory: Ray passes it on
                workers = subprocess.Popen([*step, f"--exclude={here}", *join], env=env, stdout=log, stderr=log)
            yield {**env, RAY_ADDRESS_ENV: f"{host}:{port}", RAY_NODES_ENV: str(nodes if across else 1)}
        finally:
            died = [name for name, p in (("head", head), ("worker step", workers)) if p and p.poll() is not None]
            _stop(workers)
            _stop(head)
            shutil.rmtree(node_temp_dir(port, here), ignore_errors=True)  # this node's; ray.log keeps its output
            if died:  # its log lives in the run's directory, which a failed job loses: its errors go to the job's
                _tell(log_path, died)
