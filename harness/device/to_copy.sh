#!/usr/bin/env bash
# Harness (issue 27): _to_copy's conversions on the lent NVIDIA machine, over bases 5.0.2
# and main: the generic op on FlagGems' own NVIDIA backend (GEMS_VENDOR=nvidia, compiled
# Triton, no emulation), the KunlunXIN op in the cuda emulation, and upstream's tests.
#
#   OUT=<dir> bash harness/device/to_copy.sh                          # on the GPU box
#   DRY_RUN_CPU=1 OUT=/tmp/tc27out bash harness/device/to_copy.sh     # plumbing only, CPU
#
# Steps, in this order (budgeted against DEADLINE seconds, default 570; JOBS processes,
# default 16; the main steps mostly reuse the 5.0.2 steps' compiled kernels):
#   tc-5.0.2, tc-main  python -m copyfix.measure.generic_conversions --op to_copy (the generic
#                      ops/to.py: pre-image before, overlay after, 15 dtypes x 3 layouts)
#                      on the repo composed over the 5.0.2 wheel (harness/device/env.sh) and over
#                      main (.upstream/main/src)
#   kx-5.0.2, kx-main  the same for --op kunlunxin_to_copy in the kunlunxin cuda
#                      emulation, into the file's "kunlunxin" section
#   up-5.0.2, up-main  in a copy of the upstream checkout (.upstream/v5.0.2, .upstream/main:
#                      src/ and tests/), PYTHONPATH=src, the checkout's own vendor pick:
#                      "before" (the checkout's files) runs the PR test cases of _to_copy
#                      (tests/test_copy_dtype_conversions.py -k to_copy and
#                      tests/test_to_copy_conversions.py), which must fail; "after" (PR 2's
#                      and PR 4's files copied in) runs them again and upstream's own
#                      tests/test_to_copy.py, which must pass
# Writes to $OUT: to_copy_conversions_h200.json (both bases; "kunlunxin": the emulation's),
# to_copy_upstream_tests.json (counts per checkout and run), to_copy_logs.tgz.
# STEPS="..." runs some steps; a second call on a fresh machine continues an earlier call's
# files when given TC_PREV=<its to_copy_conversions_h200.json> and
# UP_PREV=<its to_copy_upstream_tests.json> (paths inside the carried tree).
# Op commits (the JSON's op_commit): from git where the tree has .git, else from
# COPYFIX_TO_COPY_COMMIT / COPYFIX_KUNLUNXIN_TO_COPY_COMMIT.
# DRY_RUN_CPU=1: the same steps on this machine's .venv in cpu mode (Triton's interpreter,
# kunlunxin emulation: use_gems() reaches the kunlunxin op; K_PR / K_UP, the -k of the
# PR cases and of upstream's file, default to their uint8 cases, and UP_ARGS to --quick),
# upstream checkouts from UPSTREAM_MAIN /
# UPSTREAM_502; writes to_copy_conversions_dryrun.json instead.
set -u
cd "$(dirname "$0")/../.."
REPO=$PWD
: "${OUT:=/tmp/out}" "${DEADLINE:=570}" "${JOBS:=16}" "${DRY_RUN_CPU:=0}"
LOGS=/tmp/tclogs27 && rm -rf $LOGS && mkdir -p $LOGS "$OUT"
left() { local n=$((DEADLINE - SECONDS)); echo $((n > 1 ? n : 1)); }
if git rev-parse --git-dir > /dev/null 2>&1; then
  : "${COPYFIX_TO_COPY_COMMIT:=$(git log -1 --format=%H -- src/flag_gems/ops/to.py)}"
  : "${COPYFIX_KUNLUNXIN_TO_COPY_COMMIT:=$(git log -1 --format=%H -- src/flag_gems/runtime/backend/_kunlunxin/ops/to.py)}"
fi
export COPYFIX_TO_COPY_COMMIT="${COPYFIX_TO_COPY_COMMIT:-}" PYTHONUNBUFFERED=1
export COPYFIX_KUNLUNXIN_TO_COPY_COMMIT="${COPYFIX_KUNLUNXIN_TO_COPY_COMMIT:-}"
PR_OPS="src/flag_gems/ops/copy.py src/flag_gems/ops/to.py src/flag_gems/runtime/backend/_kunlunxin/ops/to.py"
PR_TESTS="tests/test_copy_dtype_conversions.py tests/test_to_copy_conversions.py"

if [ "$DRY_RUN_CPU" = 1 ]; then
  PY=$REPO/.venv/bin/python MODE=cpu TC_JSON=$OUT/to_copy_conversions_dryrun.json
  UP_MAIN=${UPSTREAM_MAIN:-/tmp/fg27} UP_502=${UPSTREAM_502:-/tmp/fg27-502}
  SITE=$REPO/build/composed:$REPO/harness  # the editable install's composition (5.0.2)
  MAIN_SITE=/tmp/tc27main/build/composed:/tmp/tc27main/harness SITE_UP=$REPO/harness
  UP_PLUGIN="-p copyfix.upstream.plugin" && export COPYFIX_EMULATION=cpu
  : "${UP_ARGS:=--quick}" "${K_PR:=to_copy and uint8}" "${K_UP:=uint8}"
else
  . harness/device/env.sh > $LOGS/env.log 2>&1  # /tmp/site wheels, build/composed over 5.0.2
  unset COPYFIX_EMULATION
  PY=python3 MODE=cuda TC_JSON=$OUT/to_copy_conversions_h200.json
  UP_MAIN=.upstream/main UP_502=.upstream/v5.0.2
  # (copyfix.upstream.xdist: v5.0.2's conftest under xdist, see that module)
  SITE=/tmp/site:$REPO/build/composed:$REPO/harness UP_PLUGIN="-p copyfix.upstream.xdist" SITE_UP=/tmp/site:$REPO/harness
  MAIN_SITE=/tmp/site:/tmp/tc27main/build/composed:/tmp/tc27main/harness
  : "${UP_ARGS:=-n 8}" "${K_PR:=to_copy}" "${K_UP:=}"
