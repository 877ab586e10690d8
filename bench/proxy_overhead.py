"""What `specreplay capture` adds to latency: 64 concurrent streams through
the proxy and, at the same time, 64 direct to the simulator as the control,
on 127.0.0.1 only.

    .venv/bin/python bench/proxy_overhead.py [--streams 64] [--seconds 15] [--tpot-ms 20]

The simulator (in this process, on Rust threads) stamps every chunk with the
time it wrote it (`sim_sent_us`, the engine's anchored clock); the client (an
asyncio/aiohttp loop in this process) stamps each read with the same clock.
Per-chunk delivery delay = read time − write time; TTFB = response head −
request start. The proxy runs as a separate process, `specreplay capture`,
as it would in use. Both groups run at once, in the same client, against the
same simulator, with staggered starts (not in lockstep), so the client's own
delay and whatever else the machine is doing hit both alike: the proxy's
cost is the difference between the groups. Prints a Markdown table for docs/benchmarks.md;
asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import platform
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

from specreplay._core import SimServer, now_us

from bench_util import write_result

SENT = re.compile(rb'"sim_sent_us":\s*(\d+)')


async def worker(session: aiohttp.ClientSession, url: str, deadline: float, delays: list[int], ttfbs: list[int], body: bytes, stagger: float) -> None:
    await asyncio.sleep(stagger)
    while time.monotonic() < deadline:
        start = now_us()
        async with session.post(url, data=body, headers={"Content-Type": "application/json", "Authorization": "Bearer sk-bench"}) as r:
            ttfbs.append(now_us() - start)
            tail = b""
            async for data in r.content.iter_any():
                t = now_us()
                buf = tail + data
                cut = buf.rfind(b"\n\n")
                if cut < 0:
                    tail = buf
                    continue
                tail = buf[cut + 2:]
                for m in SENT.finditer(buf, 0, cut):
                    delays.append(t - int(m.group(1)))


async def run_both(bases: dict[str, str], streams: int, seconds: float, body: bytes, request_s: float) -> dict[str, tuple[list[int], list[int]]]:
    out: dict[str, tuple[list[int], list[int]]] = {mode: ([], []) for mode in bases}
    rng = random.Random(1)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        deadline = time.monotonic() + seconds
        await asyncio.gather(*(
            worker(session, base + "/v1/chat/completions", deadline, *out[mode], body, rng.uniform(0, request_s))
            for mode, base in bases.items() for _ in range(streams)
        ))
    return out


def pct(xs: list[int], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] / 1000.0 if s else float("nan")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--tpot-ms", type=float, default=20.0)
    ap.add_argument("--keep-trace", help="keep the proxy's trace here (its response.ttfb_us is the proxy's own view)")
    args = ap.parse_args()

    sim_config = {"ttft_ms": 50, "prefill_us_per_token": 0, "tpot_ms": args.tpot_ms, "reasoning_tokens": [40, 40],
                  "content_tokens": [40, 40], "send_timestamps": True, "seed": 1}
    body = b'{"model": "m", "stream": true, "stream_options": {"include_usage": true}, "messages": [{"role": "user", "content": "Tell me about the sea."}]}'
    with SimServer(config=sim_config) as sim, tempfile.TemporaryDirectory() as tmp:
        proxy = subprocess.Popen(
            [sys.executable, "-m", "specreplay", "capture", "--upstream", sim.url, "--listen", "127.0.0.1:0", "-o", args.keep_trace or f"{tmp}/trace.jsonl"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        assert proxy.stderr is not None
        m = re.search(r"forwarding (http://\S+)/v1", proxy.stderr.readline())
        if not m:
            sys.exit("the proxy did not start: " + proxy.stderr.read())
        bases = {"direct": sim.url.rsplit("/v1", 1)[0], "proxy": m.group(1)}
        cpu0 = cpu_seconds(proxy.pid)
        t = time.monotonic()
        request_s = (sim_config["ttft_ms"] + 80 * args.tpot_ms) / 1000  # type: ignore[operator]
        results = asyncio.run(run_both(bases, args.streams, args.seconds, body, request_s))
        proxied_s = time.monotonic() - t
        cpu = cpu_seconds(proxy.pid) - cpu0
        proxy.send_signal(2)
        out, _ = proxy.communicate(timeout=60)

    date = dt.date.today().isoformat()
    print(f"proxy overhead, {date}, {platform.machine()} {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; "
          f"{args.streams} streams through the proxy + {args.streams} direct at once, tpot {args.tpot_ms:g} ms, {args.seconds:g} s; proxy: {out.strip()}")
    print(f"proxy CPU: {cpu:.1f} s over {proxied_s:.1f} s proxied ({100 * cpu / max(proxied_s, 1e-9):.0f}% of one core)\n")
    print("| | chunks | delivery p50 | p90 | p99 | max | TTFB p50 | p99 |")
    print("|---|---|---|---|---|---|---|---|")
    for mode, (d, f) in results.items():
        print(f"| {mode} | {len(d):,} | {pct(d, .5):.3f} ms | {pct(d, .9):.3f} ms | {pct(d, .99):.3f} ms | {pct(d, 1):.3f} ms | {pct(f, .5):.3f} ms | {pct(f, .99):.3f} ms |")
    (dd, df), (pd_, pf) = results["direct"], results["proxy"]
    print(f"| **proxy − direct** | | {pct(pd_, .5) - pct(dd, .5):+.3f} ms | {pct(pd_, .9) - pct(dd, .9):+.3f} ms | "
          f"{pct(pd_, .99) - pct(dd, .99):+.3f} ms | | {pct(pf, .5) - pct(df, .5):+.3f} ms | {pct(pf, .99) - pct(df, .99):+.3f} ms |")
    figures = {"streams": args.streams, "tpot_ms": args.tpot_ms, "seconds": args.seconds, "proxy_cpu_s": cpu, "proxied_s": proxied_s,
               "proxy_output": out.strip(),
               **{mode: {"chunks": len(d), **{f"delivery_{q}_ms": pct(d, q) for q in (.5, .9, .99, 1)},
                         **{f"ttfb_{q}_ms": pct(f, q) for q in (.5, .99)}} for mode, (d, f) in results.items()}}
    print(f"wrote {write_result('proxy-overhead', figures)}")


if __name__ == "__main__":
    main()
