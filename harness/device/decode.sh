#!/usr/bin/env bash
# Harness: a Hugging Face Llama decode under FlagGems on the lent NVIDIA machine.
#   OUT=<dir> [COPYFIX_OP_COMMIT=<sha>] bash harness/device/decode.sh
# One step, one machine start (torch 2.11, triton 3.6 and transformers 5.17 come with the
# image). The base is DECODE_BASE: main (default; upstream FlagGems main 2026-08-21, the
# PRs' target, carried as .upstream/main.tgz: see harness/device/run.sh) or 5.0.2 (the
# wheel in .whl/); harness/device/env.sh composes either:
#   python -m copyfix.measure.decode (its docstring says what is measured): the configs
#   small, large and single; the variants base (the base alone: build/base-only, the
#   composition with every pre-image put back), composed (cache on) and composed_cache_off,
#   DECODE_PROCESSES fresh processes each (default 3), alternating, DECODE_ROUNDS timed
#   generates per column (default 3), FlagGems' own NVIDIA backend (GEMS_VENDOR=nvidia, no
#   emulation); then the kunlunxin_emulated section (cuda emulation, GEMS_VENDOR=kunlunxin,
#   every op, the device model recording) on DECODE_KX_CONFIGS (default small; empty: none).
#   Into $OUT/decode_h200.json, written after every worker (a run cut short keeps what it
#   measured); logs in $OUT/decode_logs.tgz.
# DEADLINE (seconds, default 540) budgets the whole call: no worker starts that would not
# fit, KX_RESERVE seconds (default 150) are kept for the kunlunxin section.
# DECODE_ARGS: anything else for copyfix.measure.decode (e.g. --configs small,large).
set -u
cd "$(dirname "$0")/../.."
: "${OUT:=/tmp/out}" "${DEADLINE:=540}" "${KX_RESERVE:=150}" "${DECODE_PROCESSES:=3}" "${DECODE_ROUNDS:=3}"
: "${DECODE_KX_CONFIGS=small}" "${DECODE_BASE:=main}"
LOGS=/tmp/decodelogs && rm -rf $LOGS && mkdir -p $LOGS "$OUT"
export COPYFIX_OP_COMMIT="${COPYFIX_OP_COMMIT:-}" PYTHONUNBUFFERED=1
ENV_BASE=$DECODE_BASE . harness/device/env.sh > $LOGS/env.log 2>&1
unset COPYFIX_EMULATION  # (each worker gets its own: none, or cuda for kunlunxin_emulated)
echo "=== decode over $DECODE_BASE $(date +%T), $((DEADLINE - SECONDS)) s left"
timeout $((DEADLINE - SECONDS)) python3 -m copyfix.measure.decode --out "$OUT/decode_h200.json" \
  --processes "$DECODE_PROCESSES" --rounds "$DECODE_ROUNDS" --kunlunxin-configs "$DECODE_KX_CONFIGS" \
  --budget-s $((DEADLINE - SECONDS - 15)) --kunlunxin-reserve-s "$KX_RESERVE" ${DECODE_ARGS:-} \
  > $LOGS/decode.log 2>&1
echo "=== decode rc=$? $(date +%T), $SECONDS s"
grep -v -i "warn" $LOGS/decode.log | grep -E "^(===|  \[)|\|" | tail -n 40
tar -czf "$OUT/decode_logs.tgz" -C $LOGS .