fi
[ -n "${TC_PREV:-}" ] && cp "$TC_PREV" "$TC_JSON"
[ -n "${UP_PREV:-}" ] && cp "$UP_PREV" "$OUT/to_copy_upstream_tests.json"
MACHINE=$($PY -c "import torch, os; print((torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'cpu') + f', {os.cpu_count()} CPU cores')")
echo "=== device_to_copy $(date +%T) mode=$MODE machine=$MACHINE to.py=$COPYFIX_TO_COPY_COMMIT kunlunxin to.py=$COPYFIX_KUNLUNXIN_TO_COPY_COMMIT"

tc() {  # OP LABEL PYTHONPATH [--section S]: before/after of one op, merged into $TC_JSON
  env PYTHONPATH="$3" timeout "$(left)" $PY -m copyfix.measure.generic_conversions --mode $MODE \
    --op "$1" --out "$TC_JSON" --label "$2" --jobs "$JOBS" --machine "$MACHINE" "${@:4}"
}
compose_main() {  # a copy of the repo composed over FlagGems main, in /tmp/tc27main
  [ -d /tmp/tc27main/build/composed ] && return 0
  rm -rf /tmp/tc27fgmain /tmp/tc27main && mkdir -p /tmp/tc27fgmain /tmp/tc27main
  cp -r "$UP_MAIN/src" /tmp/tc27fgmain/
  tar --exclude=./build --exclude=./.whl --exclude=./.upstream --exclude=./.venv --exclude=./.git -cf - . | tar -xf - -C /tmp/tc27main
  (cd /tmp/tc27main && FLAGGEMS_BASE=/tmp/tc27fgmain PYTHONPATH=harness $PY -c \
    "from pathlib import Path; from copyfix.compose import compose; compose(Path('.').resolve(), editable=False)")
}
upstream() {  # LABEL CHECKOUT: the PR test cases before and after, upstream's file after
  local w=/tmp/tc27up-$1
  rm -rf "$w" && mkdir -p "$w" && cp -r "$2/src" "$2/tests" "$w/" && cp $PR_TESTS "$w/tests/"
  [ -f "$2/pytest.ini" ] && cp "$2/pytest.ini" "$w/"
  sha256sum "$w/src/flag_gems/ops/to.py" > $LOGS/up-$1-preimage.sha256
  for run in before after upstream-after; do
    local files=$PR_TESTS k=$K_PR  # (PR 2's to_copy tests, and PR 4's whole file)
    [ $run = after ] && for f in $PR_OPS; do cp "$f" "$w/$f"; done
    [ $run = upstream-after ] && files=tests/test_to_copy.py k=$K_UP
    (cd "$w" && env -u GEMS_VENDOR PYTHONPATH="$w/src:$SITE_UP" timeout "$(left)" \
      $PY -m pytest -q -p no:cacheprovider $UP_PLUGIN -o addopts="" --tb=line -W ignore \
      $files ${k:+-k "$k"} $UP_ARGS --junitxml=$LOGS/up-$1-$run.xml > $LOGS/up-$1-$run.log 2>&1)
    echo "    $1 $run rc=$? $(tail -n 1 $LOGS/up-$1-$run.log)"
  done
}

for step in ${STEPS:-tc-5.0.2 tc-main kx-5.0.2 kx-main up-5.0.2 up-main}; do
  echo "=== $step $(date +%T), $(left) s left"
  case $step in
    tc-5.0.2) tc to_copy 5.0.2 "$SITE" > $LOGS/$step.log 2>&1 ;;
    tc-main) (compose_main && cd /tmp/tc27main && tc to_copy main-2026-08-21 "$MAIN_SITE") > $LOGS/$step.log 2>&1 ;;
    kx-5.0.2) tc kunlunxin_to_copy 5.0.2 "$SITE" --section kunlunxin > $LOGS/$step.log 2>&1 ;;
    kx-main) (compose_main && cd /tmp/tc27main && tc kunlunxin_to_copy main-2026-08-21 "$MAIN_SITE" --section kunlunxin) > $LOGS/$step.log 2>&1 ;;
    up-5.0.2) upstream v5.0.2 "$UP_502" ;;
    up-main) upstream main "$UP_MAIN" ;;
  esac
  echo "=== $step rc=$? $(date +%T)"; grep -v -i "warn" $LOGS/$step.log 2>/dev/null | tail -n 3
done

$PY -m copyfix.device_records --logs $LOGS --out "$OUT/to_copy_upstream_tests.json" \
  --machine "$MACHINE" --sha-key checkout_to_py_sha256 --extra "$($PY -c '
import json, os
print(json.dumps({
    "op_commits": {"ops/to.py": os.environ.get("COPYFIX_TO_COPY_COMMIT") or None,
                   "_kunlunxin/ops/to.py": os.environ.get("COPYFIX_KUNLUNXIN_TO_COPY_COMMIT") or None},
    "runs": {"before": "the checkout files; PR test cases of _to_copy (must fail)",
             "after": "PR 2 and PR 4 files copied in; the same cases (must pass)",
             "upstream-after": "upstream tests/test_to_copy.py with those files (must pass)"}}))')"
$PY -m copyfix.measure.generic_conversions --summary "$TC_JSON"
tar -czf "$OUT/to_copy_logs.tgz" -C $LOGS .
echo "=== done $(date +%T), $SECONDS s"; ls -la "$OUT"
