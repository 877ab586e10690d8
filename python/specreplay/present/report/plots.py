"""The report's charts, each an inline SVG string (`report.svg`) drawn from
`report.data`. Every (run, sweep point) is one series: its own colour, and
for lines a dash per sweep point, so runs and points can both be told apart."""

from __future__ import annotations

from specreplay.present.report import data
from specreplay.present.report.svg import DASHES, PALETTE, Series, bars, xy

#: The latency CDFs drawn, (metric, title).
CDFS: tuple[tuple[str, str], ...] = (
    ("ttft", "TTFT: time to first token (any channel)"),
    ("ttfc", "TTFC: time to first answer token"),
    ("tpot", "TPOT: time per output token"),
    ("e2e", "E2E: request latency"),
)


def _styles(runs: list[data.RunData]) -> list[tuple[data.PointData, str, str]]:
    """Every (run, point) with its colour (one per run) and dash (one per sweep point)."""
    point_names = list(dict.fromkeys(p.point for r in runs for p in r.points))
    out = []
    for i, r in enumerate(runs):
        for p in r.points:
            out.append((p, PALETTE[i % len(PALETTE)], DASHES[point_names.index(p.point) % len(DASHES)]))
    return out


def latency_cdf(runs: list[data.RunData], metric: str, title: str) -> str:
    series = []
    for p, color, dash in _styles(runs):
        x, y = data.cdf(data.latency_ms(p, metric))
        series.append(Series(p.name, x, y * 100, color, dash, "step"))
    return xy(series, title=title, xlabel="ms", ylabel="% of requests at or below", ylim=(0.0, 100.0))


def tpot_over_time(runs: list[data.RunData]) -> str:
    series = []
    for p, color, dash in _styles(runs):
        x, y = data.over_time(p, "end_us", "tpot_us", scale=1000.0)
        series.append(Series(p.name, x, y, color, dash, kind="points"))
    return xy(series, title="TPOT over time (one dot per request, at its end)", xlabel="s since the point's first send", ylabel="TPOT ms", x_from_zero=True)


def throughput_over_time(runs: list[data.RunData]) -> str:
    duration = max((float(r.summary["duration_s"].max()) for r in runs if len(r.summary)), default=1.0)
    width = data.bin_width_s(duration)
    series = []
    for p, color, dash in _styles(runs):
        x, y = data.throughput(p, width)
        series.append(Series(p.name, x, y, color, dash, "line"))
    return xy(
        series,
        title=f"Output tokens/s over time ({width:g} s bins)",
        xlabel="s since the point's first send",
        ylabel="tokens/s",
        x_from_zero=True,
    )


def tokens_per_chunk(runs: list[data.RunData]) -> str:
    styled = _styles(runs)
    shares = [(p, color, dash, data.tokens_per_chunk(p)) for p, color, dash in styled]
    categories = list(shares[0][3]) if shares else []
    groups = [(p.name, [s[c] for c in categories], color, dash) for p, color, dash, s in shares]
    return bars(
        categories,
        groups,
        title="Tokens per chunk (above 1: speculation or batching)",
        xlabel="tokens in the chunk",
        ylabel="share of chunks",
        percent=True,
    )


def server_load_over_time(runs: list[data.RunData]) -> str:
    """Requests running (lines) and waiting (dots) as the server's scrapes saw them."""
    series = []
    for p, color, dash in _styles(runs):
        for key, kind in (("running", "line"), ("waiting", "points")):
            x, y = data.server_gauge(p, key)
            series.append(Series(f"{p.name} · {key}", x, y, color, dash, kind))
    return xy(series, title="Server: requests running (lines) and waiting (dots)",
              xlabel="s since the point's first send", ylabel="requests", x_from_zero=True)  # fmt: skip


