#!/usr/bin/env bash
# Harness: a share of the mutation run on the lent machine's CPU cores (cpu mode, as
# `make mutate`; the GPU is hidden). Here, before the call:
#   mkdir -p .mutdev && cp build/mutation/cpu/session.sqlite .mutdev/
#   (run.json without "baseline_s", so that the device runs its own baseline)
# and .whl/ with cosmic-ray 8.7.0, the dependencies the image lacks, and
# flag_gems-5.0.2 (see harness/device/env.sh); both git-ignored, carried by the call.
#   bash harness/device/mutate.sh PART JOBS BUDGET_MIN
# Back here: python -m copyfix.mutation merge <the folder holding the returned
# session.sqlite and run.json>.
set -u
cd "$(dirname "$0")/../.."
: "${OUT:=/tmp/out}"
part=$1 jobs=$2 budget=$3
# into the image's own environment (python3 is a venv there; a venv made from it would
# not see its torch), so that cosmic-ray's scripts sit beside its python
python3 -m pip install -q --no-index --no-deps --no-compile $(ls .whl/*.whl | grep -v flag_gems) || exit 1
rm -rf /tmp/fgbase && python3 -m zipfile -e .whl/flag_gems-5.0.2-py3-none-any.whl /tmp/fgbase
FLAGGEMS_BASE=/tmp/fgbase PYTHONPATH=harness python3 -m copyfix.compose || exit 1
mkdir -p build/mutation/cpu && cp .mutdev/session.sqlite .mutdev/run.json build/mutation/cpu/
export CUDA_VISIBLE_DEVICES="" PYTHONPATH=harness PYTHONUNBUFFERED=1
# DEADLINE (s) ends the run in any case, so that the copies below still come back
# (the session is consistent at any point; merge skips what was left parked)
timeout -s INT "${DEADLINE:-540}" python3 -m copyfix.mutation run --mode cpu --jobs "$jobs" \
  --resume --part "$part" --budget-min "$budget"
echo "mutation rc=$?"
cp build/mutation/cpu/session.sqlite build/mutation/cpu/run.json "$OUT/"
tar -czf "$OUT/workers.tgz" build/mutation/cpu/w*/worker.log 2>/dev/null
true
