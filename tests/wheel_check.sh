#!/usr/bin/env bash
# The wheel as a user gets it (`make wheel-check`, part of `make test`;
# WHEEL=path checks another, e.g. the release one in dist/):
# dist/specreplay-*.whl installed into a fresh venv, on a PATH with no cargo
# or rustc, then in an empty directory: the README's quick start, a replay
# of a packaged sample, `serve --help`, and a capture through the proxy in
# front of `specreplay serve`, replayed.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
shopt -s nullglob
wheels=(${WHEEL:-dist/specreplay-*.whl})
[ ${#wheels[@]} -eq 1 ] || { echo "wheel_check: expected one dist/specreplay-*.whl, found ${#wheels[@]} (run make wheel)"; exit 1; }
WHEEL=$(realpath "${wheels[0]}")

WORK=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT

"$PYTHON" -m venv "$WORK/venv"
"$WORK/venv/bin/pip" install --quiet "$WHEEL"
export PATH="$WORK/venv/bin:/usr/bin:/bin"
export PYTHONUNBUFFERED=1
unset VIRTUAL_ENV PYTHONPATH
if command -v cargo >/dev/null || command -v rustc >/dev/null; then
    echo "wheel_check: a Rust toolchain is on PATH ($PATH)"; exit 1
fi
mkdir "$WORK/empty" && cd "$WORK/empty"
step() { echo "wheel_check: $*"; }

step "specreplay init && specreplay replay --config specreplay.toml (all 12 prompts at once: the template's 1-then-8 sweep takes 2.5 min)"
specreplay init
specreplay replay --config specreplay.toml --concurrency 12 > quick.txt
grep -q "12 requests: 12 ok" quick.txt || { cat quick.txt; exit 1; }
test -s results.arrow

step "specreplay replay sample:reasoning-prompts --rate 8"
specreplay replay sample:reasoning-prompts --rate 8 --max-tokens 256 -o rate.arrow > rate.txt
grep -q "12 requests: 12 ok" rate.txt || { cat rate.txt; exit 1; }

step "specreplay serve --help"
specreplay serve --help | grep -q "Serve the simulated reasoning model"

step "specreplay capture in front of specreplay serve, two streamed requests through it, replayed"
specreplay serve --port 0 --tpot-ms 2 > serve.log 2>&1 &
pids+=($!)
for _ in $(seq 100); do grep -q "serving http" serve.log && break; sleep 0.1; done
upstream=$(grep -o "http://[^ ]*" serve.log | head -1); upstream=${upstream%/v1}
[ -n "$upstream" ] || { cat serve.log; exit 1; }
specreplay capture --upstream "$upstream/v1" --listen 127.0.0.1:0 -o captured.jsonl --max-requests 2 > capture.out 2> capture.log &
capture_pid=$!
pids+=($capture_pid)
for _ in $(seq 100); do grep -q "forwarding http" capture.log && break; sleep 0.1; done
proxy=$(grep -o "forwarding http://[^ ]*" capture.log | cut -d' ' -f2)
[ -n "$proxy" ] || { cat capture.log; exit 1; }
python - "$proxy" <<'EOF'
import json, sys, urllib.request
body = {"model": "m", "stream": True, "max_tokens": 32, "messages": [{"role": "user", "content": "why is the sky blue"}]}
for _ in range(2):
    req = urllib.request.Request(sys.argv[1] + "/chat/completions", data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        assert resp.status == 200 and b"data: [DONE]" in resp.read()
EOF
wait "$capture_pid"
[ "$(grep -c "^{" captured.jsonl)" -eq 2 ] || { cat capture.log captured.jsonl; exit 1; }
specreplay replay captured.jsonl --url "$upstream/v1" --speedup 1 -o captured.arrow > captured.txt
grep -q "2 requests: 2 ok" captured.txt || { cat captured.txt; exit 1; }
step "ok: $(basename "$WHEEL") works without a Rust toolchain"
