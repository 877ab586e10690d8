#!/usr/bin/env bash
set -u
LOG=/tmp/sit/steps.txt
cd /work/main
PY=.venv/bin/python SR=/work/main/.venv/bin/specreplay
step() { local name=$1; shift; echo "== $name $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg): $*" >> $LOG; local t0=$SECONDS
  ( "$@" ) > /tmp/sit/$name.txt 2>&1; echo "   $name rc=$? took $((SECONDS-t0)) s, load $(cut -d' ' -f1-3 /proc/loadavg)" >> $LOG; }
while ! grep -q "^done4" $LOG; do sleep 10; done
step ten-thousand $PY -m pytest -s -q -p no:cacheprovider tests/test_reliability.py -k ten_thousand
cd /tmp/sit
step estimate-text-length $SR replay /work/main/traces/reasoning-prompts.jsonl --concurrency 4 --num-requests 16 --sim-config /tmp/sit/sim.toml --no-continuous-usage -o est-text.arrow
step estimate-continuous $SR replay /work/main/traces/reasoning-prompts.jsonl --concurrency 4 --num-requests 16 --sim-config /tmp/sit/sim.toml -o est-cont.arrow
cd /work/main
step sim-capacity bash bench/figures.sh sim-capacity
echo "done5 $(date -u)" >> $LOG
