"""A small keep-alive HTTP/1.1 load generator (asyncio, raw sockets): N connections, each sending the same
request back to back for a fixed duration. Lean enough that the server, not the generator, is measured."""
from __future__ import annotations

import asyncio
import time


async def _worker(host: str, port: int, request: bytes, deadline: float, latencies: list[float], errors: list[str], statuses: dict):
    reader, writer = await asyncio.open_connection(host, port)
    try:
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head[9:12])
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            if length:
                await reader.readexactly(length)
            latencies.append(time.perf_counter() - started)
            statuses[status] = statuses.get(status, 0) + 1
            if b"connection: close" in head.lower():
                writer.close()
                reader, writer = await asyncio.open_connection(host, port)
    except Exception as exc:  # record and stop this connection
        errors.append(repr(exc))
    finally:
        writer.close()


async def run_load(host: str, port: int, request: bytes | list[bytes], *, connections: int, seconds: float) -> dict:
    """`request` may be a list: connection i sends request[i % len] (e.g. one session per client)."""
    requests = request if isinstance(request, list) else [request]
    latencies: list[float] = []
    errors: list[str] = []
    statuses: dict[int, int] = {}
    started = time.perf_counter()
    deadline = started + seconds
    await asyncio.gather(*[_worker(host, port, requests[i % len(requests)], deadline, latencies, errors, statuses)
                           for i in range(connections)])
    elapsed = time.perf_counter() - started
    return {"requests": len(latencies), "elapsed_s": elapsed, "rps": len(latencies) / elapsed,
            "latencies": latencies, "errors": errors[:5], "error_count": len(errors), "statuses": statuses}


def build_request(method: str, path: str, host: str, port: int, body: bytes = b"", headers: dict | None = None) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}:{port}", "Connection: keep-alive"]
    for key, value in (headers or {}).items():
        lines.append(f"{key}: {value}")
    if body or method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body
