#!/usr/bin/env bash
# The Mooncake rows of docs/benchmarks.md's head table: `specreplay import
# mooncake` of the FAST'25 conversation trace and of the same trace ten times
# over, then short replays of each form (the imported trace, the tenfold one,
# the one with its prompts written out as text) and whole-trace replays, each
# under `/usr/bin/time -v`. `bench/figures.sh mooncake` runs it with
# MOONCAKE_TRACE set; alone:
#
#   bash bench/mooncake_figures.sh /path/to/conversation_trace.jsonl WORKDIR
#
# The trace is kvcache-ai/Mooncake's FAST25-release/traces/conversation_trace.jsonl
# (Apache-2.0; docs/trace-format.md says where from). WORKDIR gets the
# derived traces (about 0.7 GB while the text form exists). Asserts nothing.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PY:-$ROOT/.venv/bin/python}
SR=${SR:-$ROOT/.venv/bin/specreplay}
TRACE=$(realpath "$1")
mkdir -p "$2" && cd "$2"
timed() { echo "== $* (load $(cut -d' ' -f1-3 /proc/loadavg))"; /usr/bin/time -v "$@" 2>&1 || true; }

timed "$SR" import mooncake "$TRACE" -o mc.jsonl
# Ten times over: each copy after the last, its ids shifted (imported), or
# its block hashes shifted (raw, so the import sees ten times the blocks).
"$PY" - "$TRACE" <<'PY'
import json, sys
rows = [json.loads(line) for line in open("mc.jsonl")]
span = max(r["arrival"] for r in rows) + 1.0
with open("mc10.jsonl", "w") as out:
    for k in range(10):
        for r in rows:
            out.write(json.dumps({**r, "id": f"{r['id']}-{k}", "arrival": round(r["arrival"] + k * span, 3)}) + "\n")
raw = [json.loads(line) for line in open(sys.argv[1])]
span = max(r["timestamp"] for r in raw) + 1000
ids = max(max(r["hash_ids"], default=0) for r in raw) + 1
with open("conv10.jsonl", "w") as out:
    for k in range(10):
        for r in raw:
            out.write(json.dumps({**r, "timestamp": r["timestamp"] + k * span, "hash_ids": [h + k * ids for h in r["hash_ids"]]}) + "\n")
PY
timed "$SR" import mooncake conv10.jsonl -o mc10-import.jsonl
"$PY" "$ROOT/bench/trace_expand.py" mc.jsonl mc-text.jsonl
for i in 1 2 3; do
    for t in mc mc10 mc-text; do timed "$SR" replay $t.jsonl --speedup 50 --num-requests 5 --max-tokens 8 -o r.arrow; done
done
rm -f mc-text.jsonl
timed "$SR" replay mc.jsonl --speedup 50 --max-concurrency 1024 --max-tokens 8 -o r.arrow
timed "$SR" replay mc10.jsonl --speedup 50 --max-concurrency 1024 --num-requests 12031 --max-tokens 8 -o r.arrow