def acceptance_over_time(runs: list[data.RunData]) -> str:
    series = []
    for p, color, dash in _styles(runs):
        x, y = data.server_acceptance(p)
        series.append(Series(p.name, x, y, color, dash, "line"))
    return xy(series, title="Server: draft acceptance rate, scrape to scrape",
              xlabel="s since the point's first send", ylabel="% of draft tokens accepted", x_from_zero=True, ylim=(0.0, 100.0))  # fmt: skip


def acceptance_by_position(runs: list[data.RunData]) -> str:
    """The share of verification steps whose accepted run reached each draft position."""
    styled = [(p, color, dash, p.analysis.server["spec_acceptance_by_position"]) for p, color, dash in _styles(runs)]
    styled = [s for s in styled if s[3]]
    depth = max((len(s[3]) for s in styled), default=0)
    categories = [f"draft {i + 1}" for i in range(depth)]
    groups = [(p.name, list(shares) + [float("nan")] * (depth - len(shares)), color, dash) for p, color, dash, shares in styled]
    return bars(categories, groups, title="Server: acceptance by draft position",
                xlabel="position in the draft", ylabel="share of verification steps", percent=True)  # fmt: skip


def ttft_vs_prompt(runs: list[data.RunData]) -> str:
    series = []
    for p, color, dash in _styles(runs):
        x, y = data.prompt_vs_ttft(p)
        series.append(Series(p.name, x, y, color, dash, kind="points"))
    return xy(series, title="TTFT against prompt length", xlabel="prompt tokens", ylabel="TTFT ms", x_from_zero=True)


def send_lag_over_time(runs: list[data.RunData]) -> str:
    series = []
    for p, color, dash in _styles(runs):
        x, y = data.over_time(p, "scheduled_us", "send_lag_us", scale=1000.0, ok_only=False)
        series.append(Series(p.name, x, y, color, dash, kind="points"))
    return xy(
        series,
        title="Send lag over time (sent − scheduled; should stay near 0)",
        xlabel="s since the point's first send",
        ylabel="send lag ms",
        x_from_zero=True,
    )


def ttft_by_turn(runs: list[data.RunData]) -> str:
    """TTFT against the turn index of sessions: p50 joined, p90 as dots."""
    series = []
    for p, color, dash in _styles(runs):
        by_turn = p.analysis.ttft_by_turn
        if by_turn.empty:
            continue
        turns = by_turn.index.to_numpy(dtype="float64")
        series.append(Series(f"{p.name} p50", turns, by_turn["ttft_p50_ms"].to_numpy(), color, dash, "line"))
        series.append(Series(f"{p.name} p90", turns, by_turn["ttft_p90_ms"].to_numpy(), color, dash, "points"))
    return xy(
        series,
        title="TTFT by turn of session (p50 joined, p90 dots)",
        xlabel="turn index (0: a session's first request)",
        ylabel="TTFT ms",
        x_from_zero=True,
    )


def all_plots(runs: list[data.RunData]) -> list[tuple[str, str]]:
    """(section id, SVG) of every chart, in page order (TTFT by turn only
    when a run had sessions)."""
    out = [(f"cdf-{metric}", latency_cdf(runs, metric, title)) for metric, title in CDFS]
    out += [
        ("tpot-time", tpot_over_time(runs)),
        ("throughput-time", throughput_over_time(runs)),
    ]
    # The server's own view, aligned with the two above (same time axis).
    if data.has_server_metrics(runs):
        out.append(("server-load", server_load_over_time(runs)))
    if data.has_speculation(runs):
        out += [("acceptance-time", acceptance_over_time(runs)), ("acceptance-position", acceptance_by_position(runs))]
    out += [
        ("tokens-per-chunk", tokens_per_chunk(runs)),
        ("ttft-prompt", ttft_vs_prompt(runs)),
        ("send-lag", send_lag_over_time(runs)),
    ]
    if any(not p.analysis.ttft_by_turn.empty for r in runs for p in r.points):
        out.append(("ttft-turn", ttft_by_turn(runs)))
    return out

