#!/usr/bin/env bash
set -u
LOG=/tmp/sit/steps.txt
cd /work/main
PY=.venv/bin/python
step() { local name=$1; shift; echo "== $name $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg): $*" >> $LOG; local t0=$SECONDS
  ( "$@" ) > /tmp/sit/$name.txt 2>&1; echo "   $name rc=$? took $((SECONDS-t0)) s, load $(cut -d' ' -f1-3 /proc/loadavg)" >> $LOG; }
while ! grep -q "^done3" $LOG; do sleep 10; done
for i in 1 2 3; do step predict-speed-$i /usr/bin/time -v $PY bench/rust_bench.py predict_speed -- 1000 3600; done
step sim-media-file $PY bench/rust_bench.py sim_media
step prompt-synthesis-file $PY bench/rust_bench.py prompt_synthesis -- /tmp/mc/mc.jsonl 5
echo "done4 $(date -u)" >> $LOG
