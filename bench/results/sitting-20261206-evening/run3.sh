set -u
cd /work/main
PY=.venv/bin/python
LOG=/tmp/sit/steps.txt
step() { local name=$1; shift; echo "== $name $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg): $*" >> $LOG; local t0=$SECONDS
  ( "$@" ) > /tmp/sit/$name.txt 2>&1; echo "   $name rc=$? took $((SECONDS-t0)) s, load $(cut -d' ' -f1-3 /proc/loadavg)" >> $LOG; }
while ! grep -q "^done" $LOG; do sleep 5; done
for i in 1 2 3 4 5; do
  step startup-before-$i sh -c "cd bench && chrt -f 1 ../$PY startup.py --runs 9 --pythonpath /tmp/base/python --tag before-09c4fbf"
  step startup-head-$i sh -c "cd bench && chrt -f 1 ../$PY startup.py --runs 9"
done
for i in 1 2 3; do step predict-speed-$i /usr/bin/time -v $PY bench/rust_bench.py predict_speed -- 1000 3600; done
step origin bash bench/origin_story.sh
echo "done3 $(date -u)" >> $LOG
