"""https targets: rustls with the system's roots (or `SSL_CERT_FILE`), HTTP/2
when the server offers it by ALPN, HTTP/1.1 otherwise.

The server is the simulator behind a TLS terminator written here with
Python's `ssl` (a test CA from trustme): the terminator decrypts and pipes the
bytes to the simulator's plain port, and the simulator speaks whichever of
HTTP/1.1 or HTTP/2 it receives. The terminator records the protocol each
connection negotiated, so the test knows which one the client used.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
import pytest
import trustme
from click.testing import CliRunner

import specreplay
from specreplay import _core
from specreplay._core import SimServer
from specreplay.cli import cli
from specreplay.results.schema import request_schema

ROOT = Path(__file__).resolve().parent.parent
REASONING = str(ROOT / "traces" / "reasoning-prompts.jsonl")
SIM = {"ttft_ms": 5, "tpot_ms": 1, "reasoning_tokens": [5, 10], "content_tokens": [3, 6], "prefill_us_per_token": 0}


class TlsTerminator:
    """TLS on 127.0.0.1 in front of a plain TCP upstream, on its own thread."""

    def __init__(self, upstream: str, ca: trustme.CA, alpn: list[str]):
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("localhost", "127.0.0.1").configure_cert(ctx)
        ctx.set_alpn_protocols(alpn)
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.protocols: list[str | None] = []
        self.loop = asyncio.new_event_loop()
        started = threading.Event()

        async def serve() -> None:
            self.server = await asyncio.start_server(self.pipe, "127.0.0.1", 0, ssl=ctx)
            self.port = self.server.sockets[0].getsockname()[1]
            started.set()

        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(serve(), self.loop)
        assert started.wait(10), "the TLS terminator did not start"

    async def pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.protocols.append(writer.get_extra_info("ssl_object").selected_alpn_protocol())
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)

        async def copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, ssl.SSLError):
                pass
            finally:
                dst.close()

        await asyncio.gather(copy(reader, up_writer), copy(up_reader, writer))

    def close(self) -> None:
        async def stop() -> None:
            self.server.close()

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[trustme.CA, Path]]:
    authority = trustme.CA()
    pem = tmp_path_factory.mktemp("ca") / "ca.pem"
    authority.cert_pem.write_to_path(str(pem))
    yield authority, pem


def replay(url: str, out: Path, env: dict[str, str]) -> tuple[int, str]:
    result = CliRunner().invoke(
        cli,
        # --no-metrics: the scraper's GETs of /metrics would be HTTP/1.1
        # connections of their own, and these tests count the engine's.
        ["replay", REASONING, "--url", url, "--concurrency", "4", "--num-requests", "8", "--no-metrics", "-o", str(out)],
        env={"COLUMNS": "160", **env},
    )
    return result.exit_code, result.output


@pytest.mark.parametrize(("offered", "expected"), [(["h2", "http/1.1"], "h2"), (["http/1.1"], "http/1.1")])
def test_replay_over_tls(tmp_path: Path, ca: tuple[trustme.CA, Path], offered: list[str], expected: str) -> None:
    authority, pem = ca
    with SimServer(config=SIM) as sim:
        tls = TlsTerminator(sim.url, authority, offered)
        try:
            out = tmp_path / "run.arrow"
            code, text = replay(f"https://localhost:{tls.port}/v1", out, {"SSL_CERT_FILE": str(pem)})
        finally:
            tls.close()
    assert code == 0, text
    df = specreplay.load(out)
    assert len(df) == 8
    assert df["error_kind"].isna().all(), df["error_message"].dropna().tolist()
    assert (df["content_tokens"] > 0).all()
    assert (df["reasoning_tokens"] + df["content_tokens"] == df["output_tokens"]).all()
    # The preflight (urllib) makes two HTTP/1.1 connections; every other
    # connection is the engine's and took the server's first choice.
    preflight = 2
    assert len(tls.protocols) > preflight, tls.protocols
    assert tls.protocols.count(expected) >= len(tls.protocols) - preflight, tls.protocols
    assert set(tls.protocols) <= {expected, "http/1.1"}, tls.protocols
    engine_connections = len(tls.protocols) - preflight
    if expected == "h2":
        # Preconnected before the clock, and the only one: the first wave did
        # not open a TLS connection each to drop all but one.
        assert engine_connections == 1, tls.protocols
    else:
        assert engine_connections >= 4, tls.protocols
    # The first wave used the preconnected connections; a request that opened
    # one later says so.
    assert df["connect_us"].iloc[:4].isna().all(), df["connect_us"].tolist()
    # (A connection hyper-util opened for a request that then took an idle one
    # may serve nobody, so the rows can claim fewer than were opened.)
    assert df["connect_us"].notna().sum() <= engine_connections - (1 if expected == "h2" else 4)
    if sys.platform == "linux":
        # Under TLS too, every chunk has the kernel stamp of the ciphertext
        # read that completed it.
        assert (df["stamp_source"] == "kernel").all(), df["stamp_source"].tolist()
        delays = df["chunk_delay_us"].explode().astype(float)
        assert delays.notna().all() and (delays >= 0).all()


def test_an_untrusted_certificate_is_a_clear_error(tmp_path: Path, ca: tuple[trustme.CA, Path]) -> None:
    authority, _ = ca
    other = tmp_path / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(other))
    with SimServer(config=SIM) as sim:
        tls = TlsTerminator(sim.url, authority, ["http/1.1"])
        try:
            code, text = replay(f"https://localhost:{tls.port}/v1", tmp_path / "run.arrow", {"SSL_CERT_FILE": str(other)})
        finally:
            tls.close()
    # The preflight (the extension's `fetch`, rustls) refuses first...
    assert code != 0
    assert "certificate" in text.lower(), text
    assert "Traceback" not in text


def test_the_engine_records_a_certificate_failure(
    tmp_path: Path, ca: tuple[trustme.CA, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # ...and the engine's own rustls check, had the preflight passed, fails
    # each request with a connect error that names the certificate.
    authority, _ = ca
    other = tmp_path / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(other))
    monkeypatch.setenv("SSL_CERT_FILE", str(other))
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}).encode()
    spec: Any = {"load": {"mode": "concurrency", "concurrency": 1}, "num_requests": 2, "timeout_s": 30}
    with SimServer(config=SIM) as sim:
        tls = TlsTerminator(sim.url, authority, ["h2", "http/1.1"])
        try:
            url = f"https://localhost:{tls.port}/v1/chat/completions"
            request = {"trace_id": "a", "api": "chat", "url": url, "body": body, "arrival_s": 0.0}
            run = _core.start_point(spec, pa.RecordBatch.from_pylist([request], schema=request_schema()))
            batches = []
            while (batch := run.next_batch(64, 0.25)) is not None:
                if batch.num_rows:
                    batches.append(pa.record_batch(batch))
        finally:
            tls.close()
    table = pa.Table.from_batches(batches)
    assert table["error_kind"].to_pylist() == ["connect", "connect"]
    assert all("certificate" in m.lower() for m in table["error_message"].to_pylist()), table["error_message"]


def test_the_servers_metrics_are_scraped_over_tls_too(tmp_path: Path, ca: tuple[trustme.CA, Path]) -> None:
    authority, pem = ca
    with SimServer(config=SIM) as sim:
        tls = TlsTerminator(sim.url, authority, ["http/1.1"])
        try:
            out = tmp_path / "run.arrow"
            result = CliRunner().invoke(
                cli,
                ["replay", REASONING, "--url", f"https://localhost:{tls.port}/v1", "--concurrency", "4", "--num-requests", "8", "-o", str(out)],
                env={"COLUMNS": "160", "SSL_CERT_FILE": str(pem)},
            )
        finally:
            tls.close()
    assert result.exit_code == 0, result.output
    samples = specreplay.load(out, metrics=True)
    # The same CA file serves the scraper (its `fetch` reads SSL_CERT_FILE as the engine does).
    assert {"start", "end"} <= set(samples["scrape"]) and "vllm:num_requests_running" in set(samples["name"])
