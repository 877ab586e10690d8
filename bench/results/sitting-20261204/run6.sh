#!/usr/bin/env bash
# The sitting's second half: the llama.cpp table again (the first one's
# calibration ran while the lead ran mypy and pytest), the A/A calibration,
# then the README's send-lag and real-time claims.
set -u
cd /work/main
PY=.venv/bin/python SR=/work/main/.venv/bin/specreplay
LOG=/tmp/sit/steps.txt
step() { local name=$1; shift; echo "== $name $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg): $*" >> $LOG; local t0=$SECONDS
  ( "$@" ) > /tmp/sit/$name.txt 2>&1; echo "   $name rc=$? took $((SECONDS-t0)) s, load $(cut -d' ' -f1-3 /proc/loadavg)" >> $LOG; }
echo "commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- rust python bench || echo ' (dirty)') $(date -u)" >> $LOG
step predict-llamacpp $PY bench/predict_llamacpp.py --requests 24 --rounds 3 --slo-requests 48 --keep /tmp/sit/predict-keep --out /tmp/sit/predict-accuracy.md
step aa nice -n 5 $PY bench/aa_calibration.py --seeds 4 --requests 48 --runs-dir /tmp/sit/aa-runs
step send-lag $PY bench/send_lag_profile.py --rates 2000 5000 6000 8000 --seconds 3 --threads 1 2 --repeats 2 --envs SPECREPLAY_REALTIME=1
step stalls $PY bench/machine_stalls.py --seconds 60 --repeats 2
step warmup $PY bench/open_loop_warmup.py --repeats 3
step cost-realtime env SPECREPLAY_REALTIME=1 $PY bench/vllm_bench_cost.py --vllm-bench /tmp/vllm-bench/target/release/vllm-bench --concurrency 1024 --repeats 2
echo "done2 $(date -u)" >> $LOG
while ! grep -q "^done4" $LOG; do sleep 5; done
step ten-thousand $PY -m pytest -s -q -p no:cacheprovider tests/test_reliability.py -k ten_thousand
cd /tmp/sit
step estimate-text-length $SR replay /work/main/traces/reasoning-prompts.jsonl --concurrency 4 --num-requests 16 --sim-config /tmp/sit/sim.toml --no-continuous-usage -o est-text.arrow
step estimate-continuous $SR replay /work/main/traces/reasoning-prompts.jsonl --concurrency 4 --num-requests 16 --sim-config /tmp/sit/sim.toml -o est-cont.arrow
echo "done5 $(date -u)" >> $LOG
