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
test: dev ## run every test: lint, Rust (cargo test), stubtest, mypy, pytest, the wheel check, the Ray tests
	$(MAKE) --no-print-directory lint  # first: a lint failure is the cheapest to find (about a minute)
	$(PY) tests/browser.py  # the report tests' Chromium: installed when missing (root with apt), else one line on what to run
	SPECREPLAY_FUZZ_CASES=20000 cargo test --workspace --exclude specreplay-py
	$(VENV)/bin/python -m mypy.stubtest specreplay._core --allowlist .ci/stubtest-allowlist.txt
	$(VENV)/bin/mypy
	$(VENV)/bin/pytest -m "not ray"
	@if [ -n "$$SPECREPLAY_SKIP_WHEEL" ]; then echo "SPECREPLAY_SKIP_WHEEL set: the wheel check is skipped"; else $(MAKE) --no-print-directory wheel-check; fi
	$(MAKE) --no-print-directory test-ray  # about a minute with the install: well within CI's time

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

# CI's wheel: the same package from the debug build `make dev` left in target/
# (about a minute), tagged for this host's glibc. The manylinux_2_28 release
# wheel of `make wheel` takes 8-9 min on 2 cores (18 min unoptimized: the
# dependencies are optimised even in debug builds, and linked by zig); check
# it with `WHEEL=dist/specreplay-*.whl bash tests/wheel_check.sh`.
.PHONY: wheel-check
wheel-check: dev ## build a wheel from the debug build and run the quick start from it: fresh venv, no Rust on PATH, empty directory (tests/wheel_check.sh)
	rm -rf target/wheel-check
	PATH=$(abspath $(VENV))/bin:$$PATH $(VENV)/bin/maturin build --quiet --profile dev --out target/wheel-check
	WHEEL="target/wheel-check/specreplay-*.whl" bash tests/wheel_check.sh

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
bench: $(PY) ## build in release and run the benchmarks under bench/ at quick settings (writes bench/results/, asserts nothing)
	$(PIP) install --quiet "maturin>=1.9,<2" aiohttp
	VIRTUAL_ENV=$(abspath $(VENV)) PATH=$(abspath $(VENV))/bin:$$PATH $(VENV)/bin/maturin develop --release --quiet --extras test,bench
	cargo build --release --quiet -p specreplay-core --example reference_client  # the bench's reference Rust client
	cd bench && ../$(PY) startup.py --runs 7
	cd bench && ../$(PY) conversation_finder.py
	cd bench && ../$(PY) session_lag.py
	cd bench && ../$(PY) proxy_overhead.py --seconds 10
	cd bench && ../$(PY) client_bench.py --parts error,fixed --concurrency 1,64
