#!/usr/bin/env bash
# Harness: every GPU record of results/ again at the current op, one PART per device call
# (each inside the 10-minute limit), on the lent NVIDIA machine. A record leaves results/
# when the op it measured changes (tests/tooling/test_results_current.py); this puts it back.
#   OUT=<dir> COPYFIX_OP_COMMIT=$(git log -1 --format=%H -- src) bash harness/device/rerecord.sh PART
# Carry .whl and .upstream (harness/device/run.sh says how they are made), and .warm once a
# warm part has brought back $OUT/warm.tgz.part-* (copy the parts into .warm/ here, as they are).
# Parts, in this order (the decode's first, on one machine where they can):
#   warm           the decode's kernels compiled once (one base and one composed worker over
#                  main, NVIDIA backend, then the kunlunxin section's): Triton's and FlagGems'
#                  caches into $OUT/warm.tgz.part-aa, -ab, ... (15 MiB each: a file over 16 MiB
#                  does not come back, and warm.tgz was 23.6 MB on H100, 2026-12-07). On a fresh
#                  machine main's first FlagGems generate of `small` took over 5.5 minutes (H100,
#                  2026-12-06): no timed call fits then.
#   decode         results/decode_h200.json: harness/device/decode.sh over main, NVIDIA section
#   decode-kx      results/decode_kunlunxin_h200.json: the decode with GEMS_VENDOR=kunlunxin in the
#                  cuda emulation over main, every op, device model recording (as
#                  decode_kunlunxin_cpu.json is on the interpreter)
#   bench          results/copy_perf_accuracy_h200.json (harness/device/run.sh bench)
#   upstream       results/upstream_check_cuda.json, both bases (run.sh upstream main-upstream)
#   upstream-ci    results/upstream_ci_cuda.json (run.sh upstream-ci main-upstream-ci)
# Files come back from $OUT (at most 8 a call); copy each into results/, then
# `python -m copyfix.bench report` and `python -m copyfix.upstream.check docs`.
set -u
cd "$(dirname "$0")/../.."
: "${OUT:=/tmp/out}"
mkdir -p "$OUT"
export OUT COPYFIX_OP_COMMIT="${COPYFIX_OP_COMMIT:-}"
warm_caches() {  # the carried caches, if any, where Triton and FlagGems look
  if ls .warm/warm.tgz.part-* > /dev/null 2>&1; then
    mkdir -p /root && cat .warm/warm.tgz.part-* | tar -xzf - -C /root
  elif [ -f .warm/warm.tgz ]; then
    mkdir -p /root && tar -xzf .warm/warm.tgz -C /root
  fi
  return 0
}
warm_caches
on_main() {  # build/composed over main, no emulation until a part asks for it
  ENV_BASE=main . harness/device/env.sh > /tmp/env.log 2>&1
  unset COPYFIX_EMULATION
}
case ${1:-} in
  warm)  # inside one call: each step gets what is left of WARM_DEADLINE less the later steps' share
    on_main
    python3 -c "from copyfix.measure.decode.workers import base_only; base_only()"
    left() { echo $(( ${WARM_DEADLINE:-560} - SECONDS - $1 )); }
    for variant in base composed; do
      env GEMS_VENDOR=nvidia PYTHONPATH="$([ $variant = base ] && echo build/base-only:)$PYTHONPATH" \
        timeout "$(left $([ $variant = base ] && echo 200 || echo 110))" python3 -m copyfix.measure.decode \
        --worker $variant --configs small --rounds 1 --out /tmp/warm-$variant.json > /tmp/warm-$variant.log 2>&1
      echo "warm $variant rc=$? $(date +%T)"
    done
    COPYFIX_EMULATION=cuda timeout "$(left 20)" python3 -m copyfix.measure.decode --kunlunxin --configs small \
      --out /tmp/warm-kx.json > /tmp/warm-kx.log 2>&1; echo "warm kunlunxin rc=$? $(date +%T)"
    tar -czf - -C /root .triton .flaggems 2>/dev/null | split -b 15M - "$OUT/warm.tgz.part-"
    tail -n 3 /tmp/warm-*.log; ls -la "$OUT" ;;
  decode) DECODE_ARGS="--configs small,small_single ${DECODE_ARGS:-}" DECODE_KX_CONFIGS= \
            KX_RESERVE=0 bash harness/device/decode.sh ;;
  decode-kx) on_main
    COPYFIX_EMULATION=cuda timeout 570 python3 -m copyfix.measure.decode --kunlunxin --configs small \
      --out "$OUT/decode_kunlunxin_h200.json" > /tmp/kx.log 2>&1; echo "decode-kx rc=$?"; tail -n 5 /tmp/kx.log ;;
  bench) bash harness/device/run.sh bench ;;
  upstream) bash harness/device/run.sh upstream main-upstream ;;
  upstream-ci) bash harness/device/run.sh upstream-ci main-upstream-ci ;;
  *) sed -n 2,23p "$0"; exit 2 ;;
esac
