"""A/A calibration of `specreplay compare`: how often does it call two runs
of one configuration (only the seed differs) faster or slower, and does it
still find a real difference?

    nice -n 5 .venv/bin/python bench/aa_calibration.py --seeds 6 --requests 48
    .venv/bin/python bench/aa_calibration.py --tails        # the TAIL_SAMPLES rule (pure numpy)
    .venv/bin/python bench/aa_calibration.py --spreads --seeds 6   # the spread s between repeats (~3 min)

Per workload, K runs against the embedded simulator (`specreplay replay`,
`--seed 1..K`), every pair compared; a judged figure (`faster`, `slower` or
`no significant difference`) called faster or slower is a false verdict;
*coverage* is the share of judged figures whose interval holds 0 (the true
change of an A/A pair). Power: `examples/spec-decode-ab.toml` replayed
under several seeds, `ngram` against `baseline`, must say `slower` on TPOT
p50 and output tok/s every time. The table is docs/compare.md's.

`--spreads`: only the runs, no compares: per rate-8 workload and figure,
the spread `s` of the per-repeat log ratio that "How many repeats a
difference needs" (docs/compare.md) uses, √2 × the standard deviation of
the figure's log across the seeds.
"""

from __future__ import annotations

import argparse
import itertools
import math
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np

from bench_util import write_result

ROOT = Path(__file__).resolve().parent.parent
CLI = [str(ROOT / ".venv" / "bin" / "specreplay")]
JUDGED = {"faster", "slower", "no significant difference"}
CALLED = {"faster", "slower"}


def workloads(requests: int, tmp: Path) -> dict[str, list[list[str]]]:
    """Workload name -> the replay arguments of each of its runs ({seed} filled in later)."""
    fixed = tmp / "fixed.jsonl"
    if not fixed.exists():
        subprocess.run([*CLI, "synth", "--num-requests", "48", "--input-len", "128", "--output-len", "64", "-o", str(fixed)], check=True, capture_output=True)
    n = ["--num-requests", str(requests)]
    return {
        "reasoning, rate 8": [["replay", "traces/reasoning-prompts.jsonl", "--rate", "8", *n]],
        "fixed 64, rate 8": [["replay", str(fixed), "--rate", "8", "--max-tokens", "64", "--ignore-eos", *n]],
        "sessions, rate 8": [["replay", "traces/poisson-200.jsonl", "--rate", "8", *n]],
        "reasoning, concurrency 2 and 8": [["replay", "traces/reasoning-prompts.jsonl", "--concurrency", "2", "--concurrency", "8", *n]],
    }


def run(args: list[str], seed: int, out: Path) -> None:
    if out.exists():  # --runs-dir kept it from an earlier call
        return
    subprocess.run([*CLI, *args, "--seed", str(seed), "-o", str(out)], check=True, capture_output=True, cwd=ROOT)


def aa(seeds: int, requests: int, runs_dir: Path) -> tuple[dict[str, Counter[str]], list[str]]:
    import specreplay

    per_figure: dict[str, Counter[str]] = {}
    lines = []
    tmp = runs_dir
    for name, commands in workloads(requests, tmp).items():
        files = []
        for seed in range(1, seeds + 1):
            out = tmp / f"{len(lines)}-{seed}.arrow"
            run(commands[0], seed, out)
            files.append(out)
        counts: Counter[str] = Counter()
        for a, b in itertools.combinations(files, 2):
            table = specreplay.compare(str(a), str(b), force=True)
            for _, row in table.iterrows():
                v = str(row["verdict"])
                if v not in JUDGED:
                    continue
                key = f"{row['name']}"
                c = per_figure.setdefault(key, Counter())
                c["judged"] += 1
                c["false"] += v in CALLED
                c["covered"] += bool(row["ci_low"] <= 0 <= row["ci_high"])
                counts["judged"] += 1
                counts["false"] += v in CALLED
                counts["covered"] += bool(row["ci_low"] <= 0 <= row["ci_high"])
        lines.append(
            f"| {name} | {math.comb(seeds, 2)} | {counts['judged']} | {counts['false']} | {counts['covered'] / max(counts['judged'], 1):.1%} |"
        )
        print(lines[-1], flush=True)
    return per_figure, lines


SPREAD_FIGURES = {"TTFT p50": "ttft_p50_ms", "TPOT p50": "tpot_p50_ms", "E2E p50": "e2e_p50_ms", "output tok/s": "output_tok_s"}


def spreads(seeds: int, requests: int, runs_dir: Path) -> dict[str, dict[str, float]]:
    """Per rate-8 workload, each figure's `s` (percent) across `seeds` runs."""
    import specreplay

    out: dict[str, dict[str, float]] = {}
    for i, (name, commands) in enumerate(workloads(requests, runs_dir).items()):
        if "rate 8" not in name:
            continue
        values: dict[str, list[float]] = {f: [] for f in SPREAD_FIGURES}
        for seed in range(1, seeds + 1):
            path = runs_dir / f"{i}-{seed}.arrow"
            run(commands[0], seed, path)
            row = specreplay.summarize(specreplay.load(path)).iloc[0]
            for figure, column in SPREAD_FIGURES.items():
                values[figure].append(float(row[column]))
        out[name] = {f: round(100 * math.sqrt(2) * float(np.std(np.log(v), ddof=1)), 2) for f, v in values.items()}
        print(f"| {name} | " + " | ".join(f"{out[name][f]:.2f}%" for f in SPREAD_FIGURES) + " |", flush=True)
    return out


