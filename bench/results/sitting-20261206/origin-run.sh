#!/usr/bin/env bash
# docs/predict.md "The origin story's question", every command of it.
set -eu
echo "# at $(git -C /work/main rev-parse --short HEAD) $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
SR=/work/main/.venv/bin/specreplay
mkdir -p /tmp/sit/origin && cd /tmp/sit/origin && cp /work/main/bench/results/sitting-20261206/origin-base.toml base.toml && cp /work/main/bench/results/sitting-20261206/origin-ngram.toml ngram.toml && rm -f ./*.arrow
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
# The table: output tok/s of every point (docs/predict.md "The origin story's question").
/work/main/.venv/bin/python - <<'PY'
import specreplay
from specreplay.analysis.summary import summarize
for c in (8, 64):
    for name in ("server", "server3"):
        for kind in ("base", "ngram"):
            f = f"p-{name}-{kind}-c{c}.arrow"
            print(f, round(float(summarize(specreplay.load(f)).iloc[0]["output_tok_s"]), 1))
    for kind in ("base", "ngram"):
        f = f"m-{kind}-c{c}.arrow"
        print(f, round(float(summarize(specreplay.load(f)).iloc[0]["output_tok_s"]), 1))
PY
