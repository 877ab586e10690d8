"""Prediction against a real server, in one sitting: llama.cpp (xllamacpp)
serving SmolLM2-135M-Instruct with 4 slots on 1 thread; calibrated from
runs at concurrency 1 and 6 (above the 4 slots, so that requests wait and
the batch limit is measured), then predicted and measured at concurrency 2
and at an open-loop rate (both held out), each on a fresh trace. Writes
the error table to docs/predict-accuracy.md with the command, the commit
and the load average. Each held-out part is also measured a second time
(on its trace reworded): that run's error against the first is the
server's own, the yardstick for the prediction's.

    .venv/bin/python bench/predict_llamacpp.py [--requests 24] [--rounds 3] [--slo-requests 12] [--input-len uniform:100:300] [--output-len 32] [--draws 9] [--no-repeat] [--keep DIR]
    .venv/bin/python bench/predict_llamacpp.py --from DIR     # re-predict a kept sitting's runs with this commit's model

The calibration runs' answers vary in length around the held-out runs'
(`calibrate_output_len`), so that the step is measured at every batch size.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from realservers.llamacpp import LlamaCppServer  # noqa: E402
from realservers.predict_loop import LoopResult, loop, measure, predict, recheck, trace  # noqa: E402
from realservers.smollm2 import smollm2_gguf  # noqa: E402
import specreplay  # noqa: E402
from specreplay.analysis.summary import summarize  # noqa: E402
from specreplay.run.calibrate.check import Error, markdown  # noqa: E402

TARGETS = {"p50": 0.15, "p90": 0.15, "p99": 0.25}


def within(figure: str, error: float) -> str:
    if figure == "output_tok_s" or figure.startswith("e2e"):
        return ""
    limit = next((v for k, v in TARGETS.items() if f"_{k}_" in figure), None)
    if limit is None:  # a mean: no target
        return ""
    return "yes" if abs(error) <= limit else "no"


#: The calibration loads: alone (the prefill), and a closed loop above the server's 4 slots, so that its
#: metrics show requests deferred and the batch limit is measured (at concurrency 4 it stays unknown, and
#: the prediction at the held-out rate ran 6 to 7 requests at once on a 4-slot server).
CALIBRATE_AT = ({"concurrency": [1]}, {"concurrency": [6]})
#: The SLO of the highest-rate check: p90 TTFT under this many times the
#: calibration's median TTFT alone (concurrency 1), fixed before any search.
SLO_FACTOR = 2.0
#: The rate ladder, as shares of the highest throughput calibration saw.
LADDER = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
#: Predicted runs per rung (each of the measured rung's length).
PREDICT_REPEATS = 9


def calibrate_output_len(output_len: int) -> str:
    """The calibration runs' answers: lengths spread around the held-out
    runs' (same mean), so that a closed loop's requests end apart and every
    batch size up to 4 decodes (the step table; fixed lengths keep a
    llama.cpp batch in lockstep, showing sizes 1 and 4 only)."""
    return f"uniform:{max(output_len // 2, 2)}:{output_len * 3 // 2}"


def p90_ttft(path: Path) -> float:
    return float(summarize(specreplay.load(path))["ttft_p90_ms"].iloc[0])


def predict_ladder(model: Path, work: Path, rates: list[float], n: int, input_len: str, output_len: int,
                   common: bool = True) -> dict[float, float]:
    """The predicted p90 TTFT per rung: the median over PREDICT_REPEATS runs
    of the measured length (other prompts and arrivals), so that the model's
    answer is not one draw; a queue's growth depends on the run's length, so
    the length stays the measured one.

    `common`: every rung predicts the same draws (common random numbers:
    repeat r has one trace, one arrival seed and one speed seed at every
    rate, its arrivals the same Poisson draws scaled by the rate). Drawing
    them anew per rung (`common=False`, the bench before) made the p90 of 12
    requests move more with the draw (about the longest prompt) than with a
    step of the rate: the predicted p90 was not monotonic in the rate, with
    the speed spread at 0 too (bench/predict_ladder.py compares the two)."""
    predicted: dict[float, float] = {}
    shared = [trace(work, f"ladder-predict-rep{rep}", n, input_len, output_len, 7900 + rep) for rep in range(PREDICT_REPEATS)]
    for k, rate in enumerate(rates):
        p90s = []
        for rep in range(PREDICT_REPEATS):
            if common:
                t, seed = shared[rep], 100 + rep
            else:
                t, seed = trace(work, f"ladder-{k}-rep{rep}", n, input_len, output_len, 900 + k + 100 * rep), k + 100 * rep
            p90s.append(p90_ttft(predict(model, t, work / f"ladder-{k}-rep{rep}-predicted.arrow", rate=[rate], seed=seed)))
        predicted[rate] = float(sorted(p90s)[len(p90s) // 2])
    return predicted


def max_rate_check(url: str, work: Path, model: Path, best: float, slo_ms: float, n: int, input_len: str, output_len: int) -> list[str]:
    """The highest rate of the ladder whose p90 TTFT meets the SLO, found on
    the model, then the measured highest found for real from it: one rung
    down or up to two up are measured, which is enough to tell whether the
    two are within one search step (a rung), the issue's target.

    Every rung is predicted on the draw it is measured on (its own trace
    and arrival seed), as a user runs the same search on the model and then
    on the server. The p90 of 12 requests moves more with the draw (about
    its longest prompts) than with a step of the rate, so a model judged on
    other draws than the measured one is judged on the draw: at 13b3e04 the
    ladder's median over other draws put the top at 0.361 req/s, which
    measured 3,874 ms against a 2,843 ms SLO, while its own draw predicted
    4,680 ms (a miss, as measured). Each rung has a trace of its own: one
    trace at every rung (c8e726b) made llama.cpp's prompt cache answer the
    second measured rung (p90 TTFT 46 ms). The median over PREDICT_REPEATS
    other draws is printed beside it."""
    rates = [round(best * s, 3) for s in LADDER]
    drawn = {r: (trace(work, f"ladder-{k}", n, input_len, output_len, 900 + k), k) for k, r in enumerate(rates)}
    predicted = {r: p90_ttft(predict(model, t, work / f"ladder-{k}-predicted.arrow", rate=[r], seed=seed))
                 for k, (r, (t, seed)) in enumerate(drawn.items())}
    others = predict_ladder(model, work, rates, n, input_len, output_len)
    passing = [r for r in rates if predicted[r] < slo_ms]
    lines = [f"SLO p90 TTFT < {slo_ms:,.0f} ms; ladder {', '.join(f'{r:g}' for r in rates)} req/s (step {rates[1] - rates[0]:.3f}); "
             f"each rung predicted on the draw it is measured on ({n} requests, its own trace and arrival seed)",
             "predicted p90 TTFT per rung: " + ", ".join(f"{r:g}: {predicted[r]:,.0f}" for r in rates),
             f"  (median over {PREDICT_REPEATS} other draws: " + ", ".join(f"{r:g}: {others[r]:,.0f}" for r in rates) + ")"]
    top = max(passing) if passing else None
    lines.append(f"predicted highest rate under the SLO: {top if top is not None else 'none (the lowest rung fails)'}")
    measured: dict[float, bool] = {}

    def meets(rate: float) -> bool:
        if rate not in measured:
            k = rates.index(rate)
            t, seed = drawn[rate]
            p90 = p90_ttft(measure(url, t, work / f"ladder-{k}.arrow", rate=[rate], seed=seed))
            measured[rate] = p90 < slo_ms
            lines.append(f"measured at {rate:g} req/s: p90 TTFT {p90:,.0f} ms (predicted {predicted[rate]:,.0f}; over other draws "
                         f"{others[rate]:,.0f}): {'meets' if measured[rate] else 'misses'} the SLO")
        return measured[rate]

    # The measured highest rung, found from the predicted one by walking the
    # ladder no further than "within one step" needs: one rung down, or two up
    # (index -1: no rung meets it). Two away means two or more.
    at = rates.index(top) if top is not None else -1
    if at >= 0 and not meets(rates[at]):
        found = at - 1 if at == 0 or meets(rates[at - 1]) else at - 2
    else:
        found = at + 2
        for k in (at + 1, at + 2):
            if k == len(rates) or not meets(rates[k]):
                found = k - 1
                break
    steps = abs(found - at)
    name = "none (the lowest rung misses)" if found < 0 else f"{rates[found]:g}"
    lines.append(f"measured highest rate under the SLO: {name}, {'two or more' if steps >= 2 else steps} step(s) from the predicted")
    lines.append("within one search step: " + ("yes" if steps <= 1 else "no"))
    return lines


def spread(result: LoopResult, point: str, figure: str) -> str:
    """The measured figure's 90% bootstrap interval over its requests, as
    deviations from it (`check.intervals`): an error inside it is within
    what the measurement itself could have been; "few" when the requests
    are under what a percentile needs (`resampling.samples_needed`: 50 for
    a p90, 500 for a p99)."""
    found = result.measured_intervals.get((point, figure))
    e = next(x for x in result.errors if (x.point, x.figure) == (point, figure))
    if found is None:
        return ""
    low, high = found.relative(e.measured)
    few = f" (few: {found.requests} < {found.needed})" if found.requests < found.needed else ""
    return f"{low:+.0%} … {high:+.0%}{few}"


def table(result: LoopResult) -> list[str]:
    """The error table: the prediction (one draw of the model), and each
    figure's median over the draws beside it when there are several; beside
    the measured figure its own 90% interval over its requests; and, with
    the repeat, the same point measured again against the first (the
    server's own run-to-run error)."""
    drawn = {(e.point, e.figure): e for e in result.over_draws}
    again = {(e.point, e.figure): e for e in result.repeat}
    rows = ["| point | figure | predicted | measured | measured's 90% interval | error | within target |"
            + (f" over {result.draws} draws | error | within target |" if drawn else "")
            + (" measured again | error | within target |" if again else ""),
            "|---|---|---|---|---|---|---|" + ("---|---|---|" if drawn else "") + ("---|---|---|" if again else "")]
    for e in result.errors:
        row = (f"| {e.point} | {e.figure} | {e.predicted:,.1f} | {e.measured:,.1f} | {spread(result, e.point, e.figure)} | {e.relative:+.1%} "
               f"| {within(e.figure, e.relative)} |")
        for other in (drawn, again):
            d = other.get((e.point, e.figure))
            if other:
                row += f" {d.predicted:,.1f} | {d.relative:+.1%} | {within(d.figure, d.relative)} |" if d else " | | |"
        rows.append(row)
    return rows


def tally(result: LoopResult) -> list[str]:
    """Cells within the targets, out of the cells that have one: the
    prediction's one draw, its median over draws, and the server measured
    again (what a perfect model's one draw could expect at best). Then the
    same counts over the cells where the server's repeat is within: a cell
    the server misses against itself (a p50 of 24 requests where TPOT jumps
    from 30 to 90 ms) cannot judge a prediction either way."""
    def count(found: list[Error]) -> str:
        marks = [within(e.figure, e.relative) for e in found]
        return f"{marks.count('yes')} of {marks.count('yes') + marks.count('no')}"
    lines = [f"the prediction (one draw): {count(result.errors)}"]
    if result.over_draws:
        lines.append(f"the prediction (median over {result.draws} draws): {count(result.over_draws)}")
    if not result.repeat:
        return lines
    lines.append(f"the server measured again, against its first measurement: {count(result.repeat)}")
    judged = {(e.point, e.figure) for e in result.repeat if within(e.figure, e.relative) == "yes"}
    missed = [f"{e.point} {e.figure} ({e.relative:+.1%})" for e in result.repeat if within(e.figure, e.relative) == "no"]
    if missed:
        lines.append("where the server's repeat misses (cells that cannot judge a prediction): " + ", ".join(missed))
    kept = " and ".join(count([e for e in found if (e.point, e.figure) in judged])
                        for found in (result.errors, result.over_draws) if found)
    lines.append(f"in the {len(judged)} cells where it is within, the prediction (one draw" + (", over draws" if result.over_draws else "")
                 + f"): {kept}")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=24)
    ap.add_argument("--slo-requests", type=int, default=12,
                    help="requests per rung of the SLO check: the p90 of 12 moves more with the draw than with a rung (docs/predict.md)")
    ap.add_argument("--input-len", default="uniform:100:300")
    ap.add_argument("--output-len", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3, help="interleave every point's runs in this many parts (docs/predict.md)")
    ap.add_argument("--draws", type=int, default=PREDICT_REPEATS,
                    help="also predict every held-out part with this many draws of the model's own random numbers (the arrivals kept) "
                         "and give each figure's median over them: one draw decides the c=2 TPOT tail (docs/predict.md)")
    ap.add_argument("--no-repeat", action="store_true",
                    help="measure each held-out part once (default: twice, the second on a reworded trace, for the server's own error)")
    ap.add_argument("--no-max-rate", action="store_true", help="skip the highest-rate-under-an-SLO check (two more real runs)")
    ap.add_argument("--out", default=str(HERE.parent / "docs" / "predict-accuracy.md"))
    ap.add_argument("--keep", help="keep the runs, traces and server.toml in this directory (default: a temporary one)")
    ap.add_argument("--from", dest="kept", help="no server: calibrate and predict again from the runs a --keep DIR sitting kept, "
                    "and print the error table (this commit's model on that sitting's measurements)")
    args = ap.parse_args()
    if args.kept:
        again = recheck(Path(args.kept), draws=args.draws)
        print(markdown(again.errors))
        print("\n".join(table(again)))
        print("\n".join(tally(again)))
        print("\n".join(again.described))
        return
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE).stdout.strip()
    load_before = os.getloadavg()
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp, LlamaCppServer(smollm2_gguf(), parallel=4, threads=1, ctx=4096) as server:
        work = Path(args.keep or tmp)
        work.mkdir(parents=True, exist_ok=True)
        result = loop(server.api_url, work, n=args.requests, input_len=args.input_len, output_len=args.output_len, rounds=args.rounds,
                      calibrate_at=CALIBRATE_AT, calibrate_output_len=calibrate_output_len(args.output_len), draws=args.draws,
                      repeat=not args.no_repeat)
        search: list[str] = []
        if not args.no_max_rate:
            c1 = [specreplay.load(p) for name, p in result.runs.items() if name.startswith("calibrate-concurrency1")]
            alone = float(sum(float(summarize(df)["ttft_p50_ms"].iloc[0]) for df in c1) / len(c1))
            best = max(float(summarize(specreplay.load(p))["achieved_rate_rps"].max()) for name, p in result.runs.items() if name.startswith("calibrate-"))
            search = max_rate_check(server.api_url, work, result.model_path, best, SLO_FACTOR * alone, args.slo_requests,
                                    args.input_len, args.output_len)
            print("\n".join(search), flush=True)
    took = time.monotonic() - started
    print(markdown(result.errors), flush=True)
    load_after = os.getloadavg()
    rows = table(result)
    repeat_text = "" if args.no_repeat else """ "measured again": every held-out part measured a second time, right
after the first (right before in odd rounds), on its trace reworded (the same word counts, arrivals and output
lengths; other words, so that the prompt cache does not hit), against the first: the server's own run-to-run
error, the yardstick for the prediction's. A cell the server misses against itself cannot judge a prediction."""
    command = " ".join(["python", "bench/predict_llamacpp.py", *sys.argv[1:]])
    text = f"""# Prediction accuracy against llama.cpp

Written by `bench/predict_llamacpp.py` (do not edit by hand): llama.cpp
(xllamacpp) serving SmolLM2-135M-Instruct Q4_1 with 4 parallel slots on 1
thread; {args.requests} synthetic requests per point (prompts `{args.input_len}`
words, {args.output_len} output tokens, fixed length; the calibration runs'
answers `{calibrate_output_len(args.output_len)}` tokens, so that requests end apart and every
batch size decodes), run in {args.rounds} part(s) of
{args.requests // args.rounds} interleaved round-robin over the points (so that the shared
machine's slow spells fall on calibration and held-out runs alike), a fresh
trace per part so the prompt cache does not hit. Calibrated from concurrency
1 and 6 (above the 4 slots: the batch limit shows); the held-out points are concurrency 2 and an open-loop Poisson rate
at 60% of the highest throughput the first round's calibration saw, each
part predicted on its own trace and arrival seed, the parts joined end to
end; "over {args.draws} draws": each figure's median over {args.draws} predictions of every part with other draws of the
model's own random numbers (`--predict-draw`: which of two requests sent together reaches the server
first, the speed spread), the arrivals kept. Targets (issue 26): |error| ≤ 15% at p50 and p90 of TTFT and
TPOT, ≤ 25% at p99 (E2E and tokens/s have none). "measured's 90% interval": the measured figure's bootstrap
interval over its requests (resampled as `compare` does, expanded for few), as deviations from it: where it is
wider than the target, the measurement alone cannot tell a prediction within the target from one outside;
"few" where the requests are under what the percentile needs (`samples_needed`: 10 for a p50, 50 for a p90, 500
for a p99). The rate's parts share one arrival schedule (the same seed), so its {args.requests} requests are {args.rounds} prompts
at each of {args.requests // args.rounds} arrival instants.{repeat_text}

- command: `{command}`
- commit: `{commit}`, took {took:.0f} s
- load average (1, 5, 15 min) before: {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, after: {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f} (2 cores, shared); the bench ran at niceness {os.nice(0)}

{chr(10).join(rows)}

Cells within the targets:
{chr(10).join('- ' + line for line in tally(result))}

The highest rate under an SLO (the issue's "within one search step"):
{chr(10).join('- ' + line for line in search) if search else '- not run (--no-max-rate)'}

The calibration:

{chr(10).join('- ' + line for line in result.described)}
"""
    Path(args.out).write_text(text)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
