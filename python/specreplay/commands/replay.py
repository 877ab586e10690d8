"""`specreplay replay`: the main job."""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import replace
from typing import Any

import click
from click.core import ParameterSource
import pyarrow as pa
from rich.console import Console
from rich.text import Text

from specreplay.literals import ARRIVALS, SESSION_MODES
from specreplay.settings.config import Point, ReplayConfig
from specreplay.settings.config_file import apply_overrides, env_overrides, load_config_file
from specreplay.run.capacity import Answer
from specreplay.present.console import cli_console, is_tty, print_capacity, print_per_request, print_summary, print_verdict
from specreplay.errors import EXIT_INTERRUPTED, EXIT_INVALID, ConfigError
from specreplay.present.live import PLAIN_INTERVAL_S, LiveView
from specreplay.run.plan import FinishedPoint, Progress
from specreplay.run.replay import Hooks, run_replay
from specreplay.results.files import VALIDITY_KEY, to_frame
from specreplay.settings.objectives import merge_tables, table_from_expressions
from specreplay.settings.thresholds import ValidityThresholds
from specreplay.run.target import Target
from specreplay.settings.tomlfile import read_toml
from specreplay.run import pandas_later
from specreplay.analysis.finding import Finding, is_fatal, to_json  # no pandas: the analysis itself is imported after the first point


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


def parse_what_if(value: str) -> tuple[str, Any]:
    """`--what-if KEY=VALUE`: the value as JSON (a number, a list), else as written."""
    key, sep, raw = value.partition("=")
    if not sep or not key.strip():
        raise click.BadParameter(f"expected KEY=VALUE (e.g. max_num_seqs=8), got {value!r}", param_hint="--what-if")
    try:
        parsed: Any = json.loads(raw)
    except json.JSONDecodeError:
        parsed = raw.strip()
    return key.strip(), parsed


