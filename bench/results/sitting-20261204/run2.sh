#!/usr/bin/env bash
# Extras after run.sh: the README's send-lag and real-time claims at the head.
set -u
cd /work/main
PY=.venv/bin/python
LOG=/tmp/sit/steps.txt
step() { local name=$1; shift; echo "== $name $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg): $*" >> $LOG; local t0=$SECONDS
  ( "$@" ) > /tmp/sit/$name.txt 2>&1; echo "   $name rc=$? took $((SECONDS-t0)) s, load $(cut -d' ' -f1-3 /proc/loadavg)" >> $LOG; }
while ! grep -q "^done" $LOG; do sleep 10; done
# make wheel left the release build in .venv untouched (target/wheel); check it is still the release one
step send-lag $PY bench/send_lag_profile.py --rates 2000 5000 6000 8000 --seconds 3 --threads 1 2 --repeats 2 --envs SPECREPLAY_REALTIME=1
step stalls $PY bench/machine_stalls.py --seconds 60 --repeats 2
step warmup $PY bench/open_loop_warmup.py --repeats 3
step cost-realtime env SPECREPLAY_REALTIME=1 $PY bench/vllm_bench_cost.py --vllm-bench /tmp/vllm-bench/target/release/vllm-bench --concurrency 1024 --repeats 2
step spec-ab-capacity bash bench/figures.sh spec-ab-capacity
echo "done2 $(date -u)" >> $LOG
