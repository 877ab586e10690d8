"""`specreplay capture`: a recording reverse proxy for the OpenAI-compatible
and Anthropic APIs.

Applications point at the proxy instead of the server. Every request is
forwarded to the upstream as it came (headers except hop-by-hop ones, body
unchanged), and the response is streamed back as it arrives: each read from
the upstream is written to the client at once (`iter_any`), never buffered,
never decompressed, never re-encoded.

Recording stays off the forwarding path: the response bytes of a recorded
request are kept aside while they stream, and only after the response has
ended are they decoded (by the Rust decoders, `_core.decode_response`) and
the trace record appended and flushed. Records are therefore written in the
order requests *end*; a clean stop rewrites the file in arrival order, as the
trace format requires (a capture killed before that is sorted by
`specreplay import capture FILE`).

Never written: request headers (so `Authorization`, `api-key`, `x-api-key`
and cookies cannot leak), the query string, response text. With `redact`,
message text becomes filler of the same approximate token length
(`specreplay.text.Redactor`).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web

from specreplay import _core
from specreplay.errors import ConfigError, StreamFormatError
from specreplay.shaping import redact_url
from specreplay.text import Redactor
from specreplay.trace import APIS, TraceRecord

#: Headers that describe one connection, not the message (RFC 9110 §7.6.1),
#: plus the ones the proxy must recompute.
HOP_BY_HOP = frozenset(
    {
        "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection",
        "te", "trailer", "trailers", "transfer-encoding", "upgrade", "host", "content-length",
    }
)
#: Largest request body accepted (requests with images or long contexts are big).
MAX_REQUEST_BYTES = 256 << 20
#: Response bytes kept per request for decoding usage; beyond this the
#: response is still forwarded in full but its usage is not decoded.
MAX_KEPT_RESPONSE_BYTES = 64 << 20


def detect_api(method: str, path: str) -> str | None:
    """Which API a request is, from its method and path (None: not recorded)."""
    if method != "POST":
        return None
    p = path.rstrip("/")
    if p.endswith("/chat/completions"):
        return "chat"
    if p.endswith("/completions"):
        return "completions"
    if p.endswith("/responses"):
        return "responses"
    if p.endswith("/messages"):
        return "anthropic"
    return None


def forward_headers(headers: Any) -> list[tuple[str, str]]:
    """The headers to forward: all but hop-by-hop ones and those named in `Connection`."""
    named = {t.strip().lower() for v in headers.getall("connection", []) for t in v.split(",")}
    return [(k, v) for k, v in headers.items() if k.lower() not in HOP_BY_HOP and k.lower() not in named]


def split_upstream(url: str) -> tuple[str, str]:
    """`http://h:8000/v1` → (`http://h:8000`, ``): requests are forwarded with
    their own path, after the upstream's path prefix; a trailing `/v1` in the
    upstream is the API version clients already send, so it is not doubled."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"--upstream: expected an http:// or https:// URL, got {url!r}")
    prefix = parts.path.rstrip("/")
    if prefix.endswith("/v1"):
        prefix = prefix[: -len("/v1")]
    return f"{parts.scheme}://{parts.netloc}", prefix


def parse_listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", value
    try:
        n = int(port)
    except ValueError:
        raise ConfigError(f"--listen: expected HOST:PORT, got {value!r}") from None
    if not 0 <= n <= 65535:
        raise ConfigError(f"--listen: port out of range: {n}")
    return (host.strip("[]") or "127.0.0.1"), n


@dataclass
class CaptureStats:
    recorded: int = 0
    passed_through: int = 0
    errors: int = 0
    output: str = ""

    def summary(self) -> str:
        extra = f", {self.passed_through} other requests forwarded unrecorded" if self.passed_through else ""
        errs = f" ({self.errors} ended in an error)" if self.errors else ""
        return f"captured {self.recorded} requests{errs} into {self.output}{extra}"


