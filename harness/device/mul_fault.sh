#!/usr/bin/env bash
# Probe driver (see mul_fault.py), stock flag-gems 5.0.2, GEMS_VENDOR=nvidia: each case
# in its own process (a fault ends the CUDA context). The first round showed the
# decode faulting with block pointers on and off, surfacing at where_inner rank 4, and
# the lone mul unequal to torch's: this round names the faulting launch.
set -u
cd "$(dirname "$0")/../.."
: "${OUT:=/tmp/out}" "${MF_DEADLINE:=330}"
mkdir -p "$OUT"; L=$OUT/mul_fault.log; : > "$L"
P=harness/device/mul_fault.py
run() {  # LABEL TIMEOUT ARGS...
  [ $SECONDS -gt "$MF_DEADLINE" ] && { echo "SKIP $1 (deadline)" >> "$L"; return; }
  echo "=== $1 $(date +%T)" >> "$L"
  env PYTHONPATH=/tmp/site:/tmp/fgbase:$PWD/harness FLAGGEMS_CACHE_DIR=/tmp/fgc-stock \
    GEMS_VENDOR=nvidia timeout "$2" "${@:3}" >> "$L" 2>&1
  echo "rc=$?" >> "$L"
}
run "iso bptr=1 2x256" 60 python3 $P iso 1 2 256 20
run "table bptr=1" 60 python3 $P table 1
run "table bptr=0" 60 python3 $P table 0
CUDA_LAUNCH_BLOCKING=1 run "decode blocking bptr=1" 90 python3 $P decode 1 48
run "decode exclude where" 90 python3 $P decode 1 48 where_self,where_self_out,where_scalar_self,where_scalar_other
run "decode exclude mul" 90 python3 $P decode 1 48 mul
PYTORCH_NO_CUDA_MEMORY_CACHING=1 run "sanitizer decode bptr=1" 130 compute-sanitizer --tool memcheck --print-limit 6 python3 $P decode 1 8
grep -E "^(===|RESULT|rc=|SKIP|========= +(Invalid|at |by thread|Address|Program hit|Saved host backtrace))" "$L" | cut -c1-600 | head -90
