# Two commands do all set-up on a fresh Python 3.11 box: `make demo` and `make test`.
# Both create .venv here if needed. torch is pinned (CPU build on CPU machines);
# an unpinned torch would pull a multi-GB CUDA build.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.copyfix-installed
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: venv demo test lint bench pr patch clean mutate

venv: $(STAMP)

$(STAMP): pyproject.toml hatch_build.py
	@command -v $(PYTHON) >/dev/null || { echo "$(PYTHON) not found; run: make PYTHON=python3 ..."; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[dev]"
	touch $@

demo: venv
	$(PY) -m copyfix.demo

test: venv
	$(PY) -m pytest -q -ra $(PYTEST_ARGS)

lint: venv
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .
	$(PY) -m copyfix.lint

bench: venv
	$(PY) -m copyfix.bench $(BENCH_ARGS)

patch: venv
	$(PY) -m copyfix.export patch

pr: venv
	@test -n "$(UPSTREAM)" || { echo "usage: make pr UPSTREAM=<FlagGems checkout>"; exit 2; }
	$(PY) -m copyfix.export pr "$(UPSTREAM)"

# Mutation testing of the PR op file (not part of .ci/run): results/mutation_<mode>.json
# and docs/MUTATION.md. JOBS parallel workers, each on its own copy of the op file.
JOBS ?= 2
MUTATE_MODE ?= cpu
COSMIC_RAY_SPEC ?= cosmic-ray==8.7.0
mutate: venv
	$(PY) -m pip show -q cosmic-ray >/dev/null 2>&1 || $(PY) -m pip install -q "$(COSMIC_RAY_SPEC)"
	$(PY) -m copyfix.mutation run --mode $(MUTATE_MODE) --jobs $(JOBS) $(MUTATE_ARGS)

clean:
	rm -rf build .pytest_cache .hypothesis
