"""A metering HTTP/1.1 proxy: every reader of a source goes through one, so its requests and bytes are counted
whatever library makes them (s3fs, fsspec's HTTP, huggingface_hub, LeRobot's `datasets` streaming).

    python -m dlbench.loopback.meter --target http://127.0.0.1:9770 [--max-requests-per-s 50] [--port-file F]

It relays one request at a time per connection (clients do not pipeline) and keeps, over all connections:
requests, bytes sent to the target (request heads and bodies) and bytes received from it (response heads and
bodies), and the 429/503 answers it saw. `GET /__dlbench_meter__` is answered by the proxy itself with these
counts as JSON. Two policies, both off by default:
  - `max_requests_per_s`: requests leave no faster than this (spaced evenly, over all connections);
  - on 429 or 503 the request is sent again after the answer's Retry-After (seconds), else after an exponential
    backoff (0.1 s doubling, at most 5 s), up to `retries` times; then the client gets the last answer.
`--throttle-rps N` makes it play an overloaded server instead: over N requests in a second it answers 429 itself
(Retry-After: 1) without forwarding, so the policies above can be tested against a real refusal.
The target must speak plain HTTP (a loopback server, an in-cluster store): TLS cannot be metered from outside.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

from .. import atomic
from ..errors import UserError

STATS_PATH = "/__dlbench_meter__"
RETRY_STATUSES = (429, 503)
BACKOFF_S, BACKOFF_MAX_S = 0.1, 5.0


class Meter:
    """The counts and policies shared by every connection of one proxy."""

    def __init__(self, max_requests_per_s: float = 0.0, retries: int = 8, throttle_rps: float = 0.0):
        self.interval = 1.0 / max_requests_per_s if max_requests_per_s else 0.0
        self.retries, self.throttle_rps = retries, throttle_rps
        self.next_send = 0.0
        self.window: list[float] = []  # times of the requests let through in the last second (--throttle-rps)
        self.counts = {"requests": 0, "bytes_up": 0, "bytes_down": 0, "throttled": 0, "retried": 0}

    async def pace(self) -> None:
        """Wait for this request's turn under `max_requests_per_s`."""
        if not self.interval:
            return
        now = time.monotonic()
        at = max(self.next_send, now)
        self.next_send = at + self.interval
        await asyncio.sleep(at - now)

    def over_limit(self) -> bool:
        """(--throttle-rps) Whether this request is one too many for the last second."""
        now = time.monotonic()
        self.window = [t for t in self.window if now - t < 1.0]
        if len(self.window) >= self.throttle_rps:
            return True
        self.window.append(now)
        return False


async def _read_head(reader: asyncio.StreamReader) -> bytes | None:
    """One message head (through the blank line), or None at a clean end of the stream."""
    try:
        return await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as e:
        if e.partial.strip():
            raise ConnectionError("connection closed inside a message head") from None
        return None


def _headers(head: bytes) -> tuple[str, dict[str, str]]:
    """(first line, lower-cased header names -> values) of a message head."""
    lines = head.decode("latin-1").split("\r\n")
    fields = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            fields[name.strip().lower()] = value.strip()
    return lines[0], fields


async def _read_body(
    reader: asyncio.StreamReader, fields: dict[str, str], out: list[bytes] | None, writer=None, counts=None
) -> int:
    """Read a message body framed by Content-Length or chunked encoding; append it to `out` and/or relay it to
    `writer` as it arrives, adding its bytes to `counts["bytes_down"]` as they pass (a long body read while the
    counts are taken is counted as far as it got). Returns its size on the wire."""
    n = 0

    async def put(data: bytes) -> None:
        nonlocal n
        n += len(data)
        if counts is not None:
            counts["bytes_down"] += len(data)
        if out is not None:
            out.append(data)
        if writer is not None:
            writer.write(data)
            await writer.drain()

    async def take(size: int) -> None:
        while size:
            data = await reader.read(min(size, 1 << 16))
            if not data:
                raise ConnectionError("connection closed inside a message body")
            size -= len(data)
            await put(data)

    if "chunked" in fields.get("transfer-encoding", "").lower():
        while True:
            line = await reader.readuntil(b"\r\n")
            await put(line)
            size = int(line.split(b";")[0], 16)
            await take(size + 2)  # the chunk and its CRLF; after the last (empty) chunk, the final CRLF
            if size == 0:
                return n
    await take(int(fields.get("content-length", "0")))
    return n


def _has_body(method: str, status: int) -> bool:
    return method != "HEAD" and status not in (204, 304) and not 100 <= status < 200


def _retry_after(fields: dict[str, str], attempt: int) -> float:
    try:
        return min(float(fields["retry-after"]), BACKOFF_MAX_S)
    except (KeyError, ValueError):
        return min(BACKOFF_S * 2**attempt, BACKOFF_MAX_S)


def _answer(writer, status: int, reason: str, body: bytes, extra: str = "") -> None:
    writer.write(
        f"HTTP/1.1 {status} {reason}\r\nContent-Length: {len(body)}\r\nContent-Type: application/json\r\n"
        f"{extra}\r\n".encode()
        + body
    )


