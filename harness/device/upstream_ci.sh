#!/usr/bin/env bash
# Harness: `make upstream-ci` in cuda mode on the lent NVIDIA machine (no network), for
# FlagGems main of 2026-08-21 and v5.0.2: upstream's tools/test-op.sh once per PR file
# with the KunlunXIN device model on, and upstream's tests/test_copy.py with/without PR.
#   OUT=/tmp/out DEADLINE=540 bash harness/device/upstream_ci.sh
# Result: $OUT/upstream_ci_cuda.json (both bases; the committed one is the starting point,
# so bases not run this time are kept), logs in $OUT/upstream_ci_logs.tgz.
#
# Upstream FlagGems travels in .upstream/ (git-ignored, never committed), made on the dev
# box from the fetched mirror (main of 2026-08-21 is the mirror's HEAD, ed2508bc):
#   G=/work/.mirror/flagos-ai+FlagGems/repo; mkdir -p .upstream
#   git --git-dir=$G archive --prefix=main/ ed2508bc src tests benchmark tools pytest.ini | gzip -1 > .upstream/main.tgz
#   git --git-dir=$G archive --prefix=v5.0.2/ v5.0.2 src tests benchmark tools pytest.ini | gzip -1 > .upstream/v5.0.2.tgz
# (carried with the device tool's `carry`: [".upstream", ".whl"]) and unpacked below into
# .upstream/main and .upstream/v5.0.2; folders already unpacked there are used as they are.
# coverage (upstream's test-op.sh runs `coverage run -m pytest`) is a wheel in .whl/
# (`pip download coverage==7.10.7 --no-deps --only-binary=:all: --python-version 3.12
# --platform manylinux_2_28_x86_64 -d .whl`: the box's python3 is 3.12),
# installed by harness/device/env.sh into /tmp/site; its script is /tmp/site/bin/coverage.
set -u
cd "$(dirname "$0")/../.."
: "${OUT:=/tmp/out}" "${DEADLINE:=540}"
LOGS=/tmp/upstream_ci_logs && mkdir -p "$LOGS" "$OUT"
for t in .upstream/main.tgz .upstream/v5.0.2.tgz; do
  d=.upstream/$(basename "$t" .tgz)
  [ -d "$d" ] || { [ -f "$t" ] && tar -xzf "$t" -C .upstream; }
done
. harness/device/env.sh > "$LOGS/env.log" 2>&1
export UPSTREAM_CI_PATH_PREPEND="/tmp/site/bin${UPSTREAM_CI_PATH_PREPEND:+:$UPSTREAM_CI_PATH_PREPEND}"
export COPYFIX_OP_COMMIT="${COPYFIX_OP_COMMIT:-}"  # the tree travels without .git
RESULTS="$OUT/upstream_ci_cuda.json"
[ -f "$RESULTS" ] || cp results/upstream_ci_cuda.json "$RESULTS" 2>/dev/null
left() { local n=$((DEADLINE - SECONDS)); echo $((n > 1 ? n : 1)); }
# ck label share: each base gets a share of the time left (the last one all of it); the
# tool's --budget ends its runs in time to write the results, `timeout` is the backstop
run() {
  local budget=$(( $(left) / $3 - 20 ))
  [ "$budget" -gt 30 ] || { echo "=== $2: no time left"; return 1; }
  echo "=== $2 $(date +%T), budget $budget s"
  timeout "$((budget + 15))" python3 -m copyfix.upstream.ci "$1" --mode cuda --label "$2" \
    --machine "nvidia-h200: 1 H200, 16 CPU cores" --no-docs --results "$RESULTS" \
    --budget "$budget" --log-dir "$LOGS/$2" ${UPSTREAM_CI_ARGS:-} > "$LOGS/$2.log" 2>&1
  echo "=== $2 rc=$? $(date +%T)"; grep '^upstream-ci ' "$LOGS/$2.log"
}
run .upstream/main main-2026-08-21 2
run .upstream/v5.0.2 v5.0.2 1
tar -czf "$OUT/upstream_ci_logs.tgz" -C "$LOGS" .
