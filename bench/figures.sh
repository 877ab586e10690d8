#!/usr/bin/env bash
# Re-measures every figure the README and docs/ publish that this script
# owns (bench/README.md, "Published figures", lists each one and where it is
# written), at the tree's head, one after another: `make bench-figures`.
# About 55 minutes on a quiet 2-core box after the release build; the vLLM
# job adds 8 more the first time (its install). Figures only: nothing here
# asserts. Each step's output goes to bench/results/figures-<time>/<step>.txt
# (and the benches' own JSON files to bench/results/), each step's duration
# to durations.txt there; the docs are then updated from those files by hand
# (the vLLM table and the bench JSONs record commit, dirty flag, load and
# command themselves).
#
#   bash bench/figures.sh                 # everything
#   bash bench/figures.sh startup client  # only these steps (names below)
#
# Not here, on purpose: the prediction-accuracy table against llama.cpp
# (docs/predict-accuracy.md, bench/predict_llamacpp.py) and the prediction's
# speed (bench/predict_speed.rs) and the send-lag profile
# (send_lag_profile.py): their issues' own benches (bench/README.md says
# which). The A/A calibration (aa_calibration.py, ~40 min) and the
# request-building benches on the Mooncake trace (trace_prepare,
# prompt_synthesis) are listed there with their commands too. The
# `mooncake` and `vllm-bench-cost` steps need MOONCAKE_TRACE and VLLM_BENCH
# (below); `make bench-figures` runs them only when those are set.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PY=${PY:-$ROOT/.venv/bin/python}
SR=${SR:-$ROOT/.venv/bin/specreplay}
OUT=bench/results/figures-$(date -u +%Y%m%d-%H%M%S)
mkdir -p "$OUT"
# Real-time priority where the figure's section says it was measured so
# (root only; otherwise the step runs at normal priority and says so).
if [ "$(id -u)" = 0 ] && command -v chrt >/dev/null; then FIFO="chrt -f 1"; else FIFO=""; echo "not root: chrt steps run at normal priority" | tee "$OUT/durations.txt"; fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

