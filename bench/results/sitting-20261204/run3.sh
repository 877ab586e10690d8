#!/usr/bin/env bash
set -u
LOG=/tmp/sit/steps.txt
SR=/work/main/.venv/bin/specreplay
step() { local name=$1; shift; echo "== $name $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg): $*" >> $LOG; local t0=$SECONDS
  ( "$@" ) > /tmp/sit/$name.txt 2>&1; echo "   $name rc=$? took $((SECONDS-t0)) s, load $(cut -d' ' -f1-3 /proc/loadavg)" >> $LOG; }
while ! grep -q "^done2" $LOG; do sleep 10; done
echo "commit $(git -C /work/main rev-parse --short HEAD)" >> $LOG
cd /tmp/mc
step mc-replay-all-fixed /usr/bin/time -v $SR replay mc.jsonl --speedup 50 --max-concurrency 1024 --max-tokens 8 -o r.arrow
step mc10-replay-12031 /usr/bin/time -v $SR replay mc10.jsonl --speedup 50 --max-concurrency 1024 --num-requests 12031 --max-tokens 8 -o r.arrow
echo "done3 $(date -u)" >> $LOG
