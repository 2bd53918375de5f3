#!/usr/bin/env bash
# Harness: the GPU runs behind the recorded figures, on the lent NVIDIA machine (cuda mode).
#   bash harness/device_run.sh STEP...      (outputs under $OUT, logs named after the step)
# Steps: probe suite host bench main-suite main-host. The FlagGems main checkout travels
# as .upstream/fgmain-src.tar.gz (git-ignored; made from the fetched mirror, never committed).
set -u
cd "$(dirname "$0")/.."
: "${OUT:=/tmp/out}"
export COPYFIX_OP_COMMIT="${COPYFIX_OP_COMMIT:-}"
. harness/device_env.sh
main_env() {  # a second copy of the repo, composed over FlagGems main
  if [ ! -d /tmp/rmain ]; then
    mkdir -p /tmp/fgmain && tar -xzf .upstream/fgmain-src.tar.gz -C /tmp/fgmain
    mkdir /tmp/rmain && tar --exclude=./build --exclude=./.whl -cf - . | tar -xf - -C /tmp/rmain
    (cd /tmp/rmain && FLAGGEMS_BASE=/tmp/fgmain PYTHONPATH=harness python3 -c \
      "from pathlib import Path; from copyfix.compose import compose; compose(Path('.').resolve(), editable=False)")
  fi
  cd /tmp/rmain && export PYTHONPATH=/tmp/site:/tmp/rmain/build/composed:/tmp/rmain/harness
}
for step in "$@"; do
  echo "=== $step $(date +%T)"
  case $step in
    probe) timeout 150 python3 -m copyfix.probe_conversions --out "$OUT/conversions_h200.json" > "$OUT/probe.log" 2>&1 ;;
    suite) timeout 300 python3 -m pytest -q -n 16 -p no:cacheprovider -rfE > "$OUT/suite.log" 2>&1 ;;
    host) timeout 120 python3 -m copyfix.bench host > "$OUT/host.log" 2>&1; cp results/copy_host_overhead_h200.json "$OUT/" ;;
    bench) timeout 400 python3 -m copyfix.bench > "$OUT/bench.log" 2>&1; cp results/copy_perf_accuracy_h200.json "$OUT/" ;;
    main-suite) (main_env && timeout 300 python3 -m pytest -q -n 16 -p no:cacheprovider -rfE > "$OUT/main-suite.log" 2>&1) ;;
    main-host) (main_env && timeout 120 python3 -m copyfix.bench host > "$OUT/main-host.log" 2>&1; cp results/copy_host_overhead_h200_*.json "$OUT/") ;;
  esac
  echo "=== $step rc=$? $(date +%T)"; tail -n 4 "$OUT/$step.log" 2>/dev/null
done
