"""`_core.fetch`, the extension's client for the requests around a run (the
preflight, the usage probe, `/tokenize`, the metrics scrapes): what reaches
Python for an answer, an error status, a refused connection, a silent
server and a URL no request can carry."""

from __future__ import annotations

import http.server
import re
import socket
import threading
from collections.abc import Iterator

import pytest

from specreplay import _core
from specreplay.errors import ConfigError


@pytest.fixture
def server() -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            body = self.rfile.read(int(self.headers["Content-Length"]))
            status = 200 if self.path == "/echo" else 404
            answer = body + b"|" + self.headers.get("X-Key", "").encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


def test_an_answer_comes_whole_with_its_stamps(server: str) -> None:
    got = _core.fetch("POST", server + "/echo", [("X-Key", "k")], b'{"a":1}', 5.0)
    assert (got.status, got.reason, got.content_type, got.body) == (200, "OK", "application/json", b'{"a":1}|k')
    assert 0 < got.sent_us <= got.headers_us <= _core.now_us()


def test_an_error_status_is_an_answer(server: str) -> None:
    got = _core.fetch("POST", server + "/nope", [], b"x")
    assert (got.status, got.reason) == (404, "Not Found")


def test_a_refused_connection_is_a_connection_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: refused
        with pytest.raises(ConnectionError, match="refused"):
            _core.fetch("GET", f"http://127.0.0.1:{port}/metrics", [])


def test_a_silent_server_is_a_timeout() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()  # accepted by the kernel, never answered
        with pytest.raises(TimeoutError, match="within"):
            _core.fetch("GET", f"http://127.0.0.1:{s.getsockname()[1]}/metrics", [], timeout_s=0.2)


@pytest.mark.parametrize(
    ("method", "url", "headers", "timeout_s", "says"),
    [
        ("GET", "ftp://h/x", [], 1.0, "not an http(s) URL"),
        ("GET", "no url", [], 1.0, "not a URL"),
        ("G ET", "http://127.0.0.1:9/x", [], 1.0, "not an HTTP method"),
        ("GET", "http://127.0.0.1:9/x", [("X-A", "a\nb")], 1.0, "header X-A"),
        ("GET", "http://127.0.0.1:9/x", [], 0.0, "timeout_s must be positive"),
    ],
)
def test_what_no_request_can_carry_is_a_config_error(method: str, url: str, headers: list[tuple[str, str]], timeout_s: float, says: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(says)):
        _core.fetch(method, url, headers, timeout_s=timeout_s)