ALL=(build startup startup-pairs client sim-capacity sim-media proxy finder session-lag scrape scrape-tick live ray media analysis mooncake vllm-bench-cost readme-examples spec-ab-capacity vllm)
STEPS=("${@:-${ALL[@]}}")
if [ $# = 0 ]; then  # everything: but the two steps that need an outside file only when given it
    [ -n "${MOONCAKE_TRACE:-}" ] || { STEPS=("${STEPS[@]/mooncake}"); echo "skipping mooncake: MOONCAKE_TRACE is not set" | tee -a "$OUT/durations.txt"; }
    [ -n "${VLLM_BENCH:-}" ] || { STEPS=("${STEPS[@]/vllm-bench-cost}"); echo "skipping vllm-bench-cost: VLLM_BENCH is not set" | tee -a "$OUT/durations.txt"; }
fi
want() { local s; for s in "${STEPS[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1; }
step() {
    local name=$1; shift
    want "$name" || return 0
    echo "== $name: $*" | tee -a "$OUT/durations.txt"
    local t0=$SECONDS
    ( "$@" ) > "$OUT/$name.txt" 2>&1 || echo "   $name FAILED (see $OUT/$name.txt)" | tee -a "$OUT/durations.txt"
    echo "   $name took $((SECONDS - t0)) s, load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/durations.txt"
}

echo "commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' (dirty)'), $(date -u), load $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) x$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2)" | tee -a "$OUT/durations.txt"
step build make --no-print-directory bench-build
step startup sh -c "cd bench && $FIFO $PY startup.py --runs 9"                                    # README, docs/benchmarks.md "Start-up"
# #25's "fixed CPU halved", against 09c4fbf (the package before the start-up
# work) with this tree's extension: five pairs, alternated, so a slow spell
# of the box falls on both.
BASE=${BASE:-09c4fbf}
step startup-pairs sh -c "mkdir -p $WORK/base && git archive $BASE python | tar -x -C $WORK/base && cp python/specreplay/_core*.so $WORK/base/python/specreplay/ && cd bench && for i in 1 2 3 4 5; do $FIFO $PY startup.py --runs 9 --pythonpath $WORK/base/python --tag before-$BASE && $FIFO $PY startup.py --runs 9 --tag head; done"   # docs/benchmarks.md "Start-up" (the pairs)
step client sh -c "cd bench && $PY client_bench.py"                                               # README's client table, docs/benchmarks.md sets 1 and "A leaner engine"
step sim-capacity sh -c "$PY bench/rust_bench.py sim_capacity -- 1000 2000 4000 && $PY bench/rust_bench.py sim_capacity -- 4000 --tpot-ms 80 && $PY bench/rust_bench.py sim_capacity -- 1000 2000 --capacity && $PY bench/rust_bench.py sim_capacity -- --knee"   # README, docs/simulator.md
step sim-media $PY bench/rust_bench.py sim_media                                                  # docs/simulator.md "Media"
step proxy sh -c "cd bench && $PY proxy_overhead.py"                                              # docs/benchmarks.md "Capture proxy"
step finder sh -c "cd bench && $PY conversation_finder.py && $PY conversation_finder.py --sessions 200 --turns 40"   # "Finding sessions"
step session-lag sh -c "cd bench && $PY session_lag.py"                                           # "Dependent turns' send lag"
step scrape sh -c "cd bench && $FIFO $PY scrape_send_lag.py"                                      # "Scraping server metrics"
step scrape-tick sh -c "cd bench && $PY scrape_tick_cpu.py"                                        # "a scrape tick", docs/results.md "Server metrics"
step metrics-storage sh -c "cd bench && $PY metrics_storage.py"                                    # docs/results.md "Where they are kept"
step live sh -c "cd bench && $FIFO $PY live_view.py"                                              # "Live view", docs/capacity.md
step ray sh -c "$PY -m pip install --quiet 'ray[default]' && cd bench && $PY ray_scaling.py"      # README "Scaling out", docs/benchmarks.md "Distributed replay on Ray"
step media sh -c "cd bench && $PY media_trace_size.py"                                            # docs/trace-format.md
step analysis sh -c "$PY bench/analysis_file.py $WORK/a.arrow && for r in '--resamples 100' ''; do /usr/bin/time -v $SR compare $WORK/a.arrow \$r >/dev/null && /usr/bin/time -v $SR report $WORK/a.arrow -o $WORK/r.html \$r; done"   # "Analysis of a large results file"
step readme-examples sh -c "cd $WORK && $SR replay --config sample:spec-decode-ab && $SR compare spec-ab.arrow; $SR replay sample:poisson-200 --sim-config $ROOT/examples/sim/capacity.toml --find-max-rate --slo 'p99 ttft < 2000' --rate 8 --max-tokens 64 --ignore-eos -o capacity.arrow; $SR replay sample:poisson-200 --sim-config $ROOT/examples/sim/capacity.toml --find-max-rate --slo 'p90 ttft < 2000' --rate 8 --max-tokens 64 --ignore-eos --seed 1 -o capacity90.arrow; $SR synth --num-requests 600 --input-len 128 --output-len 64 -o single-turn.jsonl && $SR replay single-turn.jsonl --sim-config $ROOT/examples/sim/capacity.toml --find-max-rate --slo 'p99 ttft < 2000' --rate 8 --max-tokens 64 --ignore-eos --seed 1 -o capacity1.arrow"   # README "Config files" (the A/B table and the compare console), "Capacity" (its three searches)
# Two steps need what this repository does not hold: the Mooncake trace
# (MOONCAKE_TRACE=…/conversation_trace.jsonl) and vLLM's vllm-bench, built
# (VLLM_BENCH=…/target/release/vllm-bench). Without it, the step fails saying so.
step mooncake sh -c "[ -n '${MOONCAKE_TRACE:-}' ] || { echo 'set MOONCAKE_TRACE to the Mooncake conversation trace'; exit 1; }; bash bench/mooncake_figures.sh '${MOONCAKE_TRACE:-}' $WORK/mc"   # "Mooncake import", "Mooncake replay"
step vllm-bench-cost sh -c "[ -n '${VLLM_BENCH:-}' ] || { echo 'set VLLM_BENCH to a vllm-bench binary'; exit 1; }; $PY bench/vllm_bench_cost.py --vllm-bench '${VLLM_BENCH:-}' --concurrency 256 1024 --repeats 2 --fixed && SPECREPLAY_REALTIME=1 $PY bench/vllm_bench_cost.py --vllm-bench '${VLLM_BENCH:-}' --concurrency 1024 --repeats 2"   # "cost next to vllm-bench", "the same with the engine real-time"
step spec-ab-capacity sh -c "cd $WORK && $SR replay sample:reasoning-prompts-60 --config sample:spec-decode-ab --find-max-rate -o spec-ab-capacity.arrow && $SR compare spec-ab-capacity.arrow"   # README "How much more load does speculation take"
step vllm make --no-print-directory test-vllm VLLM_JOB_ARGS="--table docs/predict-accuracy-vllm.md"   # docs/predict-accuracy-vllm.md (written by the job)
echo "done: $OUT" | tee -a "$OUT/durations.txt"
