"""`specreplay init`: a commented starter config for the user's server."""

from __future__ import annotations

from pathlib import Path

import click

from specreplay.errors import ConfigError
from specreplay.trace.shaping import base_url
from specreplay.run.target import list_models

TEMPLATE = """\
# specreplay benchmark config: `specreplay replay --config {name}`.
# Every `specreplay replay` option can be set here (flags override it, and
# SPECREPLAY_<OPTION> environment variables sit in between). More examples:
# `--config sample:spec-decode-ab` (an A/B run), sample:rate-sweep, ...

# The trace: a JSON Lines file (docs/trace-format.md), or a sample shipped
# with specreplay (sample:reasoning-prompts, sample:poisson-200).
trace = "sample:reasoning-prompts"
{target}
# The API key is never written in this file: it is read from the
# environment variable named here.
api_key_env = "OPENAI_API_KEY"

# Load: one of rate (open loop, req/s), speedup (the trace's own timing),
# concurrency (closed loop). Several values make a sweep.
concurrency = [1, 8]
# rate = [1, 2, 4, 8]
# arrival = "poisson"            # poisson | constant | gamma (with burstiness)
seed = 0

# Sessions (records sharing a session_id): each turn is sent when the one
# before it has ended, plus the user's think time (docs/sessions.md).
# sessions = "dependent"         # or "independent": every request on its own
# think_time = "exp:2"           # seconds, where the trace records none
# think_time_scale = 1.0         # 0: no think time at all

# A reasoning model spends its budget on reasoning first: set it generously,
# or every answer comes back empty (the run says so, loudly).
max_tokens = 4096
# ignore_eos = true              # vLLM/SGLang: generate up to the budget
# num_requests = 100             # loops over a shorter trace
# warmup = 2                     # kept in the file, left out of summaries
timeout = 600.0
output = "results.arrow"
# The server's Prometheus metrics (acceptance, load) are scraped during the run:
# metrics_url = "http://127.0.0.1:8000/metrics"   # default: <server root>/metrics
# metrics_interval = 1.0
# metrics = false                # not at all

# [extra_body]                   # merged into every request body
# temperature = 0.6

# [thresholds]                   # validity checks (docs/results.md)
# send_lag_p99_ms = 1.0
# max_error_rate = 0.01

# [slo]                          # goodput and targets in every summary (docs/capacity.md)
# ttft = 2000                    # per request, ms: TTFT means the first answer token
# tpot = 50
# targets = ["p99 ttft < 2000", "p90 tpot < 50"]
# min_success_rate = 0.99
# `--find-max-rate` (find_max_rate = true) then searches the highest rate
# whose targets hold.

# Several named runs go into one results file, each labelled by its name and
# stating only what differs, e.g. speculative decoding on and off:
# [run.baseline]
# [run.ngram]
# url = "http://127.0.0.1:8001/v1"
"""


@click.command()
@click.option("--url", help="Your server's base URL; its /v1/models gives the model name.")
@click.option("-o", "--output", "path", default="specreplay.toml", show_default=True, type=click.Path(dir_okay=False))
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
def init(url: str | None, path: str, force: bool) -> None:
    """Write a commented starter config."""
    if Path(path).exists() and not force:
        raise click.ClickException(f"{path} exists (use --force to overwrite it)")
    if url is None:
        target = "# url = \"http://127.0.0.1:8000/v1\"   # without a url: the embedded simulator\n# [sim]                            # its settings: docs/simulator.md\n# tpot_ms = 16"
    else:
        try:
            models = list_models(url, [])
        except ConfigError as e:
            raise click.ClickException(str(e)) from None
        model = f'model = "{models[0]}"' if models else '# model = "…"                     # the server lists none: name it'
        others = f"   # also served: {', '.join(models[1:])}" if len(models) > 1 else ""
        target = f'url = "{base_url(url)}"\n{model}{others}'
    Path(path).write_text(TEMPLATE.format(name=path, target=target), encoding="utf-8")
    click.echo(f"wrote {path}")
