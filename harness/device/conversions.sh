#!/usr/bin/env bash
# Harness: a conversion PR on the lent NVIDIA machine, over bases 5.0.2 and main: its op's
# every dtype pair before/after (copyfix.measure.generic_conversions) and its test files in
# copies of upstream's checkouts. WHICH names the PR:
#   pr2       PR 2's generic copy_ (src/flag_gems/ops/copy.py) on FlagGems' own NVIDIA backend
#             (GEMS_VENDOR=nvidia, compiled Triton, no emulation).
#             Steps: gc-5.0.2 gc-main up-main up-5.0.2
#   to_copy   _to_copy: the generic ops/to.py (PR 2) on the NVIDIA backend and the KunlunXIN
#             _kunlunxin/ops/to.py (PR 4) in the kunlunxin cuda emulation, and upstream's tests.
#             Steps: tc-5.0.2 tc-main kx-5.0.2 kx-main up-5.0.2 up-main
#
#   OUT=<dir> bash harness/device/conversions.sh WHICH                      # on the GPU box
#   DRY_RUN_CPU=1 OUT=/tmp/convout bash harness/device/conversions.sh WHICH # plumbing only, CPU
#
# Steps, in this order (budgeted against DEADLINE seconds, default 570; JOBS processes,
# default 16; the main steps mostly reuse the 5.0.2 steps' compiled kernels):
#   gc-*, tc-*, kx-*   python -m copyfix.measure.generic_conversions (--op copy_, to_copy,
#                      kunlunxin_to_copy: pre-image before, overlay after, 15 dtypes x 3 layouts)
#                      on the repo composed over the 5.0.2 wheel (harness/device/env.sh) and
#                      over main (.upstream/main/src); kx-* into the file's "kunlunxin" section
#   up-5.0.2, up-main  the PR's test files in a copy of the upstream checkout (.upstream/v5.0.2,
#                      .upstream/main: src/ and tests/), PYTHONPATH=src, the checkout's own
#                      vendor pick: "before" with the checkout's own op files (must fail),
#                      "after" with this repo's (must pass); then pr2: after again with
#                      `--ref=cpu --quick` (as upstream's tools/test-op.sh runs a test file),
#                      to_copy: upstream's own tests/test_to_copy.py after (must pass)
# Writes to $OUT: pr2: generic_conversions_h200.json, pr2_upstream_tests.json; to_copy:
# to_copy_conversions_h200.json, to_copy_upstream_tests.json (results/ keeps them as
# *_h200.json); <which>_logs.tgz.
# STEPS="..." runs some steps; a second call on a fresh machine continues an earlier call's
# files when given CONV_PREV=<its conversions JSON> and UP_PREV=<its upstream tests JSON>
# (paths inside the carried tree).
# Op commits: git where the tree has .git, else COPYFIX_*_COMMIT (see the case below).
# DRY_RUN_CPU=1: the same steps on this machine's .venv in cpu mode (Triton's interpreter,
# kunlunxin emulation: use_gems() reaches the kunlunxin op, so the upstream runs' counts are
# not the PR's; to_copy: K_PR / K_UP, the -k of the PR cases and of upstream's file, default
# to their uint8 cases, and UP_ARGS to --quick), upstream checkouts from UPSTREAM_MAIN /
# UPSTREAM_502; writes <conversions>_dryrun.json instead.
set -u
cd "$(dirname "$0")/../.."
REPO=$PWD
WHICH=${1:-}
: "${OUT:=/tmp/out}" "${DEADLINE:=570}" "${JOBS:=16}" "${DRY_RUN_CPU:=0}"
LOGS=/tmp/$WHICH-logs && rm -rf "$LOGS" && mkdir -p "$LOGS" "$OUT"
left() { local n=$((DEADLINE - SECONDS)); echo $((n > 1 ? n : 1)); }
has_git() { git rev-parse --git-dir > /dev/null 2>&1; }
case $WHICH in
  pr2)
    if [ -z "${COPYFIX_OP_COMMIT:-}" ] && has_git; then
      COPYFIX_OP_COMMIT=$(git log -1 --format=%H -- src/flag_gems/ops/copy.py)
    fi
    export COPYFIX_OP_COMMIT="${COPYFIX_OP_COMMIT:-}"
    CONV=generic_conversions UP_JSON=pr2_upstream_tests.json
    PR_OPS="src/flag_gems/ops/copy.py src/flag_gems/ops/to.py"
    PR_TESTS=tests/test_copy_dtype_conversions.py RUNS="before after after-ref-cpu"
    SHA_FILE=src/flag_gems/ops/copy.py SHA_KEY=checkout_copy_py_sha256
    DEFAULT_STEPS="gc-5.0.2 gc-main up-main up-5.0.2"
    DEV_PLUGIN="" DEV_UP_ARGS="" DEV_K_PR="" DRY_UP_ARGS="" DRY_K_PR="" DRY_K_UP="" ;;
  to_copy)
    if has_git; then
      : "${COPYFIX_TO_COPY_COMMIT:=$(git log -1 --format=%H -- src/flag_gems/ops/to.py)}"
      : "${COPYFIX_KUNLUNXIN_TO_COPY_COMMIT:=$(git log -1 --format=%H -- src/flag_gems/runtime/backend/_kunlunxin/ops/to.py)}"
    fi
    export COPYFIX_TO_COPY_COMMIT="${COPYFIX_TO_COPY_COMMIT:-}"
    export COPYFIX_KUNLUNXIN_TO_COPY_COMMIT="${COPYFIX_KUNLUNXIN_TO_COPY_COMMIT:-}"
    CONV=to_copy_conversions UP_JSON=to_copy_upstream_tests.json
    PR_OPS="src/flag_gems/ops/copy.py src/flag_gems/ops/to.py src/flag_gems/runtime/backend/_kunlunxin/ops/to.py"
    PR_TESTS="tests/test_copy_dtype_conversions.py tests/test_to_copy_conversions.py"
    RUNS="before after upstream-after"
    SHA_FILE=src/flag_gems/ops/to.py SHA_KEY=checkout_to_py_sha256
    DEFAULT_STEPS="tc-5.0.2 tc-main kx-5.0.2 kx-main up-5.0.2 up-main"
    # (copyfix.upstream.xdist: v5.0.2's conftest under xdist, see that module)
    DEV_PLUGIN="-p copyfix.upstream.xdist" DEV_UP_ARGS="-n 8" DEV_K_PR="to_copy"
    DRY_UP_ARGS="--quick" DRY_K_PR="to_copy and uint8" DRY_K_UP="uint8" ;;
  *) echo "usage: OUT=<dir> bash harness/device/conversions.sh pr2|to_copy"; exit 2 ;;