def power(seeds: int, requests: int, runs_dir: Path) -> list[str]:
    import specreplay

    lines = []
    for seed in range(1, seeds + 1):
        out = runs_dir / f"ab-{seed}.arrow"
        run(["replay", "--config", "examples/spec-decode-ab.toml", "--num-requests", str(requests)], seed, out)
        table = specreplay.compare(f"{out}:baseline", f"{out}:ngram", force=True)
        for point, rows in table.groupby("point", sort=False):
            got = {m: str(rows.loc[rows.metric == m, "verdict"].iloc[0]) for m in ("tpot_p50_ms", "output_tok_s")}
            change = {m: float(rows.loc[rows.metric == m, "change"].iloc[0]) for m in got}
            lines.append(
                f"| {seed} | {point} | {got['tpot_p50_ms']} ({change['tpot_p50_ms']:+.1%}) | {got['output_tok_s']} ({change['output_tok_s']:+.1%}) |"
            )
            print(lines[-1], flush=True)
    return lines


def tails(trials: int = 1000, resamples: int = 1000) -> None:
    """False-verdict rate of one percentile's 95% bootstrap interval between
    two samples of one skewed distribution, by the number of samples beyond
    the percentile on its thinner side: the rule `TAIL_SAMPLES` is the
    smallest count at which it stays at or under the nominal 5%."""
    rng = np.random.default_rng(1)
    print("| percentile | samples beyond it | n | false rate |")
    print("|---|---|---|---|")
    counts = (1, 2, 3, 5, 8)
    smallest = []
    for q in (0.5, 0.9):
        upper = []
        for k in counts:
            n = math.ceil(k / min(q, 1 - q))
            false = 0
            for _ in range(trials):
                a, b = rng.lognormal(0, 0.6, n), rng.lognormal(0, 0.6, n)
                ia, ib = rng.integers(0, n, (resamples, n)), rng.integers(0, n, (resamples, n))
                r = np.quantile(b[ib], q, axis=1) / np.quantile(a[ia], q, axis=1)
                low, high = np.quantile(r, [0.025, 0.975])
                false += not (low <= 1 <= high)
            rate = false / trials
            upper.append(rate)
            print(f"| p{q * 100:g} | {k} | {n} | {rate:.1%} |", flush=True)
        # The smallest count from which every larger one stays at or under the nominal 5%.
        smallest.append(next(k for i, k in enumerate(counts) if all(u <= 0.05 for u in upper[i:])))
    print(f"\nsmallest count beyond the percentile with a false rate <= 5% at every percentile: {max(smallest)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=6)
    parser.add_argument("--requests", type=int, default=48)
    parser.add_argument("--power-seeds", type=int, default=3)
    parser.add_argument("--power-requests", type=int, default=24)
    parser.add_argument("--tails", action="store_true", help="Only the calibration of the sample-count rule.")
    parser.add_argument("--skip-power", action="store_true")
    parser.add_argument("--power-only", action="store_true", help="Only the power runs (the A/B of examples/spec-decode-ab.toml).")
    parser.add_argument("--spreads", action="store_true", help="Only the spread s between repeats of each rate-8 workload (no compares).")
    parser.add_argument("--runs-dir", type=Path, help="Keep the runs here (and reuse those already there). Default: a temporary directory.")
    opts = parser.parse_args()
    if opts.tails:
        tails()
        return
    with tempfile.TemporaryDirectory() as tmp_dir:
        runs_dir = opts.runs_dir or Path(tmp_dir)
        runs_dir.mkdir(parents=True, exist_ok=True)
        report(opts, runs_dir)


def report(opts: argparse.Namespace, runs_dir: Path) -> None:
    settings = {k: v for k, v in vars(opts).items() if k != "runs_dir"}
    if opts.spreads:
        print("| workload | " + " | ".join(SPREAD_FIGURES) + " |")
        print("|---|" + "---|" * len(SPREAD_FIGURES))
        figures = spreads(opts.seeds, opts.requests, runs_dir)
        print(f"wrote {write_result('aa-spreads', {'settings': settings, 'spread_pct': figures})}")
        return
    if opts.power_only:
        print("| seed | point | TPOT p50 | output tok/s |")
        print("|---|---|---|---|")
        power_lines = power(opts.power_seeds, opts.power_requests, runs_dir)
        print(f"wrote {write_result('aa-calibration', {'settings': settings, 'power': power_lines})}")
        return
    print("| workload | pairs | judged figures | false verdicts | coverage |")
    print("|---|---|---|---|---|")
    per_figure, workload_lines = aa(opts.seeds, opts.requests, runs_dir)
    total = Counter[str]()
    print("\n| figure | judged | false | false rate | coverage |")
    print("|---|---|---|---|---|")
    for name, c in per_figure.items():
        total.update(c)
        print(f"| {name} | {c['judged']} | {c['false']} | {c['false'] / c['judged']:.1%} | {c['covered'] / c['judged']:.1%} |")
    print(f"| **all** | {total['judged']} | {total['false']} | {total['false'] / max(total['judged'], 1):.2%} | {total['covered'] / max(total['judged'], 1):.1%} |")
    power_lines: list[str] = []
    if not opts.skip_power:
        print("\n| seed | point | TPOT p50 | output tok/s |")
        print("|---|---|---|---|")
        power_lines = power(opts.power_seeds, opts.power_requests, runs_dir)
    figures = {"settings": settings, "workloads": workload_lines, "per_figure": {name: dict(c) for name, c in per_figure.items()}, "power": power_lines}
    print(f"wrote {write_result('aa-calibration', figures)}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
