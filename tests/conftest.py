"""Synthetic results tables with exactly the results schema.

`make_results` builds a DataFrame the way `specreplay.load` returns one (an
Arrow table with `results_schema()` converted by pyarrow's `to_pandas`) from a
few dicts. A dict gives schema columns to override and, as a shorthand,
`chunks`: a list of `(µs after sent_us, tokens, channel name)` from which the
chunk lists, first/last timestamps and token counts are derived unless given
(every chunk kernel-stamped, with an engine delay of 20–116 µs).
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any, Callable

import pandas as pd
import pyarrow as pa
import pytest

from specreplay.analysis.finding import Finding, from_json
from specreplay.results.schema import CHANNELS, COLUMNS, results_schema

# The suite's replays share this process's engine, whose threads keep the
# policy they started with: they stay at the normal policy however a test's
# replay would default (real-time against the embedded simulator), so that
# the llama.cpp and vLLM tests' servers never wait behind them. Tests of the
# default run the CLI in a subprocess without this variable.
os.environ["SPECREPLAY_REALTIME"] = "0"

# A shell without job control starts background commands with SIGINT
# ignored (POSIX), and an ignored signal stays ignored across exec: the
# CLIs these tests interrupt would then never see their Ctrl-C. A handled
# one is reset to the default in every child, as a terminal's user has it.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

T0 = 1_750_000_000_000_000  # µs since epoch: a realistic magnitude
DEFAULT_CHUNKS = [(100_000 + 10_000 * i, 1, "content") for i in range(11)]  # 11 tokens over 100 ms


def result_row(index: int, spec: dict[str, Any]) -> dict[str, Any]:
    spec = dict(spec)
    chunks = spec.pop("chunks", DEFAULT_CHUNKS)
    sent = spec.get("sent_us", T0 + 1_000_000 * index)
    row: dict[str, Any] = {c.name: None for c in COLUMNS}
    row.update(
        run_id="run-1",
        label="test",
        point="rate=8",
        point_index=0,
        request_index=index,
        trace_id=f"t{index}",
        api="chat",
        warmup=False,
        scheduled_us=sent,
        sent_us=sent,
        http_status=200,
        finish_reason="stop",
        prompt_tokens=20,
        token_source="continuous_usage",
    )
    if chunks is not None:
        ts = [sent + offset for offset, _, _ in chunks]
        channels = [CHANNELS.index(name) for _, _, name in chunks]
        tokens = [k for _, k, _ in chunks]

        def first(names: tuple[str, ...]) -> int | None:
            return next((t for t, c in zip(ts, channels) if CHANNELS[c] in names), None)

        reasoning = sum(k for k, c in zip(tokens, channels) if CHANNELS[c] == "reasoning")
        row.update(
            chunk_ts_us=ts,
            chunk_tokens=tokens,
            chunk_channel=channels,
            chunk_delay_us=[20 + offset % 97 for offset, _, _ in chunks],
            stamp_source="kernel" if chunks else None,
            chunk_token_source="continuous_usage" if chunks else None,
            chunk_count=len(chunks),
            first_byte_us=ts[0] - 500 if ts else None,
            first_token_us=ts[0] if ts else None,
            first_reasoning_us=first(("reasoning",)),
            first_content_us=first(("content",)),
            last_token_us=ts[-1] if ts else None,
            end_us=(ts[-1] if ts else sent) + 1_000,
            reasoning_tokens=reasoning,
            content_tokens=sum(tokens) - reasoning,
            output_tokens=sum(tokens),
        )
    row.update(spec)
    return row


def results_frame(rows: list[dict[str, Any]], metadata: dict[str, str] | None = None) -> pd.DataFrame:
    table = results_table(rows, metadata)
    df: pd.DataFrame = table.to_pandas()
    df.attrs = dict(metadata or {})
    return df


def results_table(rows: list[dict[str, Any]], metadata: dict[str, str] | None = None) -> pa.Table:
    # request_index counts within each point, like the engine's schedule.
    seen: dict[str, int] = {}
    full = []
    for spec in rows:
        point = spec.get("point", "rate=8")
        index = seen.get(point, 0)
        seen[point] = index + 1
        full.append(result_row(index, spec))
    return pa.Table.from_pylist(full, schema=results_schema(metadata))


def config_metadata(points: list[dict[str, Any]], max_tokens: int | None = None) -> dict[str, str]:
    config: dict[str, Any] = {"points": points}
    if max_tokens is not None:
        config["max_tokens"] = max_tokens
    return {"specreplay.version": "0.1.0", "specreplay.config": json.dumps(config)}


#: Findings about the machine rather than the run: the client's own delay
#: (engine_delay), and the embedded simulator's steps sent together after a
#: stall of its thread (burst_streams: its steps are due on a fixed schedule
#: from the request's arrival, so the late ones go at once). A loaded shared
#: machine raises them on a correct run: a test whose subject is another
#: finding allows these and no other.
MACHINE_FINDINGS = frozenset({"engine_delay", "burst_streams"})


def stored_findings(path: Path) -> list[Finding]:
    """The validity findings a results file stores, in the order the run's verdict printed them."""
    import specreplay

    return from_json(specreplay.load(path).attrs["specreplay.validity"])