class _Pending:
    """What the proxy knows about one recorded request while it runs."""

    __slots__ = ("seq", "api", "path", "body", "arrival_us", "status", "ttfb_us", "content_type", "encoding", "chunks", "kept", "error")

    def __init__(self, seq: int, api: str, path: str, body: dict[str, Any], arrival_us: int) -> None:
        self.seq = seq
        self.api = api
        self.path = path
        self.body = body
        self.arrival_us = arrival_us
        self.status = 0
        self.ttfb_us: int | None = None
        self.content_type = ""
        self.encoding = ""
        self.chunks: list[bytes] = []
        self.kept = 0
        self.error: str | None = None


class CaptureProxy:
    """The proxy on the running asyncio loop: `await start()`, then
    `await wait()` (until `stop()`, `duration` or `max_requests`), then
    `await close()`, which drains in-flight requests, sorts the trace and
    returns the counts."""

    def __init__(
        self,
        upstream: str,
        output: str | Path,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        redact: bool = False,
        max_requests: int | None = None,
        drain_s: float = 10.0,
    ) -> None:
        self.origin, self.prefix = split_upstream(upstream)
        self.upstream = upstream
        self.output = Path(output)
        self.host = host
        self.port = port
        self.redactor = Redactor(os.urandom(32)) if redact else None
        self.max_requests = max_requests
        self.drain_s = drain_s
        self.stats = CaptureStats(output=str(output))
        self._seq = 0
        self._t0_us: int | None = None
        self._file: Any = None
        self._session: aiohttp.ClientSession | None = None
        self._runner: web.AppRunner | None = None
        self._stopped = asyncio.Event()
        self._in_flight = 0

    # --- life cycle ---------------------------------------------------------

    async def start(self) -> None:
        self._file = self.output.open("w", encoding="utf-8")
        started = time.time()
        self._file.write(
            f"# specreplay capture of {redact_url(self.upstream)} started "
            f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(started))}"
            f"{' (redacted)' if self.redactor else ''}; arrival 0 = the first request\n"
        )
        self._file.flush()
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
        self._session = aiohttp.ClientSession(
            connector=connector,
            auto_decompress=False,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=30),
            skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
            cookie_jar=aiohttp.DummyCookieJar(),
        )
        app = web.Application(client_max_size=MAX_REQUEST_BYTES)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=self.drain_s)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/v1"

    def stop(self) -> None:
        self._stopped.set()

    async def wait(self, duration: float | None = None) -> None:
        try:
            await asyncio.wait_for(self._stopped.wait(), timeout=duration)
        except asyncio.TimeoutError:
            pass

    async def close(self) -> CaptureStats:
        if self._runner is not None:
            await self._runner.cleanup()  # stops listening, waits for in-flight handlers (drain_s)
            self._runner = None
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._file is not None:
            self._file.close()
            self._file = None
            sort_trace_file(self.output)
        return self.stats

    # --- forwarding ---------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        arrival_us = _core.now_us()
        body = await request.read()
        pending = self._admit(request, body, arrival_us)
        assert self._session is not None
        url = self.origin + self.prefix + request.raw_path
        self._in_flight += 1
        response: web.StreamResponse | None = None
        try:
            try:
                upstream_cm = self._session.request(
                    request.method, url, headers=forward_headers(request.headers),
                    data=body if body else None, allow_redirects=False,
                )
                upstream = await upstream_cm.__aenter__()
            except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as e:
                message = f"upstream unreachable: {type(e).__name__}: {e}"
                if pending is not None:
                    pending.status, pending.error = 502, message
                    pending.ttfb_us = _core.now_us() - arrival_us
                payload = json.dumps({"error": {"message": f"specreplay capture: {message}", "type": "proxy_error", "code": 502}})
                return web.Response(status=502, text=payload, content_type="application/json")
            try:
                if pending is not None:
                    pending.ttfb_us = _core.now_us() - arrival_us
                    pending.status = upstream.status
                    pending.content_type = upstream.headers.get("Content-Type", "")
                    pending.encoding = upstream.headers.get("Content-Encoding", "")
                response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
                for k, v in forward_headers(upstream.headers):
                    response.headers.add(k, v)
                if upstream.content_length is not None and request.method != "HEAD":
                    response.content_length = upstream.content_length
                await response.prepare(request)
                async for data in upstream.content.iter_any():
                    await response.write(data)
                    if pending is not None and pending.kept < MAX_KEPT_RESPONSE_BYTES:
                        pending.chunks.append(data)
                        pending.kept += len(data)
                await response.write_eof()
                return response
            except (ConnectionResetError, aiohttp.ClientConnectionResetError) as e:
                # The client went away: leaving the block closes the upstream
                # connection, so the server stops generating too.
                if pending is not None:
                    pending.error = f"client disconnected: {e}" if str(e) else "client disconnected"
                raise
            except (aiohttp.ClientError, asyncio.TimeoutError) as e:
                if pending is not None:
                    pending.error = f"upstream stream broken: {type(e).__name__}: {e}"
                raise  # aiohttp then closes the client connection: the cut shows
            finally:
                await upstream_cm.__aexit__(None, None, None)
        except asyncio.CancelledError:
            if pending is not None and pending.error is None:
                pending.error = "cut short: the capture stopped"
            raise
        finally:
            self._in_flight -= 1
            if pending is not None:
                self._finish(pending, _core.now_us() - arrival_us)

    def _admit(self, request: web.Request, body: bytes, arrival_us: int) -> _Pending | None:
        """A `_Pending` when this request is to be recorded, else None."""
        api = detect_api(request.method, request.path)
        parsed: Any = None
        if api is not None:
            try:
                parsed = json.loads(body)
            except (UnicodeDecodeError, json.JSONDecodeError):
                parsed = None
        if (
            api is None
            or not isinstance(parsed, dict)
            or APIS[api][1] not in parsed
            or (self.max_requests is not None and self._seq >= self.max_requests)
        ):
            self.stats.passed_through += 1
            return None
        if self._t0_us is None:
            self._t0_us = arrival_us
        self._seq += 1
        return _Pending(self._seq, api, request.path, parsed, arrival_us)

    # --- recording (after the response ended) ---------------------------------

    def _finish(self, p: _Pending, end_us: int) -> None:
        response: dict[str, Any] = {"status": p.status, "ttfb_us": p.ttfb_us, "end_us": end_us}
        response.update(self._decode(p))
        if p.error is not None:
            response["error"] = p.error
        response = {k: v for k, v in response.items() if v is not None}
        if p.status >= 400 or p.error is not None:
            self.stats.errors += 1
        body = self.redactor.body(p.body) if self.redactor is not None else p.body
        default_path = "/v1" + APIS[p.api][0]
        completion = response.get("completion_tokens")
        record = TraceRecord(
            id=str(p.seq),
            api=p.api,
            body=body,
            arrival=round((p.arrival_us - (self._t0_us or p.arrival_us)) / 1e6, 6),
            expected_output_tokens=completion if isinstance(completion, int) else None,
            path=None if p.path == default_path else p.path,
            approximate=self.redactor is not None,
            response=response,
        )
        if self._file is not None:
            self._file.write(record.to_json() + "\n")
            self._file.flush()
        self.stats.recorded += 1
        if self.max_requests is not None and self.stats.recorded >= self.max_requests:
            self.stop()

    @staticmethod
    def _decode(p: _Pending) -> dict[str, Any]:
        if not p.chunks or p.kept >= MAX_KEPT_RESPONSE_BYTES:
            return {}
        data = b"".join(p.chunks)
        p.chunks = []
        if p.encoding in ("gzip", "deflate"):
            try:
                data = zlib.decompress(data, 47)  # gzip or zlib header
            except zlib.error:
                return {}
        elif p.encoding not in ("", "identity"):
            return {}
        try:
            got = _core.decode_response(p.api, data, p.content_type)
        except StreamFormatError:
            return {}
        out = {k: got.get(k) for k in ("prompt_tokens", "completion_tokens", "reasoning_tokens", "cached_tokens", "finish_reason")}
        if got.get("error"):
            out["error"] = got["error"]
        elif p.content_type.startswith("text/event-stream") and not got.get("complete") and p.error is None:
            out["error"] = "stream ended without its end marker"
        return out


