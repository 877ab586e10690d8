"""`specreplay replay`: the main job."""

from __future__ import annotations

import json
import sys
from typing import Any

import click
import pyarrow as pa
from rich.console import Console
from rich.live import Live
from rich.text import Text

from specreplay import summary as summary_mod
from specreplay import validity
from specreplay.config import ARRIVALS, Point, ReplayConfig
from specreplay.console import print_findings, print_per_request, print_summary
from specreplay.errors import ConfigError
from specreplay.replay import Hooks, Progress, run_replay
from specreplay.results import to_frame
from specreplay.target import Target
from specreplay.tomlfile import read_toml

#: Exit status when the user interrupted the run (128 + SIGINT, like a shell).
EXIT_INTERRUPTED = 130
#: Exit status when `--strict` turned validity findings into a failure.
EXIT_INVALID = 3


def parse_header(value: str) -> tuple[str, str]:
    name, sep, val = value.partition(":")
    if not sep or not name.strip():
        raise click.BadParameter(f"expected 'Name: value', got {value!r}", param_hint="--header")
    return name.strip(), val.strip()


def parse_extra_body(value: str | None) -> dict[str, Any]:
    if value is None:
        return {}
    try:
        body = json.loads(value)
    except json.JSONDecodeError as e:
        raise click.BadParameter(f"not valid JSON: {e.msg} (column {e.colno})", param_hint="--extra-body") from None
    if not isinstance(body, dict):
        raise click.BadParameter("must be a JSON object", param_hint="--extra-body")
    return body