MakeResults = Callable[..., pd.DataFrame]


@pytest.fixture
def make_results() -> MakeResults:
    """`make_results([{...}, ...], metadata=None)` -> results DataFrame."""
    return results_frame


# --- simulated runs, shared by the compare and report tests -------------------

#: 200 distinct prompts of 20–400 words: every request replays its own record.
TRACE = str(Path(__file__).resolve().parent.parent / "traces" / "poisson-200.jsonl")
#: Small and fast (about 4 s for the three runs together): 96 measured requests of 40–60 tokens
#: after 8 warmup ones (a process's first requests are slow), 8 in flight,
#: 5 ms per decode step. 96, because "identical settings, different seeds →
#: no significant difference" must hold for any two seeds: with 96 the
#: sampling noise of every compared figure stays under the 5% --min-change
#: (docs/compare.md has the measurement).
SIM_BASE: dict[str, Any] = {
    "tpot_ms": 5,
    "ttft_ms": 10,
    "prefill_us_per_token": 20,
    "reasoning_tokens": [30, 40],
    "content_tokens": [10, 20],
}
#: Speculation that loses: 1 + 0.3 + 0.09 + … ≈ 1.42 tokens per step at 1.6× the step time.
SIM_SPEC: dict[str, Any] = {**SIM_BASE, "spec_draft_len": 4, "spec_acceptance": 0.3, "spec_step_cost": 0.15}
SIM_REQUESTS = 96
SIM_WARMUP = 8
SIM_CONCURRENCY = 8


def simulated_run(path: Path, sim: dict[str, Any], seed: int = 1, label: str = "run") -> Path:
    from specreplay.settings.config import ReplayConfig
    from specreplay.run.replay import run_replay

    # Requests on their own (the trace's session ids are labels): 8 always in flight.
    config = ReplayConfig(trace=TRACE, concurrency=[SIM_CONCURRENCY], seed=seed, sim=sim, num_requests=SIM_REQUESTS + SIM_WARMUP, warmup=SIM_WARMUP,
                          sessions="independent", label=label, output=str(path))
    run_replay(config)
    return path


@pytest.fixture(scope="session")
def sim_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Results files of simulated runs: `base` (seed 1), `seed2` (the same
    settings, seed 2) and `spec` (seed 1, speculation with low acceptance).

    The three run at the same time, each with its own embedded simulator:
    a busy machine (2 shared cores, a debug build) then slows all three
    alike, instead of whichever happened to run during someone's compile.
    Run one after the other, identical settings differed by 20% in ITL p90
    now and then: noise of the machine, which no interval over requests can
    see (docs/compare.md)."""
    import threading

    d = tmp_path_factory.mktemp("sim-runs")
    jobs = {
        "base": (SIM_BASE, 1, "baseline"),
        "seed2": (SIM_BASE, 2, "baseline"),
        "spec": (SIM_SPEC, 1, "ngram"),
    }
    errors: list[BaseException] = []

    def run(name: str) -> None:
        sim, seed, label = jobs[name]
        try:
            simulated_run(d / f"{name}.arrow", sim, seed=seed, label=label)
        except BaseException as e:  # re-raised below, in the test's thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=(name,)) for name in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return {name: d / f"{name}.arrow" for name in jobs}


def realtime_permitted() -> bool:
    """Whether this process may take real-time priority (root, CAP_SYS_NICE):
    tries SCHED_FIFO on the calling thread and puts it back."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    except (PermissionError, OSError, AttributeError):
        return False
    os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    return True
