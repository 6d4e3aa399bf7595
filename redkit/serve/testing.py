"""Run a real uvicorn server for an app in a background thread, on a free loopback port (tests, fuzzing)."""

from __future__ import annotations

import socket
import threading
import time
from types import TracebackType

import uvicorn
from fastapi import FastAPI


class ServerThread:
    """`with ServerThread(app) as server: httpx.get(server.url + "/health")`.

    The socket is bound before the thread starts (port 0 = the kernel picks a free port), so there is
    no find-a-port-then-bind race. Stopping is uvicorn's graceful path: should_exit, drain, lifespan shutdown.
    """

    def __init__(self, app: FastAPI, *, start_timeout_s: float = 10.0) -> None:
        # proto=IPPROTO_TCP matters: asyncio sets TCP_NODELAY on accepted sockets only when the listener says
        # IPPROTO_TCP; with the default proto=0 every keep-alive response waits ~40 ms (Nagle x delayed ACK).
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self.port: int = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on", timeout_graceful_shutdown=5)
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self._sock]}, daemon=True)
        self._start_timeout_s = start_timeout_s

    def start(self) -> ServerThread:
        self._thread.start()
        deadline = time.monotonic() + self._start_timeout_s
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:  # idempotent
        self.server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()
        if self._thread.is_alive():
            raise RuntimeError("uvicorn did not stop within 10 s")

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
