"""`specreplay capture`: a recording reverse proxy for the OpenAI-compatible
and Anthropic APIs.

Applications point at the proxy instead of the server. The forwarding runs in
the Rust core (`_core.CaptureProxy`, on its own threads): every request is
forwarded to the upstream as it came (headers except hop-by-hop ones, body
unchanged), and the response is streamed back as it arrives: each frame read
from the upstream is written to the client at once, never buffered, never
decompressed, never re-encoded.

Recording stays off the forwarding path: the proxy reports each request once
its body is read (`_core.CapturedRequest`: which API it is, by the paths of
`trace.APIS`), and its response once it has ended, as a finished record
(`_core.CapturedResponse`: status, times, the server's usage and finish
reason, decoded in the core from the bytes that went through, on this
module's thread). This module turns them into trace records, appended and
flushed, each with the session it belongs to (`conversations`: the client's
session header, or the conversation its messages continue). Records are therefore written in the order requests *end*; a clean
stop rewrites the file in arrival order, as the trace format requires (a
capture killed before that is sorted by `specreplay import capture FILE`).

Never written (and never handed to Python by the proxy): request headers (so
`Authorization`, `api-key`, `x-api-key` and cookies cannot leak) but the
session header, the query string. Never written: response text (its answer
is handed over to find the next turn, and kept only as a hash). With `redact`, message text becomes
filler of the same approximate token length (`specreplay.trace.text.Redactor`).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from specreplay import _core
from specreplay.trace.conversations import ConversationFinder
from specreplay.errors import ConfigError
from specreplay.trace.shaping import redact_url
from specreplay.trace.text import Redactor
from specreplay.trace.media import dedup_body, media_dir
from specreplay.trace.records import APIS, RESPONSE_INT_FIELDS, RESPONSE_STR_FIELDS, TraceRecord


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


#: The request header whose value names a session, unless told otherwise.
SESSION_HEADER = "x-session-id"


@dataclass
class CaptureStats:
    recorded: int = 0
    passed_through: int = 0
    errors: int = 0
    output: str = ""
    #: Distinct sessions among the recorded requests, and the requests that
    #: continued one (a later turn).
    sessions: int = 0
    later_turns: int = 0
    #: Requests found to continue an earlier one by its answer, or (the
    #: client changed the answer) by its messages alone (`conversations`).
    by_answer: int = 0
    by_messages: int = 0

    def summary(self) -> str:
        extra = f", {self.passed_through} other requests forwarded unrecorded" if self.passed_through else ""
        errs = f" ({self.errors} ended in an error)" if self.errors else ""
        turns = f" in {self.sessions} sessions ({self.later_turns} later turns)" if self.later_turns else ""
        return f"captured {self.recorded} requests{errs}{turns} into {self.output}{extra}"


class _Pending:
    """What the recorder knows about one recorded request while it runs."""

    __slots__ = ("seq", "api", "path", "body", "arrival_us", "session")

    def __init__(self, seq: int, api: str, path: str, body: dict[str, Any], arrival_us: int, session: str | None) -> None:
        self.seq = seq
        self.api = api
        self.path = path
        self.body = body
        self.arrival_us = arrival_us
        self.session = session


class CaptureProxy:
    """The recorder around the Rust proxy (`_core.CaptureProxy`): `start()`,
    then `run()` (records until `stop()`, `duration` or `max_requests`), then
    `close()`, which stops the proxy (requests in flight get `drain_s` to
    end), records what they report, sorts the trace and returns the counts.
    `stop()` may be called from any thread and from a signal handler."""

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
        session_header: str = SESSION_HEADER,
    ) -> None:
        self.origin, self.prefix = split_upstream(upstream)
        self.session_header = session_header
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
        self._proxy: _core.CaptureProxy | None = None
        self._pending: dict[int, _Pending] = {}
        self._conversations = ConversationFinder()
        self._sessions: set[str] = set()
        self._stopped = threading.Event()

    # --- life cycle ---------------------------------------------------------

    def start(self) -> None:
        apis = {api: path for api, (path, _) in APIS.items()}
        self._proxy = _core.CaptureProxy(
            {"upstream": self.origin + self.prefix, "drain_s": self.drain_s, "apis": apis, "session_header": self.session_header},
            self.host,
            self.port,
        )
        self.port = self._proxy.port
        self._file = self.output.open("w", encoding="utf-8")
        started = time.time()
        self._file.write(
            f"# specreplay capture of {redact_url(self.upstream)} started "
            f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(started))}"
            f"{' (redacted)' if self.redactor else ''}; arrival 0 = the first request\n"
        )
        self._file.flush()

    @property
    def url(self) -> str:
        assert self._proxy is not None, "start() first"
        return self._proxy.url

    def stop(self) -> None:
        self._stopped.set()

    def run(self, duration: float | None = None) -> None:
        """Records until `stop()`, `duration` seconds or `max_requests`."""
        assert self._proxy is not None
        deadline = None if duration is None else time.monotonic() + duration
        while not self._stopped.is_set():
            wait = 0.1 if deadline is None else min(0.1, deadline - time.monotonic())
            if wait <= 0:
                break
            events = self._proxy.next_events(256, wait)
            if events is None:
                break
            self._handle(events)

    def close(self) -> CaptureStats:
        if self._proxy is not None:
            self._proxy.stop()  # stops listening, lets requests in flight end (drain_s), cuts the rest
            while (events := self._proxy.next_events(256, 0.25)) is not None:
                self._handle(events)
            self._proxy = None
        if self._file is not None:
            self._file.close()
            self._file = None
            sort_trace_file(self.output)
        self.stats.by_answer, self.stats.by_messages = self._conversations.by_answer, self._conversations.by_messages
        return self.stats

    # --- recording (off the forwarding path) ----------------------------------

    def _handle(self, events: list[_core.CapturedRequest | _core.CapturedResponse]) -> None:
        for ev in events:
            if isinstance(ev, _core.CapturedRequest):
                pending = self._admit(ev)
                if pending is not None:
                    self._pending[ev.seq] = pending
            else:
                pending = self._pending.pop(ev.seq, None)
                if pending is not None:
                    self._finish(pending, ev)

    def _admit(self, ev: _core.CapturedRequest) -> _Pending | None:
        """A `_Pending` when this request is to be recorded, else None."""
        api = ev.api
        parsed: Any = None
        if api is not None and ev.error is None:
            try:
                parsed = json.loads(ev.body)
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
            self._t0_us = ev.arrival_us
        self._seq += 1
        session = self._conversations.admit(ev.seq, api, parsed, ev.session, new_id=f"c{self._seq}")
        return _Pending(self._seq, api, ev.path, parsed, ev.arrival_us, session)

    def _finish(self, p: _Pending, ev: _core.CapturedResponse) -> None:
        fields = RESPONSE_INT_FIELDS + RESPONSE_STR_FIELDS
        response: dict[str, Any] = {k: v for k in fields if (v := getattr(ev, k)) is not None}
        failed = ev.status >= 400 or ev.error is not None
        if failed:
            self.stats.errors += 1
        self._conversations.finish(ev.seq, not failed, ev.answer)
        body = self.redactor.body(p.body) if self.redactor is not None else p.body
        # A multimodal session repeats its images in every turn: each is stored once, beside the trace.
        body = dedup_body(body, media_dir(self.output))
        default_path = "/v1" + APIS[p.api][0]
        # A request admitted before an earlier arrival whose body was still
        # being read would come out a hair negative: clamp (the trace forbids it).
        since_t0 = max(0, p.arrival_us - (self._t0_us or p.arrival_us))
        record = TraceRecord(
            id=str(p.seq),
            api=p.api,
            body=body,
            arrival=round(since_t0 / 1e6, 6),
            session_id=p.session,
            expected_output_tokens=ev.completion_tokens,
            path=None if p.path == default_path else p.path,
            approximate=self.redactor is not None,
            response=response,
        )
        if self._file is not None:
            self._file.write(record.to_json() + "\n")
            self._file.flush()
        self.stats.recorded += 1
        if p.session is not None:
            if p.session in self._sessions:
                self.stats.later_turns += 1
            else:
                self._sessions.add(p.session)
                self.stats.sessions = len(self._sessions)
        if self.max_requests is not None and self.stats.recorded >= self.max_requests:
            self.stop()


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
    session_header: str = SESSION_HEADER,
    on_ready: Callable[[CaptureProxy], None] | None = None,
) -> CaptureStats:
    """Runs the proxy in the foreground until Ctrl-C/SIGTERM, `duration` or
    `max_requests`; returns the counts (the CLI's body)."""
    proxy = CaptureProxy(
        upstream, output, host=host, port=port, redact=redact, max_requests=max_requests, session_header=session_header
    )
    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda _sig, _frame: proxy.stop())
    try:
        proxy.start()
        if on_ready is not None:
            on_ready(proxy)
        proxy.run(duration)
    finally:
        try:
            stats = proxy.close()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    return stats


class BackgroundCapture:
    """The proxy and its recorder on their own thread (tests, benchmarks,
    Python use): `with BackgroundCapture(upstream, "trace.jsonl") as cap:
    cap.url`; leaving the block stops it, drains and sorts the trace;
    `cap.stats`."""

    def __init__(self, upstream: str, output: str | Path, **options: Any) -> None:
        self._proxy = CaptureProxy(upstream, output, **options)
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.stats: CaptureStats | None = None
        self._thread = threading.Thread(target=self._run, name="specreplay-capture", daemon=True)

    def _run(self) -> None:
        try:
            self._proxy.start()
        except BaseException as e:
            self._error = e
            self._ready.set()
            self._proxy.close()
            return
        self._ready.set()
        try:
            self._proxy.run()
        finally:
            self.stats = self._proxy.close()

    def __enter__(self) -> BackgroundCapture:
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error
        return self

    @property
    def url(self) -> str:
        return self._proxy.url

    @property
    def recorded(self) -> int:
        return self._proxy.stats.recorded

    def stop(self) -> CaptureStats:
        self._proxy.stop()
        self._thread.join()
        assert self.stats is not None
        return self.stats

    def __exit__(self, *exc: object) -> None:
        self.stop()