def load_sim_config(path: str | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        return read_toml(path)
    except ConfigError as e:
        raise click.BadParameter(str(e), param_hint="--sim-config") from None


class ConsoleHooks(Hooks):
    """A one-line live status while a point runs, the summary after it."""

    def __init__(self, out: Console, err: Console, per_request: bool) -> None:
        self.out = out
        self.err = err
        self.per_request = per_request
        self.live: Live | None = None
        self.points: list[dict[str, Any]] = []

    def target(self, target: Target, description: str) -> None:
        self.err.print(description, highlight=False)

    def note(self, message: str) -> None:
        self.err.print(f"note: {message}", highlight=False)

    def point_started(self, point: Point, index: int, total: int) -> None:
        self.points.append(point.to_dict())
        self.err.print(f"[bold]point {index + 1}/{total}: {point.name}[/bold]")
        if self.err.is_terminal:
            self.live = Live(Text(""), console=self.err, refresh_per_second=4, transient=True)
            self.live.start()

    def progress(self, p: Progress) -> None:
        if self.live is None:
            return
        rate = p.output_tokens / p.elapsed_s if p.elapsed_s > 0 else 0.0
        self.live.update(
            Text(
                f"  {p.elapsed_s:6.1f} s  sent {p.sent}  in flight {p.in_flight}  done {p.finished}  "
                f"errors {p.failed}  {rate:,.0f} tok/s"
            )
        )

    def point_finished(self, point: Point, p: Progress, rows: pa.Table) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None
        df = rows.to_pandas()
        if self.per_request:
            print_per_request(self.out, df)
        print_summary(self.out, summary_mod.summarize(df, points=self.points))


def _split_lists(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> list[float]:
    out = []
    for v in values:
        for part in v.replace(",", " ").split():
            try:
                out.append(float(part))
            except ValueError:
                raise click.BadParameter(f"not a number: {part!r}", ctx=ctx, param=param) from None
    return out


@click.command()
@click.argument("trace", type=click.Path(dir_okay=False))
@click.option("--url", help="Server base URL, e.g. http://127.0.0.1:8000/v1. Without it: the embedded simulator.")
@click.option("--model", help="Model name to send (replaces the trace's). Default: the trace's, else the server's first.")
@click.option("--rate", "rates", multiple=True, callback=_split_lists, help="Open loop at R requests/s. Several values make a sweep: --rate 1 2 4 8")
@click.option("--speedup", "speedups", multiple=True, callback=_split_lists, help="Open loop at the trace's own arrival times, X times faster.")
@click.option("--concurrency", "concurrencies", multiple=True, callback=_split_lists, help="Closed loop with N requests in flight. Several values make a sweep.")
@click.option("--arrival", type=click.Choice(ARRIVALS), default="poisson", show_default=True, help="Arrival process for --rate.")
@click.option("--burstiness", type=float, default=1.0, show_default=True, help="Gamma shape for --arrival gamma (1 = Poisson, <1 burstier).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seeds the arrivals and the embedded simulator.")
@click.option("--max-concurrency", type=int, help="Cap on requests in flight in the open-loop modes.")
@click.option("--num-requests", type=int, help="Requests per point (loops over the trace if it is shorter).")
@click.option("--duration", type=float, help="Stop scheduling after this many seconds per point.")
@click.option("--warmup", type=int, default=0, show_default=True, help="First N requests kept in the file but left out of the summary.")
@click.option("--timeout", type=float, default=600.0, show_default=True, help="Per-request timeout, seconds.")
@click.option("--max-tokens", type=int, help="Output budget, set in the field each API uses.")
@click.option("--ignore-eos", is_flag=True, help="Ask the server to generate up to the budget (vLLM, SGLang).")
@click.option("--extra-body", help="JSON object merged into every request body.")
@click.option("--header", "headers", multiple=True, help="Extra request header 'Name: value' (repeatable).")
@click.option("--api-key", envvar="OPENAI_API_KEY", show_envvar=True, help="Sent as a Bearer token; never written anywhere.")
@click.option("--label", default="run", show_default=True, help="Label stored with every row.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Results file (Arrow). Default: specreplay-<run id>.arrow")
@click.option("--per-request", is_flag=True, help="Print one line per request.")
@click.option("--strict", is_flag=True, help="Exit non-zero when a validity check finds a problem.")
@click.option("--continuous-usage/--no-continuous-usage", default=True, show_default=True, help="Ask for usage on every chunk (exact tokens per chunk).")
@click.option("--sim-config", type=click.Path(dir_okay=False), help="TOML settings for the embedded simulator (see `specreplay serve --help`).")
def replay(**opts: Any) -> None:
    """Replay TRACE against a server (or the embedded simulator) and measure it.

    Results go to an Arrow file with one row per request; a summary and the
    validity checks are printed after each sweep point.
    """
    config = ReplayConfig(
        trace=opts["trace"],
        url=opts["url"],
        model=opts["model"],
        rates=opts["rates"],
        speedups=opts["speedups"],
        concurrencies=[int(c) for c in opts["concurrencies"]],
        arrival=opts["arrival"],
        burstiness=opts["burstiness"],
        seed=opts["seed"],
        max_concurrency=opts["max_concurrency"],
        num_requests=opts["num_requests"],
        duration=opts["duration"],
        warmup=opts["warmup"],
        timeout=opts["timeout"],
        max_tokens=opts["max_tokens"],
        ignore_eos=opts["ignore_eos"],
        extra_body=parse_extra_body(opts["extra_body"]),
        headers=[parse_header(h) for h in opts["headers"]],
        api_key=opts["api_key"] or None,
        label=opts["label"],
        output=opts["output"],
        continuous_usage=opts["continuous_usage"],
        sim_config=load_sim_config(opts["sim_config"]),
    )
    out = Console()
    err = Console(stderr=True)
    hooks = ConsoleHooks(out, err, opts["per_request"])
    found: list[validity.Finding] = []

    def finalize(table: pa.Table) -> dict[str, str]:
        df = to_frame(table)
        found.extend(validity.check(df))
        return {"specreplay.validity": validity.to_json(found)}

    try:
        result = run_replay(config, hooks, finalize)
    except ConfigError as e:
        raise click.ClickException(str(e)) from None
    print_findings(out, found)
    err.print(f"results: {result.path}  ({'interrupted, ' if result.interrupted else ''}run id {result.run_id})", highlight=False)
    if result.interrupted:
        sys.exit(EXIT_INTERRUPTED)
    if validity.is_fatal(found, opts["strict"]):
        err.print("[bold red]--strict: the validity checks failed[/bold red]")
        sys.exit(EXIT_INVALID)