def sort_trace_file(path: str | Path) -> int:
    """Rewrites a captured trace in arrival order (records were appended as
    requests ended); comment lines stay on top. Returns the record count."""
    p = Path(path)
    comments: list[str] = []
    records: list[tuple[float, int, str]] = []
    with p.open(encoding="utf-8") as f:
        for i, line in enumerate(f):
            if line.startswith("#") or not line.strip():
                comments.append(line)
                continue
            obj = json.loads(line)
            records.append((float(obj.get("arrival") or 0.0), int(obj["id"]) if str(obj["id"]).isdigit() else i, line))
    records.sort(key=lambda r: (r[0], r[1]))
    tmp = p.with_name(p.name + ".sorting")
    with tmp.open("w", encoding="utf-8") as f:
        f.writelines(comments)
        f.writelines(line if line.endswith("\n") else line + "\n" for _, _, line in records)
    os.replace(tmp, p)
    return len(records)


def run_capture(
    upstream: str,
    output: str | Path,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    redact: bool = False,
    duration: float | None = None,
    max_requests: int | None = None,
    on_ready: Callable[[CaptureProxy], None] | None = None,
) -> CaptureStats:
    """Runs the proxy in the foreground until Ctrl-C/SIGTERM, `duration` or
    `max_requests`; returns the counts (the CLI's body)."""

    async def main() -> CaptureStats:
        proxy = CaptureProxy(upstream, output, host=host, port=port, redact=redact, max_requests=max_requests)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, proxy.stop)
            except (NotImplementedError, RuntimeError):
                pass
        try:
            await proxy.start()
            if on_ready is not None:
                on_ready(proxy)
            await proxy.wait(duration)
        finally:
            stats = await proxy.close()
        return stats

    return asyncio.run(main())


