"""The tables `client_bench.py` prints (and keeps in its JSON): one row per
point and run, the clients side by side, with the load average of the runs."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

Result = dict[str, Any]
# point (kind, size) -> run index -> client -> result
Grid = dict[tuple[str, Any], dict[int, dict[str, Result]]]


def num(v: float | None, digits: int = 0) -> str:
    return "–" if v is None else f"{v:,.{digits}f}"


def get(res: Result | None, *path: str) -> Any:
    for p in path:
        if not isinstance(res, dict) or p not in res:
            return None
        res = res[p]
    return res


def stats(res: Result | None, key: str, scale: float = 1.0, digits: int = 0) -> str:
    """p50 / p99 / max of a percentile dict."""
    st = get(res, key)
    if not st or not st.get("n"):
        return "–"
    return " / ".join(num(st[k] / scale, digits) for k in ("p50", "p99", "max"))


def ratio(a: float | None, b: float | None) -> str:
    return "–" if a is None or not b else f"{a / b:.2f}"


def load(runs: dict[str, Result]) -> str:
    loads = [x for r in runs.values() for x in r.get("loadavg_1min", [])]
    return f"{min(loads):.1f}–{max(loads):.1f}" if loads else "–"


def grid(results: list[Result]) -> Grid:
    """Groups results by point, numbering the runs of each client in order."""
    out: Grid = defaultdict(lambda: defaultdict(dict))
    seen: dict[tuple[Any, ...], int] = defaultdict(int)
    for r in results:
        point = r.get("concurrency", r.get("streams", r.get("rate")))
        if r["kind"] == "wave":
            point = (point, r["preconnect"])
        key = (r["kind"], point, r["client"])
        out[(r["kind"], point)][seen[key]][r["client"]] = r
        seen[key] += 1
    return out


def table(lines: list[str], title: str, heads: list[str], rows: list[list[str]]) -> None:
    if not rows:
        return
    lines += ["", title, "| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]


def rows_of(g: Grid, kind: str, row: Callable[[Any, dict[str, Result]], list[str]]) -> list[list[str]]:
    out = []
    for (k, point), runs in sorted(g.items(), key=lambda kv: str(kv[0][1]).zfill(12)):
        if k != kind:
            continue
        for _, clients in sorted(runs.items()):
            if any(isinstance(r.get("failed"), str) for r in clients.values()):
                failed = ", ".join(c for c, r in clients.items() if isinstance(r.get("failed"), str))
                out.append([str(point), f"worker failed: {failed}"])
                continue
            out.append(row(point, clients))
    return out


def report(results: list[Result]) -> str:
    g = grid(results)
    lines: list[str] = []

    def error_row(point: Any, c: dict[str, Result]) -> list[str]:
        s = c.get("specreplay")
        return [str(point), num(get(s, "error_us", "n") or get(c.get("reference"), "user_error_us", "n")),
                stats(s, "error_us"), stats(s, "user_error_us"), stats(c.get("reference"), "user_error_us"),
                stats(c.get("baseline"), "user_error_us"), load(c)]

    table(lines, "Chunk stamp error, µs p50 / p99 / max (client stamp − simulator send stamp; first wave excluded)",
          ["streams", "chunks", "specreplay kernel stamp", "specreplay engine stamp", "reference (user space)",
           "baseline (user space)", "load"], rows_of(g, "error", error_row))

    def cpu(r: Result | None) -> str:
        if r is None:
            return "–"
        return (f"{num(r.get('cpu_us_per_chunk'), 1)} ({num(r.get('user_us_per_chunk'), 1)} + "
                f"{num(r.get('sys_us_per_chunk'), 1)})")

    def cpu_row(point: Any, c: dict[str, Result]) -> list[str]:
        per = {k: get(c.get(k), "cpu_us_per_chunk") for k in ("specreplay", "reference", "floor")}
        return [str(point), num(get(c.get("specreplay"), "chunks_per_s"))] + [
            cpu(c.get(k)) for k in ("specreplay", "reference", "floor", "baseline")] + [
            ratio(per["specreplay"], per["reference"]), load(c)]

    table(lines, "Client CPU per text chunk, µs: total (user + system), same runs",
          ["streams", "chunks/s", "specreplay", "reference", "floor", "baseline", "specreplay / reference", "load"],
          rows_of(g, "error", cpu_row))

    def mem(r: Result | None) -> str:
        if r is None:
            return "–"
        base, peak = r.get("rss_base_kib"), r.get("rss_in_flight_kib")
        return f"{num(r.get('kib_per_stream'), 1)} ({num(base and base / 1024, 1)} → {num(peak and peak / 1024, 1)})"

    def mem_row(point: Any, c: dict[str, Result]) -> list[str]:
        per = {k: get(c.get(k), "kib_per_stream") for k in ("specreplay", "reference")}
        flight = min((r.get("in_flight_min", 0) for r in c.values()), default=0)
        return [str(point)] + [mem(c.get(k)) for k in ("specreplay", "reference", "floor", "baseline")] + [
            ratio(per["specreplay"], per["reference"]), num(flight), load(c)]

    table(lines, "Memory per in-flight stream, KiB (RSS base → in flight, MiB)",
          ["streams", "specreplay", "reference", "floor", "baseline", "specreplay / reference", "min in flight", "load"],
          rows_of(g, "mem", mem_row))

    def wave_row(point: Any, c: dict[str, Result]) -> list[str]:
        s = c["specreplay"]
        n, preconnect = point
        return [str(n), "on" if preconnect else "off", stats(s, "ttft_us", 1e3, 1), num(s.get("connected")),
                stats(s, "connect_us", 1e3, 1), num(s.get("requests_failed")), load(c)]

    table(lines, "First-wave TTFT, ms p50 / p99 / max (N requests at once), and connection set-up",
          ["streams", "preconnect", "TTFT", "requests that connected", "connect", "failed", "load"],
          rows_of(g, "wave", wave_row))

    for runs in (v for (k, _), v in g.items() if k == "fixed"):
        rows = []
        for _, c in sorted(runs.items()):
            f = c["specreplay"]
            if isinstance(f.get("failed"), str):
                continue
            pts = f["points"]
            rows.append([f"{f['import_wall_s'] * 1e3:.0f} ms wall, {f['import_cpu_s'] * 1e3:.0f} ms CPU, "
                         f"{f['import_peak_rss_kib'] / 1024:.0f} MiB"]
                        + [f"{p['wall_s'] * 1e3:.1f} ms wall, {p['cpu_s'] * 1e3:.1f} ms CPU" for p in pts] + [load(c)])
        table(lines, "Fixed cost: importing specreplay._core (fresh interpreter), then three one-request points",
              ["import", "first point", "second point", "third point", "load"], rows)

    def lag_row(point: Any, c: dict[str, Result]) -> list[str]:
        s, b = c.get("specreplay"), c.get("baseline")
        return [f"{point:g}/s", num(get(s, "requests_sent")), stats(s, "lag_us"), stats(b, "lag_us"),
                ratio(get(s, "lag_us", "p99"), get(b, "lag_us", "p99")), load(c)]

    table(lines, "Send lag, µs p50 / p99 / max (sent − scheduled), open loop, constant arrivals",
          ["rate", "requests", "specreplay", "baseline", "p99 ratio", "load"], rows_of(g, "lag", lag_row))
    return "\n".join(lines)
