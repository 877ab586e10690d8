#!/usr/bin/env bash
# Session 2026-12-06 (evening) sitting at the head: every figure whose code changed after it was measured.
set -u
cd /work/main
PY=.venv/bin/python SR=/work/main/.venv/bin/specreplay
LOG=/tmp/sit/steps.txt
step() { local name=$1; shift; echo "== $name $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg): $*" >> $LOG; local t0=$SECONDS
  ( "$@" ) > /tmp/sit/$name.txt 2>&1; echo "   $name rc=$? took $((SECONDS-t0)) s, load $(cut -d' ' -f1-3 /proc/loadavg)" >> $LOG; }
while [ ! -x /tmp/vllm-bench/target/release/vllm-bench ]; do sleep 10; done
while pgrep -f "cargo build --release" >/dev/null; do sleep 5; done
echo "commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- rust python bench || echo ' (dirty)') $(date -u)" >> $LOG
step figures bash bench/figures.sh startup client sim-capacity sim-media proxy finder session-lag scrape live ray media analysis spec-ab-capacity
step vllm-bench-cost $PY bench/vllm_bench_cost.py --vllm-bench /tmp/vllm-bench/target/release/vllm-bench --concurrency 256 1024 --repeats 2 --fixed
step cost-realtime env SPECREPLAY_REALTIME=1 $PY bench/vllm_bench_cost.py --vllm-bench /tmp/vllm-bench/target/release/vllm-bench --concurrency 1024 --repeats 2
cd /tmp/mc
step mc-import /usr/bin/time -v $SR import mooncake conversation_trace.jsonl -o mc.jsonl
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
import json
rows = [json.loads(l) for l in open("conversation_trace.jsonl")]
span = max(r["timestamp"] for r in rows) + 1000
ids = max(max(r["hash_ids"], default=0) for r in rows) + 1
with open("conv10.jsonl", "w") as out:
    for k in range(10):
        for r in rows:
            out.write(json.dumps({**r, "timestamp": r["timestamp"] + k * span, "hash_ids": [h + k * ids for h in r["hash_ids"]]}) + "\n")
PY
step mc-import10 /usr/bin/time -v $SR import mooncake conv10.jsonl -o mc10-import.jsonl
step mc-expand /work/main/$PY /work/main/bench/trace_expand.py mc.jsonl mc-text.jsonl
for i in 1 2 3; do
  step mc-replay5-$i /usr/bin/time -v $SR replay mc.jsonl --speedup 50 --num-requests 5 --max-tokens 8 -o r.arrow
  step mc10-replay5-$i /usr/bin/time -v $SR replay mc10.jsonl --speedup 50 --num-requests 5 --max-tokens 8 -o r.arrow
  step mctext-replay5-$i /usr/bin/time -v $SR replay mc-text.jsonl --speedup 50 --num-requests 5 --max-tokens 8 -o r.arrow
done
rm -f mc-text.jsonl
step mc-replay-all /usr/bin/time -v $SR replay mc.jsonl --speedup 50 --max-concurrency 1024 --max-tokens 8 -o r.arrow
step mc10-replay-12031 /usr/bin/time -v $SR replay mc10.jsonl --speedup 50 --max-concurrency 1024 --num-requests 12031 --max-tokens 8 -o r.arrow
for i in 1 2; do step mc-prepare-$i /usr/bin/time -v /work/main/$PY /work/main/bench/trace_prepare.py mc.jsonl; done
cd /work/main
for i in 1 2; do step prompt-synthesis-$i $PY bench/rust_bench.py prompt_synthesis -- /tmp/mc/mc.jsonl 5; done
step scrape-tick $PY bench/scrape_tick_cpu.py
step send-lag $PY bench/send_lag_profile.py --rates 2000 5000 6000 8000 --seconds 3 --threads 1 2 --repeats 2 --envs SPECREPLAY_REALTIME=1
step stalls $PY bench/machine_stalls.py --seconds 60 --repeats 2
step warmup $PY bench/open_loop_warmup.py --repeats 3
step ten-thousand $PY -m pytest -s -q -p no:cacheprovider tests/test_reliability.py -k ten_thousand
cd /tmp/sit
step estimate-text-length $SR replay /work/main/traces/reasoning-prompts.jsonl --concurrency 4 --num-requests 16 --sim-config /tmp/sit/sim.toml --no-continuous-usage -o est-text.arrow
step estimate-continuous $SR replay /work/main/traces/reasoning-prompts.jsonl --concurrency 4 --num-requests 16 --sim-config /tmp/sit/sim.toml -o est-cont.arrow
cd /work/main
rm -rf target/wheel
step make-wheel /usr/bin/time -v make --no-print-directory wheel
step aa nice -n 5 $PY bench/aa_calibration.py --seeds 4 --requests 48 --runs-dir /tmp/sit/aa-runs
echo "done $(date -u)" >> $LOG