def load_sim_config(path: str | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        return read_toml(path)
    except ConfigError as e:
        raise click.BadParameter(str(e), param_hint="--sim-config") from None


class ConsoleHooks(Hooks):
    """While a point runs, the live view (`live.LiveView`: a rich display on
    a terminal, a plain status line every `status_interval` seconds
    elsewhere); after it, its summary, its SLO verdicts and what the
    validity checks found on it (each run under its own thresholds); after a
    capacity search, its answer. Each point is analysed once
    (`FinishedPoint.runs`); `findings` hands what the checks found on to
    the results file. `live`: "terminal", "plain", "off", or None to choose from the
    output (a terminal or not)."""

    def __init__(
        self,
        out: Console,
        err: Console,
        per_request: bool,
        live: str | None = None,
        status_interval: float = PLAIN_INTERVAL_S,
        configs: list[ReplayConfig] | None = None,
    ) -> None:
        self.out = out
        self.err = err
        self.per_request = per_request
        mode = live or ("terminal" if is_tty(err) else "plain")
        self.view = None if mode == "off" else LiveView(err, terminal=mode == "terminal", interval_s=status_interval)
        self.found: list[tuple[str, list[Finding]]] = []  # (label, findings) per finished point
        # Each run's thresholds, typed, from its config: the live view's burst limit.
        self.thresholds = {c.label: ValidityThresholds.from_dict(c.thresholds) for c in configs or []}
        self.analysed_rows = 0
        #: Rows written so far: every request sent has one (none: none was sent).
        self.written_rows = 0

    def target(self, target: Target, description: str) -> None:
        self.err.print(description, highlight=False)

    def note(self, message: str) -> None:
        self.err.print(f"note: {message}", highlight=False)

    def point_started(self, point: Point, index: int, total: int | None, label: str, expected: int, status: str | None) -> None:
        count = f"{index + 1}/{total}" if total is not None else f"{index + 1}"
        search = f"  (search bracket {status})" if status else ""
        self.err.print(Text(f"point {count}: {label} · {point.name}{search}", style="bold"))
        if self.view is not None:
            self.view.start(point.name, expected, status, self.thresholds.get(label))

    def rows(self, batch: pa.RecordBatch) -> None:
        self.written_rows += batch.num_rows
        if self.view is not None:
            self.view.rows(batch)

    def progress(self, p: Progress) -> None:
        if self.view is not None:
            self.view.update(p)

    def point_finished(self, finished: FinishedPoint) -> None:
        if self.view is not None:
            self.view.stop()
        # The analysis (pandas) is imported here, once the point's engine has
        # returned every row (`pandas_later`). The rows carry the file's
        # metadata: the run's recorded config, its thresholds, max_tokens and
        # SLOs among them.
        from specreplay.analysis.summary import request_lines
        from specreplay.analysis.summary_row import by_model

        for run in finished.runs:
            if self.per_request:
                print_per_request(self.out, request_lines(run.rows))
            print_summary(self.out, run.summary, run.findings, run.slo, {p.point: p.slo_verdicts for p in run.points},
                          {p.point: p.ttft_by_turn for p in run.points}, {p.point: by_model(p) for p in run.points})
            self.found.append((run.label, run.findings))
        self.analysed_rows += finished.rows.num_rows

    def search_finished(self, label: str, answer: Answer, lines: list[str]) -> None:
        print_capacity(self.out, label, lines)

    def findings(self, table: pa.Table) -> list[Finding]:
        """The findings of every point in `table`, the run's rows: those
        printed with each point, unless rows were written that no finished
        point reported (a run that failed mid-point), which are then all
        analysed again."""
        from specreplay.analysis.analyse import analyse, findings_of

        if self.analysed_rows != table.num_rows:
            return findings_of([(run.label, run.findings) for run in analyse(to_frame(table))])
        return findings_of(self.found)


def _split_lists(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> list[float] | None:
    out = []
    for v in values:
        for part in v.replace(",", " ").split():
            try:
                out.append(float(part))
            except ValueError:
                raise click.BadParameter(f"not a number: {part!r}", ctx=ctx, param=param) from None
    return out or None


def _flag_values(ctx: click.Context, opts: dict[str, Any]) -> dict[str, Any]:
    """The config fields the user set on the command line (and only those:
    an option left at its default must not override the file or the env)."""
    given = {
        name: value
        for name, value in opts.items()
        if ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE and name not in CLI_ONLY
    }
    flags: dict[str, Any] = {}
    for name, value in given.items():
        if name == "headers":
            flags["headers"] = dict(parse_header(h) for h in value)
        elif name == "extra_body":
            flags["extra_body"] = parse_extra_body(value)
        elif name == "sim_config":
            flags["sim"] = load_sim_config(value)
        elif name == "concurrency":
            flags["concurrency"] = [int(c) for c in value] if all(float(c).is_integer() for c in value) else value
        elif name == "slo":
            flags["slo"] = {**flags.get("slo", {}), **table_from_expressions(value)}
        elif name == "what_if":
            flags["what_if"] = dict(parse_what_if(v) for v in value)
        elif name == "slo_ttft_token":
            flags["slo"] = {**flags.get("slo", {}), "ttft_token": value}
        else:
            flags[name] = value
    return flags


#: Options that steer this command rather than describe the benchmark.
CLI_ONLY = frozenset({"config_path", "per_request", "strict", "api_key", "status_interval"})


def interleave_repeats(configs: list[ReplayConfig]) -> list[ReplayConfig]:
    """Each run `repeats` times, interleaved (A@1 B@1 A@2 B@2 …), so that a
    drift of the machine between runs falls on every run alike; repeat k
    seeds the arrivals and the simulator with seed + k − 1, as a sampling
    server draws anew on every run."""
    most = max(c.repeats for c in configs)
    if most <= 1:
        return configs
    out = []
    for k in range(1, most + 1):
        out += [replace(c, label=f"{c.label}@{k}", seed=c.seed + k - 1, repeats=1) for c in configs if k <= c.repeats]
    return out


def resolve_configs(ctx: click.Context, opts: dict[str, Any]) -> list[ReplayConfig]:
    """file < SPECREPLAY_* environment < flags, for each run the file names."""
    try:
        given = _flag_values(ctx, opts)
        flags = ReplayConfig.from_mapping(given, lambda key: "--slo" if key == "slo" else f"--{key.replace('_', '-')}")
        flag_values = {k: getattr(flags, k) for k in given}
        # --slo merges into the file's [slo] table key by key (slo.merge_tables).
        slo_flags = flag_values.pop("slo", None)
        if flag_values.get("find_max_rate"):
            # The search replaces the file's sweep; a --rate given with it is where it starts.
            flag_values = {"concurrency": [], "speedup": [], "rate": flag_values.get("rate", []), **flag_values}
        if opts["config_path"] is not None:
            configs = load_config_file(opts["config_path"], os.environ, flag_values)
            if len(configs) > 1 and "label" in flag_values:
                raise ConfigError("--label: the config file names several runs, each labelled by its name")
        else:
            configs = [apply_overrides(ReplayConfig(), {**env_overrides(os.environ), **flag_values})]
        if slo_flags is not None:
            configs = [apply_overrides(c, {"slo": merge_tables(c.slo, slo_flags)}) for c in configs]
        configs = interleave_repeats(configs)
        for config in configs:
            config.resolve_api_key()
            if opts["api_key"]:
                config.api_key = opts["api_key"]
            config.validate()
    except ConfigError as e:
        raise click.UsageError(str(e)) from None
    return configs


#: Options that take a list of numbers: `--rate 1 2 4` is read as
#: `--rate 1 --rate 2 --rate 4` (click options take one value each).
LIST_OPTIONS = frozenset({"--rate", "--speedup", "--concurrency"})
_NUMBER = re.compile(r"^[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$")


def expand_list_options(args: list[str]) -> list[str]:
    out: list[str] = []
    current: str | None = None  # the list option whose values are being read
    emitted = False  # whether `current` has been written out with a value
    for arg in args:
        if current is not None and _NUMBER.match(arg):
            out += [current, arg]
            emitted = True
            continue
        if current is not None and not emitted:
            out.append(current)  # no number followed: let click report it
        current = arg if arg in LIST_OPTIONS else None
        emitted = False
        if current is None:
            out.append(arg)
    if current is not None and not emitted:
        out.append(current)
    return out


class ListOptionsCommand(click.Command):
    """A command whose LIST_OPTIONS take several numbers (only `replay`: other
    commands' `--rate` takes one, and a second number must stay an error)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, expand_list_options(args))


@click.command(cls=ListOptionsCommand)
@click.argument("trace", required=False)  # a path, or a shipped sample: sample:reasoning-prompts
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="TOML benchmark config, or a shipped example: sample:spec-decode-ab, sample:rate-sweep, ...; flags override it.")
@click.option("--url", help="Server base URL, e.g. http://127.0.0.1:8000/v1. Without it: the embedded simulator.")
@click.option("--model", help="Model name to send (replaces the trace's). Default: the trace's, else the server's first.")
@click.option("--model-mix", help="Draw each request's model: 'base:0.7,lora-a:0.2,lora-b:0.1' (weights, seeded by --seed; a session keeps one model). Results have a `model` column; the summary gives figures per model.")
@click.option("--rate", multiple=True, callback=_split_lists, help="Open loop at R requests/s. Several values make a sweep: --rate 1 2 4 8")
@click.option("--speedup", multiple=True, callback=_split_lists, help="Open loop at the trace's own arrival times, X times faster.")
@click.option("--concurrency", multiple=True, callback=_split_lists, help="Closed loop with N requests in flight. Several values make a sweep.")
@click.option("--arrival", type=click.Choice(ARRIVALS), default="poisson", show_default=True, help="Arrival process for --rate.")
@click.option("--burstiness", type=float, default=1.0, show_default=True, help="Gamma shape for --arrival gamma (1 = Poisson, <1 burstier).")
@click.option("--sessions", type=click.Choice(SESSION_MODES), default="dependent", show_default=True,
              help="dependent: a session's turn is sent when the turn before it has ended, plus its think time (the load mode starts sessions); independent: every request at its own place in the schedule.")
@click.option("--live-history", is_flag=True, default=None, help="Dependent sessions: each turn carries the answer the server gave to the turn before it, in place of the recorded one.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seeds the arrivals and the embedded simulator.")
@click.option("--repeats", type=int, help="Run each run N times, interleaved (A B A B …), repeat k with seed + k − 1, labelled LABEL@k; compare then judges on the variation between repeats (docs/compare.md).")
@click.option("--max-concurrency", type=int, help="Cap on requests in flight in the open-loop modes.")
@click.option("--num-requests", type=int, help="Requests per point (loops over the trace if it is shorter).")
@click.option("--duration", type=float, help="Stop scheduling after this many seconds per point.")
@click.option("--warmup", type=int, default=0, show_default=True, help="First N requests kept in the file but left out of the summary.")
@click.option("--timeout", type=float, default=600.0, show_default=True, help="Per-request timeout, seconds (retries included).")
@click.option("--stall-timeout", type=float, help="Fail a request when no bytes arrive for this many seconds.")
@click.option("--retries", type=int, default=0, show_default=True, help="Retry connection failures, 429 and 5xx this many times, with backoff (a retry changes the load).")
@click.option("--preconnect/--no-preconnect", default=None, help="Open the connections before the clock starts, so no request's TTFT holds a handshake. Default: on for --concurrency (one per request in flight) and for --rate (as many as 250 ms of its arrivals, at least one, at most --max-concurrency), off for --speedup. Asked for in an open loop, it opens --max-concurrency connections.")
@click.option("--think-time", help="Sessions: seconds between an answer and the session's next turn where the trace records none: fixed (0.5) or a distribution (exp:2, uniform:1:3, ...).")
@click.option("--think-time-scale", type=float, default=1.0, show_default=True, help="Sessions: multiply every think time (recorded or drawn) by this; 0 = none.")
@click.option("--max-tokens", type=int, help="Output budget, set in the field each API uses.")
@click.option("--ignore-eos", is_flag=True, default=None, help="Ask the server to generate up to the budget (vLLM, SGLang).")
@click.option("--extra-body", help="JSON object merged into every request body.")
@click.option("--header", "headers", multiple=True, help="Extra request header 'Name: value' (repeatable).")
@click.option("--api-key", help="Sent as a Bearer token; never written anywhere. Default: $OPENAI_API_KEY (or the variable api_key_env names).")
@click.option("--label", default="run", show_default=True, help="Label stored with every row.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Results file (Arrow). Default: specreplay-<run id>.arrow")
@click.option("--per-request", is_flag=True, help="Print one line per request.")
@click.option("--strict", is_flag=True, help="Exit non-zero when a validity check finds an error or warning.")
@click.option("--continuous-usage/--no-continuous-usage", default=True, show_default=True, help="Ask for usage on every chunk (exact tokens per chunk).")
@click.option("--tokenizer", type=click.Path(dir_okay=False), help="A Hugging Face tokenizer.json: without continuous usage, count each chunk's tokens from its text after each point (needs the `tokenizers` package) instead of estimating them from its length.")
@click.option("--server-tokenize", is_flag=True, default=None, help="The same with the server's own POST /tokenize (llama.cpp), asked after each point, never during one.")
@click.option("--metrics/--no-metrics", default=True, show_default=True, help="Scrape the server's Prometheus metrics during the run (acceptance, load); kept in the results.")
@click.option("--metrics-url", help="Where to scrape them. Default: <server root>/metrics of --url (or of the embedded simulator).")
@click.option("--metrics-interval", type=float, default=1.0, show_default=True, help="Seconds between scrapes while a point runs (each point is also scraped at its start and end).")
@click.option("--ray", is_flag=False, flag_value="local", default=None, metavar="[ADDRESS]", help="Distributed replay on Ray (pip install 'specreplay[ray]'): without ADDRESS a local Ray instance, else a cluster's address (auto, ray://host:10001). Put it after TRACE.")
@click.option("--workers", type=int, default=1, show_default=True, help="With --ray: Ray actors sharing each point (open loop: every Nth arrival each; closed loop: the concurrency split N ways; a session stays on one worker).")
@click.option("--sim-config", type=click.Path(dir_okay=False), help="TOML settings for the embedded simulator (see `specreplay serve --help`).")
@click.option("--slo", multiple=True, metavar="EXPR", help="An SLO (repeatable): 'ttft < 2000' per request (ms), 'p99 ttft < 2000' on a point, 'success >= 99%', 'attainment >= 90%'. Merged into the config's [slo].")
@click.option("--slo-ttft-token", type=click.Choice(["answer", "any"]), help="What 'ttft' in an SLO waits for: the first answer token (default) or the first token of any kind, reasoning included.")
@click.option("--find-max-rate", is_flag=True, default=None, help="Search for the highest request rate whose --slo targets hold (open loop; --rate R is where it starts).")
@click.option("--search-tolerance", type=float, help="--find-max-rate stops when the highest rate that held and the lowest that did not are this close (relative). Default 0.05.")
@click.option("--search-budget", type=float, help="--find-max-rate stops after this many seconds. Default 1800.")
@click.option("--predict", type=click.Path(dir_okay=False, exists=True), help="Predict every point from this server model (`specreplay calibrate` writes it) on a virtual clock instead of sending anything; the run is labelled predicted.")
@click.option("--predict-draw", "predict_draw", type=click.IntRange(min=0), help="With --predict: another draw of the model's own random numbers (which of two requests sent together reaches the server first, its speed, output lengths) on the same arrivals (--seed); 0, the default, draws them from --seed.")
@click.option("--what-if", "what_if", multiple=True, metavar="KEY=VALUE", help="With --predict: change one parameter of the server model (max_num_seqs=8, batch_step_cost=0.05, spec_draft_len=3, spec_acceptance=0.7, …). Repeatable.")
@click.option("--status-interval", type=float, default=10.0, show_default=True, help="When the output is not a terminal: seconds between two status lines.")
@click.option("--realtime/--no-realtime", envvar="SPECREPLAY_REALTIME", default=None,
              help="Run the engine's pacing and worker threads (and the embedded simulator's) under SCHED_FIFO where the process may (root, CAP_SYS_NICE): sends keep their schedule on a busy box. Default: on when every run's server is the embedded simulator (it takes the same policy), off with --url: a server on the same machine would wait behind the client (docs/benchmarks.md, 'Real-time engine threads').")
@click.pass_context
def replay(ctx: click.Context, /, **opts: Any) -> None:
    """Replay TRACE against a server (or the embedded simulator) and measure it.

    TRACE is a JSON Lines file or a sample shipped with specreplay:
    sample:reasoning-prompts, sample:poisson-200.

    Options can also come from a --config file (several named runs in one
    file run in turn into one results file) and SPECREPLAY_<OPTION>
    environment variables; flags win over both. Results go to an Arrow file
    with one row per request. After each sweep point: its summary and what
    the validity checks found on it (each run under its own thresholds). At
    the end: the verdict over every point (INVALID MEASUREMENT when a check
    found an error, with the points and checks concerned), also stored in
    the results file.
    """
    realtime = opts.pop("realtime")
    configs = resolve_configs(ctx, opts)
    # Read by the core as each engine thread starts (engine/priority.rs): set
    # before the first point starts the runtime.
    from specreplay import _core  # the binding: not for --help

    _core.set_realtime(wants_realtime(realtime, configs))
    run_and_report(configs, per_request=opts["per_request"], strict=opts["strict"], status_interval=opts["status_interval"])


def wants_realtime(asked: bool | None, configs: list[ReplayConfig]) -> bool:
    """Real-time engine threads: as asked, else when no run has a server of
    its own. The embedded simulator takes the engine's policy, so nothing of
    the measurement waits behind it; a server elsewhere on this machine
    would (a closed loop of 1,024 streams took 8.2-8.5 s against 4.3-5.1 s,
    docs/benchmarks.md), and the client's threads cannot tell where it runs.
    At 4,000/s of short requests against the embedded simulator the normal
    policy's send lag p99 was 1.2-1.6 ms (`client_saturated`), real-time's
    94-291 us in 5 of 6 runs (`bench/open_loop_warmup.py`, docs/benchmarks.md)."""
    if asked is not None:
        return asked
    return all(config.url is None for config in configs)


def run_and_report(configs: list[ReplayConfig], *, per_request: bool, strict: bool, status_interval: float = PLAIN_INTERVAL_S) -> None:
    """Runs, prints, and exits with the status the findings call for."""
    if not any(c.ray or c.workers > 1 for c in configs):  # Ray's own imports are not this module's to order
        pandas_later.defer()
    out = cli_console()
    err = cli_console(stderr=True)
    hooks = ConsoleHooks(out, err, per_request, status_interval=status_interval, configs=configs)
    found: list[Finding] = []

    def finalize(table: pa.Table) -> dict[str, str]:
        found.extend(hooks.findings(table))
        return {VALIDITY_KEY: to_json(found)}

    try:
        result = run_replay(configs, hooks, finalize)
    except KeyboardInterrupt:  # before the results file was opened (`run_replay`)
        err.print("interrupted before the first point started: no request was sent, and no results file was written")
        sys.exit(EXIT_INTERRUPTED)
    print_verdict(out, found)
    if result.interrupted and not hooks.written_rows:
        err.print(f"interrupted before any request was sent: {result.path} holds no rows")
    err.print(f"results: {result.path}  ({'interrupted, ' if result.interrupted else ''}run id {result.run_id})", highlight=False)
    if result.interrupted:
        sys.exit(EXIT_INTERRUPTED)
    if is_fatal(found, strict):
        err.print("[bold red]--strict: the validity checks failed[/bold red]")
        sys.exit(EXIT_INVALID)
