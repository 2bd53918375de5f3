#!/usr/bin/env bash
# Harness (PR 3): the launch cache on the lent NVIDIA machine.
#   OUT=<dir> bash harness/device/launch_cache.sh STEP...
# Steps:
#   cost       python -m copyfix.measure.launch_cost nvidia, then kunlunxin-emulated (cuda
#              emulation), into $OUT/launch_cache_h200.json (one run, one machine start)
#   misses     python -m copyfix.measure.miss_cost (calls that do not hit, cache on vs off,
#              stock NVIDIA backend) into $OUT/launch_cache_misses_h200.json, and its
#              `misses` section into $OUT/launch_cache_h200.json (run it after cost)
#   up-5.0.2, up-main
#              upstream's own tests that reach pointwise_dynamic (UP_TESTS, those present in
#              the base) on a copy of .upstream/<base> with PR 3 applied (make pr's files),
#              stock NVIDIA backend, `pytest -n 16 --quick`: counts in $OUT/launch_cache_upstream.json
#   suite      this repo's suite in cuda mode (kunlunxin emulation), 5.0.2 base
# LC_ARGS and MC_ARGS: extra arguments of launch_cost and miss_cost. LC_ARGS defaults to the
# recorded protocol, --processes 5 --rounds 19 (5 fresh worker processes per backend).
# DEADLINE (seconds, default 560) budgets all steps.
set -u
cd "$(dirname "$0")/../.."
REPO=$PWD
: "${OUT:=/tmp/out}" "${DEADLINE:=560}" "${LC_ARGS=--processes 5 --rounds 19}"
LOGS=/tmp/lclogs && rm -rf $LOGS && mkdir -p $LOGS "$OUT"
left() { local n=$((DEADLINE - SECONDS)); echo $((n > 1 ? n : 1)); }
export COPYFIX_OP_COMMIT="${COPYFIX_OP_COMMIT:-}" PYTHONUNBUFFERED=1
. harness/device/env.sh > $LOGS/env.log 2>&1
unset COPYFIX_EMULATION
UP_TESTS="test_pointwise_dynamic.py test_pointwise_type_promotion.py test_copy.py test_to_copy.py
  test_sigmoid.py test_relu.py test_abs.py test_add.py test_mul.py test_where_self_out.py
  test_where_scalar_other.py test_where_scalar_self.py test_where_self.py test_launch_cache.py"
for step in "$@"; do
  echo "=== $step $(date +%T), $(left) s left"
  log=$LOGS/$step.log
  case $step in
    cost)
      timeout "$(left)" python3 -m copyfix.measure.launch_cost nvidia --out "$OUT/launch_cache_h200.json" ${LC_ARGS:-} > "$log" 2>&1
      COPYFIX_EMULATION=cuda timeout "$(left)" python3 -m copyfix.measure.launch_cost kunlunxin-emulated \
        --out "$OUT/launch_cache_h200.json" ${LC_ARGS:-} >> "$log" 2>&1 ;;
    misses)
      timeout "$(left)" python3 -m copyfix.measure.miss_cost --out "$OUT/launch_cache_misses_h200.json" \
        --section-into "$OUT/launch_cache_h200.json" ${MC_ARGS:-} > "$log" 2>&1 ;;
    up-*)
      base=${step#up-}; src=.upstream/$base; [ "$base" = 5.0.2 ] && src=.upstream/v5.0.2
      tree=/tmp/up-$base && rm -rf $tree && cp -r $src $tree
      PYTHONPATH=harness python3 -m copyfix.export apply-pr launch-cache $tree >> "$log" 2>&1
      files=$(cd $tree/tests && ls $UP_TESTS 2>/dev/null | tr '\n' ' ')
      (cd $tree && GEMS_VENDOR=nvidia PYTHONPATH=/tmp/site:$tree/src:$REPO/harness timeout "$(left)" \
        python3 -m pytest -q -n 16 -p no:cacheprovider -p copyfix.upstream.xdist --quick $(for f in $files; do echo tests/$f; done) \
        > "$log.pytest" 2>&1; echo "rc=$?" >> "$log.pytest")
      key=v$base; [ "$base" = main ] && key=main-2026-08-21
      python3 -m copyfix.records pytest-summary "$OUT/launch_cache_upstream.json" "$key" "$log.pytest" --files $files
      ;;
    suite) COPYFIX_EMULATION=cuda timeout "$(left)" python3 -m pytest -q -n 16 -p no:cacheprovider -rfE ${SUITE_ARGS:-} > "$log" 2>&1; tail -3 "$log" ;;
  esac
  tail -2 "$log"
done
tar -czf "$OUT/launch_cache_logs.tgz" -C $LOGS .
