#!/usr/bin/env bash
# Probe driver (see mul_fault.py): the mul fault on stock flag-gems 5.0.2 and on the
# composition, block pointers on and off, each case in its own process (a fault ends
# the CUDA context); then compute-sanitizer memcheck on the faulting case.
set -u
cd "$(dirname "$0")/../.."
: "${OUT:=/tmp/out}" "${MF_ITERS:=3000}" "${MF_TOKENS:=48}" "${MF_DEADLINE:=200}"
mkdir -p "$OUT"; L=$OUT/mul_fault.log; : > "$L"
P=harness/device/mul_fault.py
run() {  # LABEL PYTHONPATH ARGS...
  [ $SECONDS -gt "$MF_DEADLINE" ] && { echo "SKIP $1 (deadline)" >> "$L"; return; }
  echo "=== $1 $(date +%T)" >> "$L"
  env PYTHONPATH="$2" FLAGGEMS_CACHE_DIR=/tmp/fgc-${1%% *} GEMS_VENDOR=nvidia timeout 120 "${@:3}" >> "$L" 2>&1
  echo "rc=$?" >> "$L"
}
STOCK=/tmp/site:/tmp/fgbase:$PWD/harness COMP=/tmp/site:$PWD/build/composed:$PWD/harness
for b in 1 0; do
  run "stock iso bptr=$b 2x256" $STOCK python3 $P iso $b 2 256 "$MF_ITERS"
  run "stock iso bptr=$b 4x1024" $STOCK python3 $P iso $b 4 1024 "$MF_ITERS"
done
for rep in 1 2; do for b in 1 0; do
  run "stock decode bptr=$b rep $rep" $STOCK python3 $P decode $b "$MF_TOKENS"
done; done
run "composed decode bptr=1" $COMP python3 $P decode 1 "$MF_TOKENS"
run "composed decode bptr=0" $COMP python3 $P decode 0 "$MF_TOKENS"
export PYTORCH_NO_CUDA_MEMORY_CACHING=1
run "sanitizer stock iso bptr=1 2x256" $STOCK compute-sanitizer --tool memcheck --print-limit 8 python3 $P iso 1 2 256 30
run "sanitizer stock decode bptr=1" $STOCK compute-sanitizer --tool memcheck --print-limit 8 python3 $P decode 1 6
run "sanitizer stock decode bptr=0" $STOCK compute-sanitizer --tool memcheck --print-limit 8 python3 $P decode 0 6
grep -E "^(===|RESULT|rc=|SKIP|=========  *(Invalid|at|by thread|Address|Saved host))" "$L" | cut -c1-400
