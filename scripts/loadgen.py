"""Closed-loop load generator (httpx asyncio): latency p50/p99 and throughput per concurrency level.

    python scripts/loadgen.py --bundle BUNDLE                  # spawns `redkit serve --bundle BUNDLE`
    python scripts/loadgen.py --bundle BUNDLE --workers 2      # ... with 2 worker processes
    python scripts/loadgen.py --bundle BUNDLE --max-batch 1    # no dynamic batching, for comparison
    python scripts/loadgen.py --url http://127.0.0.1:8000      # an already running server

    python scripts/loadgen.py --bundle BUNDLE --engine raw     # a minimal asyncio HTTP/1.1 client instead of httpx

Each level runs `--duration` seconds (after a short warm-up) with C coroutines, each sending its next request
as soon as the previous one is answered. Only loopback targets are spawned; the run ends by itself.

Why `--engine raw`: httpx costs ~2 ms of client CPU per request, several times what the server spends, so
on a small machine an httpx client saturates before the server does. The raw engine (keep-alive, one
connection per user, Content-Length only) costs a fraction of that and shows the server's own limits.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
# Short queries (10 words) of the kind intent classifiers answer.
WORDS = "card charge refund flight hotel booking delay lost account password music song contract invoice".split()


@dataclass
class Level:
    concurrency: int
    requests: int
    errors: int  # non-200 answers and transport errors, by kind in `error_kinds`
    error_kinds: dict[str, int]
    rps: float
    texts_per_s: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    mean_batch: float | None  # texts per model call, from /metrics (single worker only)
    client_cpu: float  # cores used by this load generator
    server_cpu: float | None  # cores used by the spawned server's process tree (Linux /proc)


def _tree_cpu_seconds(pid: int | None) -> float | None:
    """utime + stime of a process and its children (uvicorn workers), from /proc; None if unavailable."""
    if pid is None or not Path("/proc").is_dir():
        return None
    tick = os.sysconf("SC_CLK_TCK")
    stats = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        stats[int(stat.parent.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick)  # ppid, cpu s
    tree, frontier = {pid}, [pid]
    while frontier:
        parent = frontier.pop()
        children = [p for p, (ppid, _) in stats.items() if ppid == parent and p not in tree]
        tree.update(children)
        frontier += children
    return sum(stats[p][1] for p in tree if p in stats)


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def _batch_totals(text: str) -> tuple[float, float]:
    values = {
        line.split(" ")[0]: float(line.split(" ")[1])
        for line in text.splitlines()
        if line.startswith(("redkit_batch_size_texts_sum", "redkit_batch_size_texts_count"))
    }
    return values.get("redkit_batch_size_texts_sum", 0.0), values.get("redkit_batch_size_texts_count", 0.0)


class RawConnection:
    """Just enough HTTP/1.1 for POST /v1/predict on a keep-alive connection (the server always sends Content-Length)."""

    def __init__(self, url: httpx.URL) -> None:
        self.host, self.port = url.host, url.port or 80
        self.streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def post_json(self, path: str, payload: object) -> int:
        if self.streams is None:
            self.streams = await asyncio.open_connection(self.host, self.port)  # asyncio sets TCP_NODELAY
        reader, writer = self.streams
        body = json.dumps(payload).encode()
        writer.write(
            b"POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (path.encode(), self.host.encode(), len(body), body)
        )
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")
        )
        await reader.readexactly(length)
        return int(head.split(b" ", 2)[1])

    def close(self) -> None:
        if self.streams is not None:
            self.streams[1].close()
            self.streams = None


async def run_level(
    client: httpx.AsyncClient,
    concurrency: int,
    duration: float,
    texts_per_request: int,
    warmup: float,
    scrape: bool,
    server_pid: int | None,
    engine: str,
) -> Level:
    latencies: list[float] = []
    error_kinds: dict[str, int] = {}
    counter = 0
    raw = [RawConnection(client.base_url) for _ in range(concurrency)]

    async def user(seed: int, until: float, record: bool) -> None:
        nonlocal counter
        rng = random.Random(seed)
        while time.perf_counter() < until:
            counter += 1
            texts = [f"{counter} " + " ".join(rng.choices(WORDS, k=10)) for _ in range(texts_per_request)]
            start = time.perf_counter()
            try:
                if engine == "raw":
                    status = await raw[seed % concurrency].post_json("/v1/predict", {"texts": texts})
                else:
                    status = (await client.post("/v1/predict", json={"texts": texts})).status_code
                outcome = "ok" if status == 200 else str(status)
            except (httpx.HTTPError, OSError, asyncio.IncompleteReadError, ValueError) as exc:
                outcome = type(exc).__name__
                raw[seed % concurrency].close()
            if record:
                if outcome == "ok":
                    latencies.append(time.perf_counter() - start)
                else:
                    error_kinds[outcome] = error_kinds.get(outcome, 0) + 1

    await asyncio.gather(*(user(i, time.perf_counter() + warmup, False) for i in range(concurrency)))
    before = _batch_totals((await client.get("/metrics")).text) if scrape else (0.0, 0.0)
    server0, cpu0, wall0 = _tree_cpu_seconds(server_pid), time.process_time(), time.perf_counter()
    await asyncio.gather(*(user(1000 + i, wall0 + duration, True) for i in range(concurrency)))
    wall = time.perf_counter() - wall0
    cpu = time.process_time() - cpu0
    server1 = _tree_cpu_seconds(server_pid)
    for connection in raw:
        connection.close()
    after = _batch_totals((await client.get("/metrics")).text) if scrape else (0.0, 0.0)
    batches = after[1] - before[1]
    ms = sorted(x * 1000 for x in latencies)
    return Level(
        concurrency,
        len(ms),
        sum(error_kinds.values()),
        error_kinds,
        len(ms) / wall,
        len(ms) * texts_per_request / wall,
        _percentile(ms, 0.50),
        _percentile(ms, 0.90),
        _percentile(ms, 0.99),
        ms[-1] if ms else float("nan"),
        (after[0] - before[0]) / batches if scrape and batches else None,
        cpu / wall,
        (server1 - server0) / wall if server0 is not None and server1 is not None else None,
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spawn(args: argparse.Namespace) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    cmd = [
        sys.executable,
        "-m",
        "redkit.cli",
        "serve",
        "--bundle",
        str(args.bundle),
        "--port",
        str(port),
        "--workers",
        str(args.workers),
        "--max-batch",
        str(args.max_batch),
        "--batch-wait-ms",
        str(args.batch_wait_ms),
    ]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    process = subprocess.Popen(cmd, cwd=ROOT, stderr=subprocess.DEVNULL)
    started = time.perf_counter()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    ready = 0
    while ready < 2 * args.workers:  # several 200s in a row: with N workers each has loaded its model
        if time.monotonic() > deadline or process.poll() is not None:
            process.kill()
            raise RuntimeError("server did not become ready")
        try:
            ready = ready + 1 if httpx.get(url + "/health", timeout=1).status_code == 200 else 0
        except httpx.HTTPError:
            ready = 0
        time.sleep(0.05)
    print(f"server ready {time.perf_counter() - started:.2f} s after start ({args.workers} worker(s))")
    return process, url


async def run_all(url: str, args: argparse.Namespace, server_pid: int | None) -> list[Level]:
    levels = [int(c) for c in args.concurrency.split(",")]
    limits = httpx.Limits(max_connections=max(levels), max_keepalive_connections=max(levels))
    async with httpx.AsyncClient(base_url=url, timeout=30, limits=limits) as client:
        return [
            await run_level(
                client,
                c,
                args.duration,
                args.texts_per_request,
                args.warmup,
                args.workers == 1,
                server_pid,
                args.engine,
            )
            for c in levels
        ]


def table(results: list[Level], title: str) -> str:
    lines = [
        f"**{title}**",
        "",
        "| concurrency | requests | errors | req/s | texts/s | p50 ms | p90 ms | p99 ms | max ms | texts/model call "
        "| client CPU | server CPU |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        batch = f"{r.mean_batch:.1f}" if r.mean_batch is not None else "n/a"
        errors = ", ".join(f"{n}x{kind}" for kind, n in sorted(r.error_kinds.items())) or "0"
        lines.append(
            f"| {r.concurrency} | {r.requests} | {errors} | {r.rps:.0f} | {r.texts_per_s:.0f} | {r.p50_ms:.1f} | "
            f"{r.p90_ms:.1f} | {r.p99_ms:.1f} | {r.max_ms:.1f} | {batch} | {r.client_cpu:.2f} | "
            f"{'n/a' if r.server_cpu is None else f'{r.server_cpu:.2f}'} |"
        )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", help="an already running server (else one is spawned on a free loopback port)")
    p.add_argument("--concurrency", default="1,4,16,64")
    p.add_argument("--duration", type=float, default=5.0, help="seconds measured per level")
    p.add_argument("--warmup", type=float, default=0.5)
    p.add_argument("--texts-per-request", type=int, default=1)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--max-batch", type=int, default=64)
    p.add_argument("--batch-wait-ms", type=float, default=0.0)
    p.add_argument("--threads", type=int, default=None, help="ONNX Runtime threads per worker")
    p.add_argument("--bundle", type=Path, help="the bundle to serve (a spawned server)")
    p.add_argument("--engine", choices=["httpx", "raw"], default="httpx", help="the client (see above)")
    p.add_argument("--json", type=Path, help="also write the results here")
    args = p.parse_args()
    if not args.url and not args.bundle:
        p.error("give --bundle (a server is spawned) or --url")
    process, url = (None, args.url) if args.url else spawn(args)
    try:
        load = os.getloadavg()[0]
        results = asyncio.run(run_all(url, args, process.pid if process is not None else None))
    finally:
        if process is not None:
            process.terminate()
            process.wait(timeout=30)
    server = "redkit serve" if process is not None else args.url
    title = (
        f"{args.engine} client -> {server}, workers={args.workers}, max_batch={args.max_batch}, "
        f"batch_wait_ms={args.batch_wait_ms}, "
        f"{args.texts_per_request} text(s)/request, {args.duration:g} s/level, load avg before {load:.2f}"
    )
    print(table(results, title))
    if args.json:
        args.json.write_text(json.dumps({"title": title, "levels": [asdict(r) for r in results]}, indent=1))


if __name__ == "__main__":
    main()
