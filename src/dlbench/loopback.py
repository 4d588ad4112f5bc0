"""A real S3-compatible server on loopback (moto's server mode), optionally behind shaping proxies.

`start(port, proxies, state)` starts `python -m moto.server` on 127.0.0.1:port and, for each
(listen_port, latency_ms, bandwidth_mbps), a TCP proxy that delays every response's first byte by `latency_ms` and
limits throughput to `bandwidth_mbps`, so one server can look like a far, cold bucket and a near, warm one. The PIDs
go to the `state` JSON; `stop(state)` ends exactly those processes. Loopback only.

    python -m dlbench.loopback proxy --listen 9771 --target 9770 --latency-ms 80 --bandwidth-mbps 200
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from . import io
from .errors import UserError

HOST = "127.0.0.1"


def _wait_port(port: int, timeout_s: float = 30.0) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            with socket.create_connection((HOST, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise UserError(f"loopback server on port {port} did not start in {timeout_s:.0f} s")


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex((HOST, port)) != 0


def start(port: int, proxies: list[tuple[int, float, float]], state: str | Path, log_dir: str | Path) -> dict:
    """Start the server and its proxies (unless the `state` file says they already run); return the state."""
    state, log_dir = Path(state), Path(log_dir)
    if state.exists():
        current = json.loads(state.read_text())
        if all(_alive(p) for p in current["pids"]):
            return current
        stop(state)
    for p in [port, *(lp for lp, _, _ in proxies)]:
        if not _port_free(p):
            raise UserError(f"port {p} on {HOST} is taken; pick another loopback port in config.yaml (sources)")
    log_dir.mkdir(parents=True, exist_ok=True)
    pids = []
    with open(log_dir / "moto.log", "ab") as log:
        pids.append(subprocess.Popen([sys.executable, "-m", "moto.server", "-H", HOST, "-p", str(port)],
                                     stdout=log, stderr=log, start_new_session=True).pid)
    _wait_port(port)
    for listen, latency_ms, mbps in proxies:
        with open(log_dir / f"proxy-{listen}.log", "ab") as log:
            pids.append(subprocess.Popen([sys.executable, "-m", "dlbench.loopback", "proxy", "--listen", str(listen),
                                          "--target", str(port), "--latency-ms", str(latency_ms),
                                          "--bandwidth-mbps", str(mbps)],
                                         stdout=log, stderr=log, start_new_session=True).pid)
        _wait_port(listen)
    info = {"port": port, "proxies": [list(p) for p in proxies], "pids": pids, "started": time.time()}
    io.write_json(state, info)
    return info


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False


def stop(state: str | Path) -> None:
    """End the processes recorded in `state` (and nothing else), then remove it."""
    state = Path(state)
    if not state.exists():
        return
    for pid in json.loads(state.read_text())["pids"]:
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass
    state.unlink()


async def _proxy(listen: int, target: int, latency_s: float, bytes_per_s: float) -> None:
    async def handle(reader, writer):
        try:
            up_r, up_w = await asyncio.open_connection(HOST, target)
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
                if bytes_per_s:
                    await asyncio.sleep(len(data) / bytes_per_s)
                writer.write(data)
                await writer.drain()
            writer.close()

        try:
            await asyncio.gather(upstream(), downstream())
        except (ConnectionError, OSError):
            writer.close()

    server = await asyncio.start_server(handle, HOST, listen)
    async with server:
        await server.serve_forever()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m dlbench.loopback")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("proxy", help="a shaping TCP proxy on loopback")
    p.add_argument("--listen", type=int, required=True)
    p.add_argument("--target", type=int, required=True)
    p.add_argument("--latency-ms", type=float, default=0.0)
    p.add_argument("--bandwidth-mbps", type=float, default=0.0, help="0: unlimited")
    a = ap.parse_args(argv)
    asyncio.run(_proxy(a.listen, a.target, a.latency_ms / 1000.0, a.bandwidth_mbps * 1e6 / 8))


if __name__ == "__main__":
    main()
