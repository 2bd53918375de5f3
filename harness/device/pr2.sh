#!/usr/bin/env bash
# Harness (PR 2): the generic copy_ on the lent NVIDIA machine, FlagGems' own NVIDIA backend
# (GEMS_VENDOR=nvidia, compiled Triton, no kunlunxin emulation), over bases 5.0.2 and main.
#
#   OUT=<dir> COPYFIX_OP_COMMIT=<sha> bash harness/device/pr2.sh          # on the GPU box
#   DRY_RUN_CPU=1 OUT=/tmp/pr2out bash harness/device/pr2.sh             # plumbing only, CPU
#
# Steps, in this order (budgeted against DEADLINE seconds, default 570; JOBS processes,
# default 16; gc-main mostly reuses gc-5.0.2's compiled kernels):
#   gc-5.0.2, gc-main  python -m copyfix.measure.generic_conversions on the repo composed over the
#                      5.0.2 wheel (harness/device/env.sh) and over main (.upstream/main/src):
#                      before (pre-image) / after (overlay) over 15 dtypes x 3 layouts
#   up-main, up-5.0.2  the PR test file dropped into a copy of the upstream checkout
#                      (.upstream/main, .upstream/v5.0.2: src/ and tests/), run with
#                      PYTHONPATH=src: "before" with the checkout's own ops/copy.py (must fail),
#                      "after" with this repo's ops/copy.py and ops/to.py (must pass), then after again with
#                      `--ref=cpu --quick` (as upstream's tools/test-op.sh runs a test file)
# Writes to $OUT: generic_conversions_h200.json (both bases: --label merges),
# pr2_upstream_tests.json (counts per checkout and run), pr2_logs.tgz.
# STEPS="..." runs some steps; a second call on a fresh machine continues an earlier
# call's files when given GC_PREV=<its generic_conversions_h200.json> and
# UP_PREV=<its pr2_upstream_tests.json> (paths inside the carried tree).
# DRY_RUN_CPU=1: the same steps on this machine's .venv in cpu mode (Triton's interpreter,
# kunlunxin emulation: use_gems() reaches the kunlunxin op, so the upstream runs' counts
# are not PR 2's), upstream checkouts from UPSTREAM_MAIN / UPSTREAM_502; writes
# generic_conversions_dryrun.json instead.
set -u
cd "$(dirname "$0")/../.."
REPO=$PWD
: "${OUT:=/tmp/out}" "${DEADLINE:=570}" "${JOBS:=16}" "${DRY_RUN_CPU:=0}"
LOGS=/tmp/pr2logs && rm -rf $LOGS && mkdir -p $LOGS "$OUT"
left() { local n=$((DEADLINE - SECONDS)); echo $((n > 1 ? n : 1)); }
if [ -z "${COPYFIX_OP_COMMIT:-}" ] && git rev-parse --git-dir > /dev/null 2>&1; then
  COPYFIX_OP_COMMIT=$(git log -1 --format=%H -- src/flag_gems/ops/copy.py)
fi
export COPYFIX_OP_COMMIT="${COPYFIX_OP_COMMIT:-}" PYTHONUNBUFFERED=1

if [ "$DRY_RUN_CPU" = 1 ]; then
  PY=$REPO/.venv/bin/python MODE=cpu GC_JSON=$OUT/generic_conversions_dryrun.json
  UP_MAIN=${UPSTREAM_MAIN:-/tmp/fg} UP_502=${UPSTREAM_502:-/tmp/fg502}
  SITE=$REPO/build/composed:$REPO/harness  # the editable install's composition (5.0.2)
  MAIN_SITE=/tmp/pr2main/build/composed:/tmp/pr2main/harness
  UP_PLUGIN="-p copyfix.upstream.plugin" && export COPYFIX_EMULATION=cpu
  main_tree() { cp -r "$UP_MAIN/src" /tmp/fgmain/; }
else
  . harness/device/env.sh > $LOGS/env.log 2>&1  # /tmp/site wheels, build/composed over 5.0.2
  unset COPYFIX_EMULATION
  PY=python3 MODE=cuda GC_JSON=$OUT/generic_conversions_h200.json
  UP_MAIN=.upstream/main UP_502=.upstream/v5.0.2
  SITE=/tmp/site:$REPO/build/composed:$REPO/harness UP_PLUGIN=""
  MAIN_SITE=/tmp/site:/tmp/pr2main/build/composed:/tmp/pr2main/harness
  main_tree() { cp -r .upstream/main/src /tmp/fgmain/; }  # (.upstream/main.tgz, unpacked by harness/device/env.sh)
