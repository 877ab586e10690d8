"""Is a dependent turn sent as punctually as any other request? Replays
sessions (dependent) against the embedded simulator and reports the send lag
(`sent_us - scheduled_us`) of first turns (due by the open-loop schedule) and
of later turns (due at their predecessor's end plus a think time, released by
the same pacing thread), in the same run. Asserts nothing.

The trace is written here: SESSIONS sessions of TURNS turns whose think
time is THINK_MS, given as a capture gives it (each turn's `response.end_us`
and the next turn's arrival).

    .venv/bin/python bench/session_lag.py                  # 200 sessions x 5 turns, 20 sessions/s
    .venv/bin/python bench/session_lag.py --rate 100 --think-ms 5
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

import specreplay
from specreplay.settings.config import ReplayConfig
from specreplay.run.replay import run_replay

from bench_util import write_result

SIM = {"ttft_ms": 20, "prefill_us_per_token": 0, "tpot_ms": 5, "reasoning_tokens": [10, 20], "content_tokens": [10, 20]}


def write_trace(path: Path, sessions: int, turns: int, think_ms: float) -> None:
    # Recorded: each turn took 100 ms, then the user thought `think_ms`.
    took_us, think_s = 100_000, think_ms / 1000
    with path.open("w") as f:
        for s in range(sessions):
            t = s * 0.05
            for k in range(turns):
                body = {"messages": [{"role": "user", "content": f"question {k} of session {s}"}], "max_tokens": 64}
                f.write(json.dumps({"id": f"s{s}t{k}", "arrival": round(t, 6), "session_id": f"s{s}", "body": body,
                                    "response": {"status": 200, "end_us": took_us}}) + "\n")
                t += took_us / 1e6 + think_s
    # The file is read in arrival order: sort it.
    lines = sorted(path.read_text().splitlines(), key=lambda line: json.loads(line)["arrival"])
    path.write_text("\n".join(lines) + "\n")


def pct(values: np.ndarray) -> dict[str, float]:
    return {f"p{q}": round(float(np.percentile(values, q)), 1) for q in (50, 90, 99)} | {"n": int(values.size)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--rate", type=float, default=20.0, help="sessions started per second")
    parser.add_argument("--think-ms", type=float, default=20.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "sessions.jsonl"
        write_trace(trace, args.sessions, args.turns, args.think_ms)
        config = ReplayConfig(trace=str(trace), rate=[args.rate], arrival="constant", sim=SIM, output=str(Path(tmp) / "r.arrow"))
        df = specreplay.load(run_replay(config).path)
    ok = df[df["error_kind"].isna()]
    lag = (ok["sent_us"] - ok["scheduled_us"]).to_numpy(dtype=float)
    first = ok["turn_index"].to_numpy() == 0
    think = ok.loc[~first, "think_time_us"].to_numpy(dtype=float)
    figures = {
        "sessions": args.sessions, "turns": args.turns, "rate": args.rate, "think_ms": args.think_ms,
        "failed": int(df["error_kind"].notna().sum()),
        "think_time_us": pct(think),
        "lag_us_first_turns": pct(lag[first]),
        "lag_us_later_turns": pct(lag[~first]),
    }
    print(json.dumps(figures))
    print(f"wrote {write_result('session-lag', figures)}")


if __name__ == "__main__":
    main()
