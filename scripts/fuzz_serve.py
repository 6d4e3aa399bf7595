"""Fuzz `redkit serve` with random and malformed requests; fail on any 5xx or if it stops answering /health.

    python scripts/fuzz_serve.py --bundle BUNDLE          # starts its own server on BUNDLE, 2500 requests
    python scripts/fuzz_serve.py --url http://127.0.0.1:8000 --requests 5000 --seed 7

Requests are well-formed HTTP carrying bad content (httpx), plus a share of raw-socket requests with
broken HTTP framing. Every request is bounded (timeouts), and the run stops by itself.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import socket
import string
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx

TOKEN = "fuzz-admin-token-0123456789"
CONTENT_TYPES = [
    "application/json",
    "application/json; charset=utf-8",
    "application/vnd.api+json",
    "text/plain",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x",
    "",
    "json",
    "application/",
    "application/json; charset=latin-1",
    "*/*",
    "application/xml",
]
PATHS = [
    "/v1/predict",
    "/v1/predict/",
    "/v1/info",
    "/health",
    "/metrics",
    "/v1/domains",
    "/v1/domains/x",
    "/",
    "/v1/predict?texts=a",
    "/v1/PREDICT",
    "/v1/%00",
    "/v1/domains/%2e%2e%2f",
    "/docs",
    "/openapi.json",
]
METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"]


@dataclass
class FuzzReport:
    statuses: Counter[int] = field(default_factory=Counter)
    server_errors: list[str] = field(default_factory=list)  # "METHOD path -> status: body"
    transport_errors: list[str] = field(default_factory=list)
    raw_sent: int = 0

    @property
    def total(self) -> int:
        return sum(self.statuses.values()) + len(self.transport_errors)


class _ErrorLog(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        exc_type = record.exc_info[0] if record.exc_info else None
        self.messages.append(record.getMessage() + (f" ({exc_type.__name__})" if exc_type else ""))


@contextmanager
def server_errors_logged() -> Iterator[list[str]]:
    """ERROR records of an in-process server (uvicorn/our logger): a 500 the client never saw still counts."""
    handler = _ErrorLog()
    loggers = [logging.getLogger(name) for name in ("uvicorn.error", "redkit.serve")]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        yield handler.messages
    finally:
        for logger in loggers:
            logger.removeHandler(handler)


def _text(rng: random.Random, max_chars: int) -> str:
    kind = rng.random()
    if kind < 0.05:
        return rng.choice(["", " ", "\n\t", "\u200b"])
    n = rng.choice([1, 5, 40, max_chars, max_chars + 1, rng.randint(1, max_chars + 50)])
    alphabet = rng.choice([string.ascii_letters + " ", string.printable, "é漢字🙂\u0000\u202e\ufeff\U0010ffff"])
    return "".join(rng.choice(alphabet) for _ in range(n))


def _nested(rng: random.Random, depth: int) -> bytes:
    """Deeply nested JSON, built as text (json.dumps would hit Python's recursion limit)."""
    opens = [rng.choice(["[", '{"texts":']) for _ in range(depth)]
    closes = ["]" if o == "[" else "}" for o in reversed(opens)]
    return ("".join(opens) + rng.choice(["0", '"x"', "null"]) + "".join(closes)).encode()


def _json_value(rng: random.Random, max_batch: int, max_chars: int) -> Any:
    r = rng.random()
    if r < 0.35:
        return {"texts": [_text(rng, max_chars) for _ in range(rng.choice([0, 1, 3, max_batch, max_batch + 1]))]}
    if r < 0.55:
        return {"texts": rng.choice([None, 3, "a text", {"a": 1}, [1, 2], [["x"]], [None], [True], ["ok", 5], [1e308]])}
    if r < 0.65:
        return {"texts": ["ok"], rng.choice(["extra", "", "texts2"]): 1}
    return rng.choice([[], [{"texts": ["a"]}], "texts", 42, None, {}, {"Texts": ["a"]}])


def _body(rng: random.Random, max_batch: int, max_chars: int) -> bytes:
    r = rng.random()
    if r < 0.05:
        return _nested(rng, rng.choice([1, 10, 100, 1000, 100_000]))
    if r < 0.6:
        value = _json_value(rng, max_batch, max_chars)
        return json.dumps(value, ensure_ascii=rng.random() < 0.5).encode("utf-8", "surrogatepass")
    if r < 0.8:  # mutate a valid body
        data = bytearray(json.dumps({"texts": [_text(rng, 30) for _ in range(3)]}).encode())
        for _ in range(rng.randint(1, 5)):
            i = rng.randrange(len(data))
            op = rng.random()
            if op < 0.4:
                data[i] = rng.randrange(256)
            elif op < 0.7:
                del data[i:]
                if not data:
                    break
            else:
                data.insert(i, rng.randrange(256))
        return bytes(data)
    if r < 0.9:
        return rng.choice(
            [
                b"",
                b"null",
                b"NaN",
                b'{"texts": [NaN]}',
                b'{"texts": ["\\ud800"]}',
                b'{"texts": ["a"]',
                b"\xff\xfe",
                b'{"texts": ["a"], "texts": 1}',
                b"[" * 5000,
                b'{"texts": ["' + b"\\u0000" * 10 + b'"]}',
            ]
        )
    return bytes(rng.randrange(256) for _ in range(rng.randint(1, 300)))


def _headers(rng: random.Random) -> dict[str, str]:
    headers: dict[str, str] = {}
    if rng.random() < 0.9:
        headers["content-type"] = rng.choice(CONTENT_TYPES[:3]) if rng.random() < 0.6 else rng.choice(CONTENT_TYPES)
    if rng.random() < 0.2:
        headers["authorization"] = rng.choice(
            [
                f"Bearer {TOKEN}",
                "Bearer wrong",
                "Basic abc",
                "Bearer",
                "bearer  " + TOKEN,
                "Bearer " + "x" * 2000,
                TOKEN,
            ]
        )
    return headers


async def _chunks(size: int) -> AsyncIterator[bytes]:
    sent = 0
    while sent < size:
        yield b" " * min(65536, size - sent)
        sent += 65536


async def _one(client: httpx.AsyncClient, rng: random.Random, limits: dict[str, int], report: FuzzReport) -> None:
    r = rng.random()
    method, path, headers = "POST", "/v1/predict", _headers(rng)
    content: bytes | AsyncIterator[bytes] = b""
    if r < 0.6:
        content = _body(rng, limits["max_batch"], limits["max_chars"])
    elif r < 0.7:
        method, path = "POST", "/v1/domains"
        headers["authorization"] = rng.choice([f"Bearer {TOKEN}", "Bearer nope"])
        content = json.dumps(
            rng.choice(
                [
                    {"expert": "fz" + str(rng.randrange(5))},
                    {"expert": "../x"},
                    {"expert": "/etc/passwd"},
                    {"name": "x"},
                    {"expert": ""},
                    {"expert": 3},
                    {},
                ]
            )
        ).encode()
    elif r < 0.75:
        method, path = (
            "DELETE",
            "/v1/domains/" + rng.choice(["fz1", "nope", "%2e%2e", "a" * 100, "billing-does-not-exist"]),
        )
        headers["authorization"] = rng.choice([f"Bearer {TOKEN}", "Bearer nope", ""])
    elif r < 0.95:
        method = rng.choice(METHODS)
        random_path = "/f" + "".join(rng.choice("abc/%.~é") for _ in range(rng.randint(1, 300)))
        path = rng.choice(PATHS) if rng.random() < 0.8 else random_path
        content = _body(rng, limits["max_batch"], limits["max_chars"]) if method in ("POST", "PUT", "PATCH") else b""
    elif r < 0.98:
        content = b"{" + b" " * limits["max_body_bytes"] + b"}"  # over the limit, with Content-Length
    else:
        content = _chunks(limits["max_body_bytes"] + 10)  # over the limit, chunked
        headers["content-type"] = "application/json"
    try:
        response = await client.request(method, path, content=content, headers=headers)
    except httpx.HTTPError as exc:
        report.transport_errors.append(f"{method} {path[:60]}: {type(exc).__name__}: {exc}")
        return
    report.statuses[response.status_code] += 1
    if response.status_code >= 500:
        report.server_errors.append(f"{method} {path[:60]} -> {response.status_code}: {response.text[:200]}")


RAW_REQUESTS = [
    b"GARBAGE\r\n\r\n",
    b"GET\r\n\r\n",
    b"GET / HTTP/9.9\r\n\r\n",
    b"GET /health HTTP/1.1\r\nHost x\r\n\r\n",
    b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
    b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
    b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello",
    b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\nzz\r\n",
    b'POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"texts"',
    b"GET /health HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 70000 + b"\r\n\r\n",
    b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03",  # a TLS ClientHello on the plain port
]


def _raw_one(host: str, port: int, payload: bytes) -> bytes:
    with socket.create_connection((host, port), timeout=2) as sock:
        try:
            sock.sendall(payload)
            sock.shutdown(socket.SHUT_WR)
            return sock.recv(64)
        except OSError:  # reset or timeout: the server refused the garbage, which is fine
            return b""


async def run_fuzz(
    base_url: str,
    *,
    requests: int = 2500,
    seed: int = 0,
    concurrency: int = 8,
    limits: dict[str, int] | None = None,
    raw_share: float = 0.02,
) -> FuzzReport:
    limits = limits or {"max_batch": 64, "max_chars": 2000, "max_body_bytes": 1_000_000}
    rng = random.Random(seed)
    report = FuzzReport()
    url = httpx.URL(base_url)
    n_raw = int(requests * raw_share)
    async with httpx.AsyncClient(base_url=base_url, timeout=10) as client:
        queue = list(range(requests - n_raw))

        async def worker(worker_seed: int) -> None:
            local = random.Random(worker_seed)
            while queue:
                queue.pop()
                await _one(client, local, limits, report)

        await asyncio.gather(*(worker(rng.randrange(2**32)) for _ in range(concurrency)))
        for i in range(n_raw):
            answer = await asyncio.to_thread(_raw_one, url.host, url.port or 80, RAW_REQUESTS[i % len(RAW_REQUESTS)])
            report.raw_sent += 1
            if answer.startswith(b"HTTP/1.1 5"):
                report.server_errors.append(f"raw #{i % len(RAW_REQUESTS)} -> {answer[:40]!r}")
        health = await client.get("/health")
        if health.status_code != 200:
            report.server_errors.append(f"/health answered {health.status_code} after fuzzing")
        ok = await client.post("/v1/predict", json={"texts": ["still alive?"]})
        if ok.status_code != 200:
            report.server_errors.append(f"a valid predict answered {ok.status_code} after fuzzing")
    return report


@contextmanager
def fuzz_server(bundle: str, **limits: Any) -> Iterator[Any]:
    """A real server on `bundle` in this process, admin routes on (TOKEN), ready before it is yielded."""
    import os

    from redkit.serve.main import TOKEN_ENV, ServeConfig, create
    from redkit.serve.testing import ServerThread

    os.environ[TOKEN_ENV] = TOKEN
    with ServerThread(create(ServeConfig(bundle=str(bundle), admin=True, **limits))) as server:
        deadline = time.monotonic() + 60
        while httpx.get(server.url + "/health").status_code != 200:
            if time.monotonic() > deadline:
                raise TimeoutError("the server did not become ready in 60 s")
            time.sleep(0.01)
        yield server


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", help="fuzz a running server")
    p.add_argument("--bundle", help="else start one on this bundle (admin routes on, adding domains off)")
    p.add_argument("--requests", type=int, default=2500)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--concurrency", type=int, default=8)
    args = p.parse_args()
    started = time.perf_counter()
    if args.url:
        report = asyncio.run(run_fuzz(args.url, requests=args.requests, seed=args.seed, concurrency=args.concurrency))
    elif args.bundle:
        with server_errors_logged() as logged, fuzz_server(args.bundle) as server:
            report = asyncio.run(
                run_fuzz(server.url, requests=args.requests, seed=args.seed, concurrency=args.concurrency)
            )
        report.server_errors += [f"server log: {m}" for m in logged]
    else:
        p.error("give --url or --bundle")
    print(
        f"{report.total} httpx requests + {report.raw_sent} raw in {time.perf_counter() - started:.1f}s; "
        f"statuses {dict(sorted(report.statuses.items()))}"
    )
    for line in report.transport_errors[:20] + report.server_errors[:20]:
        print("  !", line)
    failed = bool(report.server_errors or report.transport_errors)
    print("FAIL" if failed else "OK: no 5xx, no dropped connection, /health still 200")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