fi
# a later call (a fresh machine) adds its steps to an earlier call's files, when given them
[ -n "${GC_PREV:-}" ] && cp "$GC_PREV" "$GC_JSON"
[ -n "${UP_PREV:-}" ] && cp "$UP_PREV" "$OUT/pr2_upstream_tests.json"
MACHINE=$($PY -c "import torch, os; print((torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'cpu') + f', {os.cpu_count()} CPU cores')")
echo "=== device_pr2 $(date +%T) mode=$MODE machine=$MACHINE op_commit=$COPYFIX_OP_COMMIT"

gc() {  # LABEL PYTHONPATH: the generic op before/after, merged into $GC_JSON
  env PYTHONPATH="$2" timeout "$(left)" $PY -m copyfix.measure.generic_conversions --mode $MODE \
    --out "$GC_JSON" --label "$1" --jobs "$JOBS" --machine "$MACHINE"
}
compose_main() {  # a copy of the repo composed over FlagGems main, in /tmp/pr2main
  rm -rf /tmp/fgmain /tmp/pr2main && mkdir -p /tmp/fgmain /tmp/pr2main && main_tree
  tar --exclude=./build --exclude=./.whl --exclude=./.upstream --exclude=./.venv --exclude=./.git -cf - . | tar -xf - -C /tmp/pr2main
  (cd /tmp/pr2main && FLAGGEMS_BASE=/tmp/fgmain PYTHONPATH=harness $PY -c \
    "from pathlib import Path; from copyfix.compose import compose; compose(Path('.').resolve(), editable=False)")
}
upstream() {  # LABEL CHECKOUT: the PR test file in a copy of the checkout, before and after
  local w=/tmp/pr2up-$1 f=tests/test_copy_dtype_conversions.py
  rm -rf "$w" && mkdir -p "$w" && cp -r "$2/src" "$2/tests" "$w/" && cp $f "$w/tests/"
  [ -f "$2/pytest.ini" ] && cp "$2/pytest.ini" "$w/"
  sha256sum "$w/src/flag_gems/ops/copy.py" > $LOGS/up-$1-preimage.sha256
  for run in before after after-ref-cpu; do
    [ $run = after ] && for op in src/flag_gems/ops/copy.py src/flag_gems/ops/to.py; do cp $op "$w/$op"; done  # PR 2's op files (not $f: the test file)
    local extra="" && [ $run = after-ref-cpu ] && extra="--ref=cpu --quick"
    (cd "$w" && env -u GEMS_VENDOR PYTHONPATH="$w/src${SITE_UP:+:$SITE_UP}" timeout "$(left)" \
      $PY -m pytest -q -p no:cacheprovider $UP_PLUGIN -o addopts="" --tb=line -W ignore \
      $f $extra --junitxml=$LOGS/up-$1-$run.xml > $LOGS/up-$1-$run.log 2>&1)
    echo "    $1 $run rc=$? $(tail -n 1 $LOGS/up-$1-$run.log)"
  done
}
# the upstream runs see the checkout's flag_gems first, then the carried wheels (device) or,
# in the dry run, the harness (its plugin) and the venv
if [ "$DRY_RUN_CPU" = 1 ]; then SITE_UP=$REPO/harness; else SITE_UP=/tmp/site; fi

for step in ${STEPS:-gc-5.0.2 gc-main up-main up-5.0.2}; do
  echo "=== $step $(date +%T), $(left) s left"
  case $step in
    gc-5.0.2) gc 5.0.2 "$SITE" > $LOGS/$step.log 2>&1 ;;
    gc-main) (compose_main && cd /tmp/pr2main && gc main-2026-08-21 "$MAIN_SITE") > $LOGS/$step.log 2>&1 ;;
    up-main) upstream main "$UP_MAIN" ;;
    up-5.0.2) upstream v5.0.2 "$UP_502" ;;
  esac
  echo "=== $step rc=$? $(date +%T)"; grep -v -i "warn" $LOGS/$step.log 2>/dev/null | tail -n 4
done

$PY -m copyfix.device_records --logs $LOGS --out "$OUT/pr2_upstream_tests.json" \
  --machine "$MACHINE" --sha-key checkout_copy_py_sha256 --extra "$($PY -c '
import json, os
print(json.dumps({"op_commit": os.environ.get("COPYFIX_OP_COMMIT") or None,
                  "test_file": "tests/test_copy_dtype_conversions.py"}))')"
tar -czf "$OUT/pr2_logs.tgz" -C $LOGS .
echo "=== done $(date +%T), $SECONDS s"; ls -la "$OUT"
