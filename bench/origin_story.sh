#!/usr/bin/env bash
# docs/predict.md "The origin story's question", every command of it: from a
# baseline and an n-gram run of the embedded simulator at concurrency 1 (and
# then one more baseline run at 4), predict the tokens/s change at
# concurrency 8 and 64, and measure it with the simulator itself (the truth:
# bench/origin/*.toml). Prints a provenance line, every command's console
# and the table's figures; asserts nothing.
#
#   bash bench/origin_story.sh [WORKDIR] > bench/results/sitting-YYYYMMDD/origin.txt 2>&1
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
SR=${SR:-$HERE/../.venv/bin/specreplay}
PY=${PY:-$HERE/../.venv/bin/python}
WORK=${1:-/tmp/sit/origin}
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
# The table: output tok/s of every point, and the change n-gram makes.
"$PY" - <<'PY'
import specreplay
from specreplay.analysis.summary import summarize

def tok_s(f: str) -> float:
    return float(summarize(specreplay.load(f)).iloc[0]["output_tok_s"])

for c in (8, 64):
    for name in ("p-server", "p-server3", "m"):
        base, ngram = tok_s(f"{name}-base-c{c}.arrow"), tok_s(f"{name}-ngram-c{c}.arrow")
        print(f"c={c} {name}: baseline {base:.1f} tok/s, n-gram {ngram:.1f} tok/s, change {ngram / base - 1:+.1%}")
PY
