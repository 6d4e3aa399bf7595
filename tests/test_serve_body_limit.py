"""A body over the server's limit gets a 413 the client actually receives, however it sends: with
`Connection: close` (Python's urllib) the client is still writing when the server answers, and a server that
answered and closed at once reset the connection under it (a broken pipe in about half the tries). Real
sockets, both connection modes, a declared length and a chunked body (redkit/serve/middleware.py)."""

import socket

import pytest

pytest.importorskip("fastapi")

from redkit.serve.app import create_app  # noqa: E402
from redkit.serve.testing import ServerThread  # noqa: E402

LIMIT = 1_000
BODY = b'{"texts": ["' + b"a" * 2_000_000 + b'"]}'  # 2 MB: far past the socket buffers, as in the report


def _send(port: int, connection: str, chunked: bool) -> bytes:
    """POST BODY to /v1/predict over a raw socket; the first bytes of the answer (b"" if the connection broke)."""
    head = f"POST /v1/predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nConnection: {connection}\r\n"
    if chunked:
        pieces = [BODY[i : i + 65536] for i in range(0, len(BODY), 65536)]
        payload = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
        head += "Transfer-Encoding: chunked\r\n\r\n"
    else:
        payload = BODY
        head += f"Content-Length: {len(BODY)}\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        try:
            s.sendall(head.encode())  # headers, then the body, as urllib and http.client send them
            s.sendall(payload)
            return s.recv(64)
        except (BrokenPipeError, ConnectionResetError):
            return b""


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
@pytest.mark.parametrize("connection", ["close", "keep-alive"])
def test_an_oversized_body_gets_a_413_the_client_receives(connection, chunked):
    app = create_app(lambda: None, max_body_bytes=LIMIT)
    with ServerThread(app) as server:
        answers = [_send(server.port, connection, chunked) for _ in range(20)]
    assert all(a.startswith(b"HTTP/1.1 413") for a in answers), answers


def test_urllib_receives_the_413_every_time():
    """The report's client: urllib sends `Connection: close`, the headers, then the body (without the drain, 2
    to 5 of 10 tries ended in a broken pipe)."""
    import urllib.error
    import urllib.request

    codes = []
    with ServerThread(create_app(lambda: None, max_body_bytes=LIMIT)) as server:
        for _ in range(20):
            request = urllib.request.Request(
                server.url + "/v1/predict", data=BODY, headers={"Content-Type": "application/json"}
            )
            try:
                urllib.request.urlopen(request, timeout=20)
            except urllib.error.HTTPError as err:
                codes.append(err.code)
            except urllib.error.URLError as err:
                codes.append(str(err.reason))
    assert codes == [413] * 20, codes
