#!/usr/bin/env bash
set -u
LOG=/tmp/sit/steps.txt
while ! grep -q "^done5" $LOG; do sleep 5; done
echo "== origin $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg): bash /tmp/sit/origin/run.sh" >> $LOG
t0=$SECONDS; bash /tmp/sit/origin/run.sh > /tmp/sit/origin.txt 2>&1; echo "   origin rc=$? took $((SECONDS-t0)) s, load $(cut -d' ' -f1-3 /proc/loadavg)" >> $LOG
echo "done7 $(date -u)" >> $LOG
