#!/usr/bin/env bash
# This session's sitting at the head: every figure not re-measured since its code changed.
set -u
cd /work/main
PY=.venv/bin/python SR=.venv/bin/specreplay
LOG=/tmp/sit/steps.txt
step() { local name=$1; shift; echo "== $name $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg): $*" >> $LOG; local t0=$SECONDS
  ( "$@" ) > /tmp/sit/$name.txt 2>&1; echo "   $name rc=$? took $((SECONDS-t0)) s, load $(cut -d' ' -f1-3 /proc/loadavg)" >> $LOG; }
echo "commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- rust python bench || echo ' (dirty)') $(date -u)" >> $LOG
while [ ! -x /tmp/vllm-bench/target/release/vllm-bench ] || ! grep -q rc= /tmp/vb.log; do sleep 10; done
step ray bash bench/figures.sh ray
step vllm-bench-cost $PY bench/vllm_bench_cost.py --vllm-bench /tmp/vllm-bench/target/release/vllm-bench --concurrency 256 1024 --repeats 2 --fixed
cd /tmp/mc
step mc-import /usr/bin/time -v /work/main/$SR import mooncake conversation_trace.jsonl -o mc.jsonl
/work/main/.venv/bin/python - <<'PY'
import json
rows = [json.loads(line) for line in open("mc.jsonl")]
span = max(r["arrival"] for r in rows) + 1.0
with open("mc10.jsonl", "w") as out:
    for k in range(10):
        for r in rows:
            out.write(json.dumps({**r, "id": f"{r['id']}-{k}", "arrival": round(r["arrival"] + k * span, 3)}) + "\n")
PY
/work/main/.venv/bin/python - <<'PY'
# the import of a tenfold source trace: Mooncake records repeated with timestamps shifted
import json
rows = [json.loads(l) for l in open("conversation_trace.jsonl")]
span = max(r["timestamp"] for r in rows) + 1000
ids = max(max(r["hash_ids"], default=0) for r in rows) + 1
with open("conv10.jsonl", "w") as out:
    for k in range(10):
        for r in rows:
            out.write(json.dumps({**r, "timestamp": r["timestamp"] + k * span, "hash_ids": [h + k * ids for h in r["hash_ids"]]}) + "\n")
PY
step mc-import10 /usr/bin/time -v /work/main/$SR import mooncake conv10.jsonl -o mc10-import.jsonl
step mc-expand /work/main/$PY /work/main/bench/trace_expand.py mc.jsonl mc-text.jsonl
for i in 1 2 3; do
  step mc-replay5-$i /usr/bin/time -v /work/main/$SR replay mc.jsonl --speedup 50 --num-requests 5 --max-tokens 8 -o r.arrow
  step mc10-replay5-$i /usr/bin/time -v /work/main/$SR replay mc10.jsonl --speedup 50 --num-requests 5 --max-tokens 8 -o r.arrow
  step mctext-replay5-$i /usr/bin/time -v /work/main/$SR replay mc-text.jsonl --speedup 50 --num-requests 5 --max-tokens 8 -o r.arrow
done
step mc-replay-all /usr/bin/time -v /work/main/$SR replay mc.jsonl --speedup 50 --max-concurrency 1024 --max-tokens 8 -o r.arrow
rm -f mc-text.jsonl
for i in 1 2; do step mc-prepare-$i /usr/bin/time -v /work/main/$PY /work/main/bench/trace_prepare.py mc.jsonl; done
cd /work/main
for i in 1 2 3; do step prompt-synthesis-$i cargo run --release -q -p specreplay-core --example prompt_synthesis -- /tmp/mc/mc.jsonl 5; done
step sim-media cargo run --release -q -p specreplay-core --example sim_media
step scrape-tick $PY bench/scrape_tick_cpu.py
step predict-llamacpp $PY bench/predict_llamacpp.py --requests 24 --rounds 3 --slo-requests 48 --keep /tmp/sit/predict-keep --out /tmp/sit/predict-accuracy.md
rm -rf target/wheel
step make-wheel /usr/bin/time -v make --no-print-directory wheel
step aa nice -n 5 $PY bench/aa_calibration.py --seeds 6 --requests 48 --runs-dir /tmp/sit/aa-runs
echo "done $(date -u)" >> $LOG
