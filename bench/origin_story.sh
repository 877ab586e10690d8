#!/usr/bin/env bash
# docs/predict.md "The origin story's question", every command of it: from a
# baseline and an n-gram run of the embedded simulator at concurrency 1 (and
# then one more baseline run at 4), predict the tokens/s change at
# concurrency 8 and 64, and measure it with the simulator itself (the truth:
# bench/origin/*.toml). Prints a provenance line, every command's console
# and the table's figures, then the change over DRAWS of the model's draws
# and of the simulator's seeds (one draw of 32 requests spreads by several
# points); asserts nothing.
#
#   [DRAWS=6] bash bench/origin_story.sh [WORKDIR] > bench/results/sitting-YYYYMMDD/origin.txt 2>&1
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
SR=${SR:-$HERE/../.venv/bin/specreplay}
PY=${PY:-$HERE/../.venv/bin/python}
WORK=${1:-/tmp/sit/origin}
DRAWS=${DRAWS:-6}  # the model's draws and the simulator's seeds for the spread of one draw
echo "# origin_story.sh at $(git -C "$HERE" rev-parse --short HEAD)$(git -C "$HERE" diff --quiet HEAD -- ../python ../rust || echo ' (dirty)') $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
mkdir -p "$WORK" && cd "$WORK" && cp "$HERE/origin/base.toml" base.toml && cp "$HERE/origin/ngram.toml" ngram.toml && rm -f ./*.arrow
$SR synth -o t.jsonl --num-requests 16 --input-len uniform:100:300 --output-len 64 --seed 2
$SR replay t.jsonl --sim-config base.toml  --concurrency 1 --num-requests 32 --label baseline -o base-c1.arrow
$SR replay t.jsonl --sim-config ngram.toml --concurrency 1 --label ngram    -o ngram-c1.arrow
$SR calibrate base-c1.arrow ngram-c1.arrow -o server.toml
$SR synth -o t4.jsonl --num-requests 32 --input-len uniform:100:300 --output-len 64 --seed 9
$SR replay t4.jsonl --sim-config base.toml --concurrency 4 --label baseline -o base-c4.arrow
$SR calibrate base-c1.arrow ngram-c1.arrow base-c4.arrow -o server3.toml
for c in 8 64; do n=$([ $c = 8 ] && echo 32 || echo 256)
  for srv in server server3; do
    $SR replay t.jsonl --predict $srv.toml --concurrency $c --num-requests $n -o p-$srv-ngram-c$c.arrow
    $SR replay t.jsonl --predict $srv.toml --concurrency $c --num-requests $n --what-if spec_draft_len=0 -o p-$srv-base-c$c.arrow
  done
  $SR replay t.jsonl --sim-config base.toml --concurrency $c --num-requests $n --label baseline -o m-base-c$c.arrow
  $SR replay t.jsonl --sim-config ngram.toml --concurrency $c --num-requests $n --label ngram -o m-ngram-c$c.arrow
done
# The spread of one draw: the n-gram change is decided by which drafts are
# accepted, drawn per prompt (16 of them, looped), on both sides. The model
# over its own draws (--predict-draw), the simulator over its seeds (the
# baseline has no draw: fixed lengths, no drafts).
for k in $(seq 1 "$DRAWS"); do
  for c in 8 64; do n=$([ $c = 8 ] && echo 32 || echo 256)
    $SR replay t.jsonl --predict server3.toml --concurrency $c --num-requests $n --predict-draw "$k" -o d$k-ngram-c$c.arrow > /dev/null
    $SR replay t.jsonl --predict server3.toml --concurrency $c --num-requests $n --predict-draw "$k" --what-if spec_draft_len=0 -o d$k-base-c$c.arrow > /dev/null
    sed "1i seed = $k" ngram.toml > ngram-seed$k.toml
    $SR replay t.jsonl --sim-config ngram-seed$k.toml --concurrency $c --num-requests $n --label ngram -o s$k-ngram-c$c.arrow > /dev/null
  done
done
# The table: output tok/s of every point, and the change n-gram makes; then
# the change over the draws and seeds, with the mean tokens per decode chunk.
DRAWS=$DRAWS "$PY" - <<'PY'
import os
import statistics

import numpy as np
import specreplay
from specreplay.analysis.summary import summarize

def tok_s(f: str) -> float:
    return float(summarize(specreplay.load(f)).iloc[0]["output_tok_s"])

def per_chunk(f: str) -> float:
    return float(np.concatenate([np.asarray(t)[1:-1] for t in specreplay.load(f)["chunk_tokens"]]).mean())

for c in (8, 64):
    for name in ("p-server", "p-server3", "m"):
        base, ngram = tok_s(f"{name}-base-c{c}.arrow"), tok_s(f"{name}-ngram-c{c}.arrow")
        print(f"c={c} {name}: baseline {base:.1f} tok/s, n-gram {ngram:.1f} tok/s, change {ngram / base - 1:+.1%}, "
              f"n-gram tokens per decode chunk {per_chunk(f'{name}-ngram-c{c}.arrow'):.3f}")
draws = range(1, int(os.environ["DRAWS"]) + 1)
for c in (8, 64):
    for side, runs in (("predicted (server3, --predict-draw)", [(f"d{k}-base-c{c}.arrow", f"d{k}-ngram-c{c}.arrow") for k in draws]),
                       ("measured (simulator seed)", [(f"m-base-c{c}.arrow", f"s{k}-ngram-c{c}.arrow") for k in draws])):
        changes = [tok_s(n) / tok_s(b) - 1 for b, n in runs]
        chunks = [per_chunk(n) for _, n in runs]
        print(f"c={c} {side} over {len(changes)}: change median {statistics.median(changes):+.1%}, "
              f"range {min(changes):+.1%} to {max(changes):+.1%} ({', '.join(f'{x:+.1%}' for x in changes)}); "
              f"tokens per decode chunk {min(chunks):.3f}-{max(chunks):.3f}")
PY
