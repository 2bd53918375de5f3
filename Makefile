# Two commands do all set-up on a fresh Python 3.11 box: `make demo` and `make test`.
# Both create .venv here if needed. torch is pinned (CPU build on CPU machines);
# an unpinned torch would pull a multi-GB CUDA build.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.copyfix-installed
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: venv demo test test-head test-checkout-base test-triton lint bench decode pr patch upstream-check upstream-discover upstream-ci clean

venv: $(STAMP)

$(STAMP): pyproject.toml hatch_build.py $(shell find src -name '*.patch') $(shell find src -type d)
	@command -v $(PYTHON) >/dev/null || { echo "$(PYTHON) not found; run: make PYTHON=python3 ..."; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[dev]"
	touch $@

demo: venv
	$(PY) -m copyfix.demo

test: venv
	$(PY) -m pytest -q -ra $(PYTEST_ARGS)

# PR 1 on the head-like tree (upstream's later files in .upstream/later/, a FlagGems
# main mirror: see tests/overlay/test_head_integration.py); `make test` deselects these.
test-head: venv
	$(PY) -m pytest -q -ra -m head_tree tests/overlay/test_head_integration.py

# The PR tests over a base given as a FlagGems checkout (FLAGGEMS_BASE), in a copy of
# this repository with its own .venv: CI's stand-in for FlagGems main (see
# harness/copyfix/synthetic_base.py). FlagGems main itself: FLAGGEMS_BASE=<main> make test.
CHECKOUT_COPY := build/checkout-base
test-checkout-base: venv
	$(PY) -m copyfix.synthetic_base build/synthetic-flaggems
	rm -rf $(CHECKOUT_COPY) && mkdir -p $(CHECKOUT_COPY)
	git ls-files -z | xargs -0 cp --parents -t $(CHECKOUT_COPY)
	FLAGGEMS_BASE=$(CURDIR)/build/synthetic-flaggems $(MAKE) -C $(CHECKOUT_COPY) test \
		PYTEST_ARGS="tests/test_copy_ops.py tests/tooling/test_emulation.py tests/tooling/test_decode.py -k 'not nvidia_backend' -p no:warnings"

# The cpu emulation on another Triton (FlagGems' backends pin 3.0-3.6): a venv under
# build/triton-$(TRITON) with only that Triton, everything else from .venv; the import
# (base and composed) and the tests copyfix.triton_matrix names for that version.
TRITON ?=
test-triton: venv
	@test -n "$(TRITON)" || { echo "usage: make test-triton TRITON=<version, e.g. 3.4.0>"; exit 2; }
	$(PY) -m copyfix.triton_matrix $(TRITON) $(if $(TRITON_RECORD),--record $(TRITON_RECORD))

lint: venv
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .
	$(PY) -m copyfix.lint

bench: venv
	$(PY) -m copyfix.bench $(BENCH_ARGS)

# A Hugging Face Llama decode under FlagGems: eager / the base alone / composed tok/s,
# the cache's hit rate, cache on = off, the KunlunXIN emulation (the GPU box runs it over
# upstream main: harness/device/decode.sh; here, over a FlagGems checkout as the base:
# FLAGGEMS_BASE=<checkout> make decode DECODE_ARGS="--mode cpu --configs tiny", in a fresh
# .venv, which composes over that base).
decode: venv
	$(PY) -m copyfix.measure.decode $(DECODE_ARGS)

patch: venv
	$(PY) -m copyfix.export patch

pr: venv
	@test -n "$(UPSTREAM)" || { echo "usage: make pr UPSTREAM=<FlagGems checkout>"; exit 2; }
	$(PY) -m copyfix.export pr "$(UPSTREAM)"

# Upstream FlagGems' own tests (those reaching the kunlunxin copy_), base vs base + overlay,
# with the XPU fault on: results/upstream_check_$(MODE).json and docs/UPSTREAM_CHECK.md.
MODE ?= cpu
JOBS ?= 2
upstream-check: venv
	@test -n "$(UPSTREAM)" || { echo "usage: make upstream-check UPSTREAM=<FlagGems checkout> [MODE=cpu|cuda] [JOBS=2] [UPSTREAM_ARGS='--limit N -k REGEX --label L']"; exit 2; }
	$(PY) -m copyfix.upstream.check check "$(UPSTREAM)" --mode $(MODE) -n $(JOBS) $(UPSTREAM_ARGS)

# Upstream's per-PR CI (tools/test-op.sh, once per PR file) on a copy of the checkout with
# each exported PR applied, device model on; upstream's tests/test_copy.py with/without.
# results/upstream_ci_$(MODE).json and a block in docs/UPSTREAM_CHECK.md.
PRS ?=
upstream-ci: venv
	@test -n "$(UPSTREAM)" || { echo "usage: make upstream-ci UPSTREAM=<FlagGems checkout> [MODE=cpu|cuda] [PRS='strided-copy generic'] [UPSTREAM_CI_ARGS='--label L --test-copy quick']"; exit 2; }
	$(PY) -m copyfix.upstream.ci "$(UPSTREAM)" --mode $(MODE) $(if $(strip $(PRS)),--pr $(PRS)) $(UPSTREAM_CI_ARGS)

# (Re)build results/upstream_selection_<label>.json: which upstream cases reach copy_.
upstream-discover: venv
	@test -n "$(UPSTREAM)" || { echo "usage: make upstream-discover UPSTREAM=<FlagGems checkout> [JOBS=2] [UPSTREAM_ARGS=...]"; exit 2; }
	$(PY) -m copyfix.upstream.check discover "$(UPSTREAM)" -n $(JOBS) $(UPSTREAM_ARGS)

clean:
	rm -rf build .pytest_cache .hypothesis
