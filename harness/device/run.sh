#!/usr/bin/env bash
# Harness: the GPU runs behind the recorded figures, on the lent NVIDIA machine (cuda mode).
#   bash harness/device/run.sh STEP...
# Steps: probe suite bench main-suite upstream main-upstream
# upstream-ci main-upstream-ci. (Host cost per call: harness/device/launch_cache.sh cost.)
# JSON results land in $OUT, the logs in $OUT/logs.tgz (the device tool brings back at most
# 8 files). Upstream FlagGems travels in .upstream/ (git-ignored; made from the fetched
# mirror, never committed):
#   G=<mirror git dir>; mkdir -p .upstream
#   git --git-dir=$G archive --prefix=main/ HEAD src tests benchmark tools pytest.ini | gzip -1 > .upstream/main.tgz
#   git --git-dir=$G archive --prefix=v5.0.2/ v5.0.2 src tests benchmark tools pytest.ini | gzip -1 > .upstream/v5.0.2.tgz
# and is unpacked here into .upstream/main and .upstream/v5.0.2.
# BENCH_ARGS, UPSTREAM_LIMIT and DEADLINE (seconds for all steps) budget the run.
set -u
cd "$(dirname "$0")/../.."
: "${OUT:=/tmp/out}" "${DEADLINE:=570}" "${UPSTREAM_LIMIT:=80}" "${BENCH_ARGS:=}"
LOGS=/tmp/devlogs && mkdir -p $LOGS
export COPYFIX_OP_COMMIT="${COPYFIX_OP_COMMIT:-}"
for t in .upstream/*.tgz; do [ -e "$t" ] && tar -xzf "$t" -C .upstream; done
. harness/device/env.sh > $LOGS/env.log 2>&1
main_env() {  # a second copy of the repo, composed over FlagGems main
  if [ ! -d /tmp/rmain ]; then
    mkdir -p /tmp/fgmain && cp -r .upstream/main/src /tmp/fgmain/
    mkdir /tmp/rmain && tar --exclude=./build --exclude=./.whl --exclude=./.upstream -cf - . | tar -xf - -C /tmp/rmain
    (cd /tmp/rmain && FLAGGEMS_BASE=/tmp/fgmain PYTHONPATH=harness python3 -m copyfix.compose --no-editable)
  fi
  cd /tmp/rmain && export PYTHONPATH=/tmp/site:/tmp/rmain/build/composed:/tmp/rmain/harness
}
left() { local n=$((DEADLINE - SECONDS)); echo $((n > 1 ? n : 1)); }  # (timeout 0 = none)
upstream_check() {  # CHECKOUT LABEL RESULT-FILE: upstream's tests, budgeted, cuda mode
  timeout "$(left)" python3 -m copyfix.upstream.check check "$1" --label "$2" --mode cuda -n 16 \
    --limit "$UPSTREAM_LIMIT" --machine "nvidia-h200: 1 H200, 16 CPU cores" \
    --results "$OUT/$3" --no-docs
}
PYTEST="python3 -m pytest -q -n 16 -p no:cacheprovider -rfE"
for step in "$@"; do
  echo "=== $step $(date +%T), $(left) s left"
  log=$LOGS/$step.log
  case $step in
    probe) timeout "$(left)" python3 -m copyfix.measure.probe_conversions --out "$OUT/conversions_h200.json" > "$log" 2>&1 ;;
    suite) timeout "$(left)" $PYTEST > "$log" 2>&1 ;;
    bench) timeout "$(left)" python3 -m copyfix.bench $BENCH_ARGS > "$log" 2>&1; cp results/copy_perf_accuracy_h200.json "$OUT/" ;;
    main-suite) (main_env && timeout "$(left)" $PYTEST > "$log" 2>&1) ;;
    upstream) upstream_check .upstream/v5.0.2 v5.0.2 upstream_check_cuda.json > "$log" 2>&1 ;;
    main-upstream) upstream_check .upstream/main main-2026-08-21 upstream_check_cuda_main.json > "$log" 2>&1 ;;
    upstream-ci|main-upstream-ci)  # upstream's tools/test-op.sh per PR file, device model on
      # (the committed upstream_ci_cuda.json is the starting point: bases not run are kept;
      # coverage, which test-op.sh runs, is a wheel in .whl/ installed by env.sh into /tmp/site:
      # pip download coverage==7.10.7 --no-deps --only-binary=:all: --python-version 3.12
      # --platform manylinux_2_28_x86_64 -d .whl; --budget ends the runs in time to write)
      ck=.upstream/v5.0.2; lb=v5.0.2; [ $step = main-upstream-ci ] && ck=.upstream/main lb=main-2026-08-21
      [ -f "$OUT/upstream_ci_cuda.json" ] || cp results/upstream_ci_cuda.json "$OUT/" 2>/dev/null
      UPSTREAM_CI_PATH_PREPEND=/tmp/site/bin timeout "$(left)" python3 -m copyfix.upstream.ci "$ck" \
        --mode cuda --label $lb --machine "nvidia-h200: 1 H200, 16 CPU cores" --no-docs \
        --results "$OUT/upstream_ci_cuda.json" --budget $(( $(left) - 20 )) --log-dir "$LOGS/$step" \
        ${UPSTREAM_CI_ARGS:-} > "$log" 2>&1 ;;
  esac
  echo "=== $step rc=$? $(date +%T)"; grep -v -i "warn" "$log" | tail -n 4
done
tar -czf "$OUT/logs.tgz" -C $LOGS .