class BackgroundCapture:
    """The proxy on its own thread and event loop (tests, benchmarks, Python
    use): `with BackgroundCapture(upstream, "trace.jsonl") as cap: cap.url`;
    leaving the block stops it, drains and sorts the trace; `cap.stats`."""

    def __init__(self, upstream: str, output: str | Path, **options: Any) -> None:
        self._proxy_args = (upstream, output, options)
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._proxy: CaptureProxy | None = None
        self._error: BaseException | None = None
        self.stats: CaptureStats | None = None
        self._thread = threading.Thread(target=self._run, name="specreplay-capture", daemon=True)

    def _run(self) -> None:
        async def main() -> None:
            upstream, output, options = self._proxy_args
            self._proxy = CaptureProxy(upstream, output, **options)
            self._loop = asyncio.get_running_loop()
            try:
                await self._proxy.start()
            except BaseException as e:
                self._error = e
                self._ready.set()
                return
            self._ready.set()
            try:
                await self._proxy.wait()
            finally:
                self.stats = await self._proxy.close()

        asyncio.run(main())

    def __enter__(self) -> BackgroundCapture:
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error
        return self

    @property
    def url(self) -> str:
        assert self._proxy is not None
        return self._proxy.url

    @property
    def recorded(self) -> int:
        assert self._proxy is not None
        return self._proxy.stats.recorded

    def stop(self) -> CaptureStats:
        if self._loop is not None and self._proxy is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._proxy.stop)
        self._thread.join()
        assert self.stats is not None
        return self.stats

    def __exit__(self, *exc: object) -> None:
        self.stop()