esac
export PYTHONUNBUFFERED=1

if [ "$DRY_RUN_CPU" = 1 ]; then
  PY=$REPO/.venv/bin/python MODE=cpu CONV_JSON=$OUT/${CONV}_dryrun.json
  UP_MAIN=${UPSTREAM_MAIN:-/tmp/fg} UP_502=${UPSTREAM_502:-/tmp/fg502}
  SITE=$REPO/build/composed:$REPO/harness  # the editable install's composition (5.0.2)
  MAIN_SITE=/tmp/conv-main/build/composed:/tmp/conv-main/harness SITE_UP=$REPO/harness
  UP_PLUGIN="-p copyfix.upstream.plugin" && export COPYFIX_EMULATION=cpu
  : "${UP_ARGS=$DRY_UP_ARGS}" "${K_PR=$DRY_K_PR}" "${K_UP=$DRY_K_UP}"
else
  . harness/device/env.sh > "$LOGS/env.log" 2>&1  # /tmp/site wheels, build/composed over 5.0.2
  unset COPYFIX_EMULATION
  PY=python3 MODE=cuda CONV_JSON=$OUT/${CONV}_h200.json
  UP_MAIN=.upstream/main UP_502=.upstream/v5.0.2  # (.upstream/*.tgz, unpacked by env.sh)
  SITE=/tmp/site:$REPO/build/composed:$REPO/harness SITE_UP=/tmp/site:$REPO/harness
  MAIN_SITE=/tmp/site:/tmp/conv-main/build/composed:/tmp/conv-main/harness
  UP_PLUGIN=$DEV_PLUGIN
  : "${UP_ARGS=$DEV_UP_ARGS}" "${K_PR=$DEV_K_PR}" "${K_UP=}"
fi
[ -n "${CONV_PREV:-}" ] && cp "$CONV_PREV" "$CONV_JSON"
[ -n "${UP_PREV:-}" ] && cp "$UP_PREV" "$OUT/$UP_JSON"
MACHINE=$($PY -c "import torch, os; print((torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'cpu') + f', {os.cpu_count()} CPU cores')")
echo "=== conversions $WHICH $(date +%T) mode=$MODE machine=$MACHINE"

