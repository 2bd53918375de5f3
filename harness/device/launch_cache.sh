#!/usr/bin/env bash
# Harness (PR 3): the launch cache on the lent NVIDIA machine.
#   OUT=<dir> bash harness/device/launch_cache.sh STEP...
# Steps:
#   cost       python -m copyfix.measure.launch_cost nvidia, then kunlunxin-emulated (cuda
#              emulation), into $OUT/launch_cache_h200.json (one run, one machine start)
#   misses     python -m copyfix.measure.miss_cost (calls that do not hit, cache on vs off,
#              stock NVIDIA backend) into $OUT/launch_cache_misses_h200.json, and its
#              `misses` section into $OUT/launch_cache_h200.json (run it after cost)
#   suite      this repo's suite in cuda mode (kunlunxin emulation), 5.0.2 base
# LC_ARGS and MC_ARGS: extra arguments of launch_cost and miss_cost. LC_ARGS defaults to the
# recorded protocol, --processes 5 --rounds 19 (5 fresh worker processes per backend).
# DEADLINE (seconds, default 560) budgets all steps.
set -u
cd "$(dirname "$0")/../.."
: "${OUT:=/tmp/out}" "${DEADLINE:=560}" "${LC_ARGS=--processes 5 --rounds 19}"
LOGS=/tmp/lclogs && rm -rf $LOGS && mkdir -p $LOGS "$OUT"
left() { local n=$((DEADLINE - SECONDS)); echo $((n > 1 ? n : 1)); }
export COPYFIX_OP_COMMIT="${COPYFIX_OP_COMMIT:-}" PYTHONUNBUFFERED=1
. harness/device/env.sh > $LOGS/env.log 2>&1
unset COPYFIX_EMULATION
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
    suite) COPYFIX_EMULATION=cuda timeout "$(left)" python3 -m pytest -q -n 16 -p no:cacheprovider -rfE ${SUITE_ARGS:-} > "$log" 2>&1; tail -3 "$log" ;;
  esac
  tail -2 "$log"
done
tar -czf "$OUT/launch_cache_logs.tgz" -C $LOGS .