async def _relay(meter: Meter, host: str, port: int, reader, writer) -> None:
    """Serve one client connection: each request goes to the target over one upstream connection."""
    upstream = None
    try:
        while (head := await _read_head(reader)) is not None:
            first, fields = _headers(head)
            method, path = first.split(" ", 2)[:2]
            body: list[bytes] = []
            await _read_body(reader, fields, body)
            if path == STATS_PATH:
                _answer(writer, 200, "OK", json.dumps(meter.counts).encode())
                await writer.drain()
                continue
            if meter.throttle_rps and meter.over_limit():
                meter.counts["throttled"] += 1
                _answer(writer, 429, "Too Many Requests", b'{"error": "slow down"}', "Retry-After: 1\r\n")
                await writer.drain()
                continue
            request = head + b"".join(body)
            for attempt in range(meter.retries + 1):
                await meter.pace()
                if upstream is None:
                    upstream = await asyncio.open_connection(host, port)
                up_r, up_w = upstream
                up_w.write(request)
                await up_w.drain()
                meter.counts["requests"] += 1
                meter.counts["bytes_up"] += len(request)
                rhead = await _read_head(up_r)
                if rhead is None:
                    raise ConnectionError("the target closed the connection without answering")
                status_line, rfields = _headers(rhead)
                status = int(status_line.split(" ", 2)[1])
                meter.counts["bytes_down"] += len(rhead)
                if status in RETRY_STATUSES and attempt < meter.retries:
                    meter.counts["throttled"] += 1
                    meter.counts["retried"] += 1
                    if _has_body(method, status):
                        await _read_body(up_r, rfields, None, counts=meter.counts)
                    await asyncio.sleep(_retry_after(rfields, attempt))
                    continue
                if status in RETRY_STATUSES:
                    meter.counts["throttled"] += 1
                writer.write(rhead)
                if _has_body(method, status):
                    await _read_body(up_r, rfields, None, writer, meter.counts)
                await writer.drain()
                if rfields.get("connection", "").lower() == "close":
                    up_w.close()
                    upstream = None
                break
    except (ConnectionError, OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
        pass
    finally:
        writer.close()
        if upstream is not None:
            upstream[1].close()


async def serve(target: str, listen_host: str, port: int, meter: Meter, port_file: str | None) -> None:
    parts = urlsplit(target)
    if parts.scheme != "http" or not parts.hostname:
        raise UserError(f"{target}: the meter relays plain http://host:port targets only")
    up_host, up_port = parts.hostname, parts.port or 80
    server = await asyncio.start_server(
        lambda r, w: _relay(meter, up_host, up_port, r, w), listen_host, port, limit=1 << 20
    )
    if port_file:
        atomic.write_text(port_file, str(server.sockets[0].getsockname()[1]))
    async with server:
        await server.serve_forever()


class MeterProcess:
    """A metering proxy run as a child process (so that it never shares a thread with forking DataLoaders)."""

    def __init__(self, target: str, max_requests_per_s: float = 0.0, throttle_rps: float = 0.0, log_dir=None):
        self.target = target.rstrip("/")
        port_file = Path(log_dir or "/tmp") / f"meter-{os.getpid()}-{id(self)}.port"
        port_file.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "dlbench.loopback.meter", "--target", self.target, "--port-file", str(port_file)]
        cmd += ["--max-requests-per-s", str(max_requests_per_s), "--throttle-rps", str(throttle_rps)]
        src = str(Path(__file__).parents[2])  # dlbench's own source: the peer environment runs it too
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))}
        self.process = subprocess.Popen(cmd, env=env, start_new_session=True)
        deadline = time.time() + 30
        while not port_file.exists():
            if self.process.poll() is not None or time.time() > deadline:
                self.stop()
                raise UserError(f"the metering proxy for {self.target} did not start (exit {self.process.poll()})")
            time.sleep(0.02)
        self.port = int(port_file.read_text())
        port_file.unlink()
        self.url = f"http://127.0.0.1:{self.port}"

    def counts(self) -> dict[str, int]:
        """The proxy's counts so far (requests, bytes_up, bytes_down, throttled, retried)."""
        with urllib.request.urlopen(self.url + STATS_PATH, timeout=10) as r:
            return json.loads(r.read())

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> MeterProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m dlbench.loopback.meter", description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", required=True, help="the server to relay to: http://host:port")
    ap.add_argument("--host", default="127.0.0.1", help="address to listen on")
    ap.add_argument("--port", type=int, default=0, help="port to listen on (0: any free one)")
    ap.add_argument("--port-file", default=None, help="write the port listened on to this file once listening")
    ap.add_argument("--max-requests-per-s", type=float, default=0.0, help="0: no limit")
    ap.add_argument("--retries", type=int, default=8, help="resends of a request answered 429 or 503")
    ap.add_argument("--throttle-rps", type=float, default=0.0, help="play a server answering 429 over this rate")
    a = ap.parse_args(argv)
    meter = Meter(a.max_requests_per_s, a.retries, a.throttle_rps)
    asyncio.run(serve(a.target, a.host, a.port, meter, a.port_file))


if __name__ == "__main__":
    main()
