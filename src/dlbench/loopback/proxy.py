"""A shaping TCP proxy in front of the loopback S3 server, so that it looks like remote storage: every response's
first byte is delayed by `--latency-ms`, and all of the proxy's connections together are capped at
`--bandwidth-mbps`. `dlbench.loopback.start` runs one per shaped source:

    python -m dlbench.loopback proxy --host 127.0.0.1 --listen 9771 --target 9770 --latency-ms 80 --bandwidth-mbps 200
"""

from __future__ import annotations

import argparse
import asyncio
import time

from .server import LOOPBACK


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
    h = sub.add_parser(
        "hub", help="a Hugging Face Hub serving dataset repos and storage buckets (dlbench.loopback.hub)"
    )
    h.add_argument("--repos", required=True, help="directory holding ORG/NAME/ repo trees")
    h.add_argument("--buckets", default=None, help="directory holding OWNER/NAME/ storage buckets")
    h.add_argument("--host", default=LOOPBACK, help="address to listen on")
    h.add_argument("--port", type=int, default=0, help="port to listen on; 0: a free one, printed at start")
    a = ap.parse_args(argv)
    if a.cmd == "hub":
        from .hub import run

        return run(a.repos, a.host, a.port, a.buckets)
    asyncio.run(_proxy(a.host, a.listen, a.target, a.latency_ms / 1000.0, a.bandwidth_mbps * 1e6 / 8))
