"""`specreplay capture`: record real traffic through a reverse proxy."""

from __future__ import annotations

from typing import Any

import click

from specreplay.trace.capture import SESSION_HEADER, CaptureProxy, parse_listen, run_capture
from specreplay.errors import ConfigError


@click.command("capture")
@click.option("--upstream", required=True, help="The real server's base URL, e.g. http://127.0.0.1:8000/v1.")
@click.option("--listen", default="127.0.0.1:8080", show_default=True, help="HOST:PORT to listen on (127.0.0.1 unless told otherwise; port 0 = any free port).")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="Trace file to write (JSON Lines, docs/trace-format.md); replaced if it exists.")
@click.option("--redact", is_flag=True, help="Replace message text by filler of the same token length (lengths and shared prefixes kept, content dropped).")
@click.option("--duration", type=float, help="Stop after this many seconds.")
@click.option("--max-requests", type=click.IntRange(min=1), help="Stop after recording this many requests.")
@click.option("--session-header", default=SESSION_HEADER, show_default=True,
              help="Request header whose value names the session (conversation) a request belongs to; without it, sessions are found from the messages.")
def capture(upstream: str, listen: str, output: str, redact: bool, duration: float | None, max_requests: int | None,
            session_header: str) -> None:
    """Record the requests applications send: a transparent proxy in front of UPSTREAM.

    Point applications at the printed URL instead of the server. Every request
    is forwarded and every response streamed back unchanged; each inference
    request (chat, completions, responses, Anthropic messages) becomes one
    trace record, with what came back (status, time to first byte, usage,
    finish reason, end time), written as soon as it ends, with its session:
    the --session-header the client sent, else the conversation its messages
    continue. Authorization, api-key, x-api-key and cookie headers are never
    written. Stop with Ctrl-C. Replay the result with `specreplay replay TRACE
    --speedup 1`.
    """
    if duration is not None and not duration > 0:
        raise click.BadParameter("must be positive", param_hint="--duration")
    try:
        host, port = parse_listen(listen)
    except ConfigError as e:
        raise click.BadParameter(str(e), param_hint="--listen") from None

    def ready(proxy: CaptureProxy) -> None:
        click.echo(f"specreplay capture: forwarding {proxy.url} -> {upstream}; recording into {output} (Ctrl-C to stop)", err=True)

    try:
        stats = run_capture(upstream, output, host=host, port=port, redact=redact, duration=duration, max_requests=max_requests,
                            session_header=session_header, on_ready=ready)
    except ConfigError as e:
        raise click.ClickException(str(e)) from None
    except OSError as e:
        raise click.ClickException(f"cannot listen on {listen}: {e}") from None
    click.echo(stats.summary())