conv() {  # OP LABEL PYTHONPATH [--section S]: before/after of one op, merged into $CONV_JSON
  env PYTHONPATH="$3" timeout "$(left)" $PY -m copyfix.measure.generic_conversions --mode $MODE \
    --op "$1" --out "$CONV_JSON" --label "$2" --jobs "$JOBS" --machine "$MACHINE" "${@:4}"
}
compose_main() {  # a copy of the repo composed over FlagGems main, in /tmp/conv-main
  [ -d /tmp/conv-main/build/composed ] && return 0
  rm -rf /tmp/conv-fgmain /tmp/conv-main && mkdir -p /tmp/conv-fgmain /tmp/conv-main
  cp -r "$UP_MAIN/src" /tmp/conv-fgmain/
  tar --exclude=./build --exclude=./.whl --exclude=./.upstream --exclude=./.venv --exclude=./.git -cf - . | tar -xf - -C /tmp/conv-main
  (cd /tmp/conv-main && FLAGGEMS_BASE=/tmp/conv-fgmain PYTHONPATH=harness $PY -m copyfix.compose --no-editable)
}
on_main() {  # OP [--section S]: conv over main
  (compose_main && cd /tmp/conv-main && conv "$1" main-2026-08-21 "$MAIN_SITE" "${@:2}")
}
upstream() {  # LABEL CHECKOUT: the PR's test files before and after (and their extra run)
  local w=/tmp/conv-up-$1
  rm -rf "$w" && mkdir -p "$w" && cp -r "$2/src" "$2/tests" "$w/" && cp $PR_TESTS "$w/tests/"
  [ -f "$2/pytest.ini" ] && cp "$2/pytest.ini" "$w/"
  sha256sum "$w/$SHA_FILE" > "$LOGS/up-$1-preimage.sha256"
  for run in $RUNS; do
    local files=$PR_TESTS k=$K_PR extra=$UP_ARGS
    [ $run = after ] && for f in $PR_OPS; do cp "$f" "$w/$f"; done  # the PR's op files
    [ $run = after-ref-cpu ] && extra="$UP_ARGS --ref=cpu --quick"
    [ $run = upstream-after ] && files=tests/test_to_copy.py k=$K_UP
    (cd "$w" && env -u GEMS_VENDOR PYTHONPATH="$w/src:$SITE_UP" timeout "$(left)" \
      $PY -m pytest -q -p no:cacheprovider $UP_PLUGIN -o addopts="" --tb=line -W ignore \
      $files ${k:+-k "$k"} $extra --junitxml="$LOGS/up-$1-$run.xml" > "$LOGS/up-$1-$run.log" 2>&1)
    echo "    $1 $run rc=$? $(tail -n 1 "$LOGS/up-$1-$run.log")"
  done
}

for step in ${STEPS:-$DEFAULT_STEPS}; do
  echo "=== $step $(date +%T), $(left) s left"
  case $step in
    gc-5.0.2) conv copy_ 5.0.2 "$SITE" > "$LOGS/$step.log" 2>&1 ;;
    gc-main) on_main copy_ > "$LOGS/$step.log" 2>&1 ;;
    tc-5.0.2) conv to_copy 5.0.2 "$SITE" > "$LOGS/$step.log" 2>&1 ;;
    tc-main) on_main to_copy > "$LOGS/$step.log" 2>&1 ;;
    kx-5.0.2) conv kunlunxin_to_copy 5.0.2 "$SITE" --section kunlunxin > "$LOGS/$step.log" 2>&1 ;;
    kx-main) on_main kunlunxin_to_copy --section kunlunxin > "$LOGS/$step.log" 2>&1 ;;
    up-5.0.2) upstream v5.0.2 "$UP_502" ;;
    up-main) upstream main "$UP_MAIN" ;;
    *) echo "unknown step $step" ;;
  esac
  echo "=== $step rc=$? $(date +%T)"; grep -v -i "warn" "$LOGS/$step.log" 2>/dev/null | tail -n 4
done

$PY -m copyfix.device_records --logs "$LOGS" --out "$OUT/$UP_JSON" \
  --machine "$MACHINE" --sha-key $SHA_KEY --extra "$(WHICH=$WHICH $PY -c '
import json, os
env = os.environ.get
if env("WHICH") == "pr2":
    extra = {"op_commit": env("COPYFIX_OP_COMMIT") or None,
             "test_file": "tests/test_copy_dtype_conversions.py"}
else:
    extra = {
        "op_commits": {"ops/to.py": env("COPYFIX_TO_COPY_COMMIT") or None,
                       "_kunlunxin/ops/to.py": env("COPYFIX_KUNLUNXIN_TO_COPY_COMMIT") or None},
        "runs": {"before": "the checkout files; PR test cases of _to_copy (must fail)",
                 "after": "PR 2 and PR 4 files copied in; the same cases (must pass)",
                 "upstream-after": "upstream tests/test_to_copy.py with those files (must pass)"}}
print(json.dumps(extra))')"
[ -f "$CONV_JSON" ] && $PY -m copyfix.measure.generic_conversions --summary "$CONV_JSON"
tar -czf "$OUT/${WHICH}_logs.tgz" -C "$LOGS" .
echo "=== done $(date +%T), $SECONDS s"; ls -la "$OUT"
