#!/bin/bash
# One call on the lent GPU machine (device tool): install the carried wheels, run the gpu tests with
# their full log, then benchmarks/gpu_check.py. Logs and gpu.json land in $OUT.
#   run(command="bash benchmarks/gpu_device_run.sh [TEST_SECONDS] [CHECK_MINUTES] [pytest args...]",
#       carry=[".whl", ".whl2"])
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu_out}; mkdir -p "$OUT"
TEST_S=${1:-180}; CHECK_MIN=${2:-3.5}; shift 2 2>/dev/null
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:$PWD
python3 -m pip show cuda-bindings cuda-core cuda-pathfinder cupy-cuda13x 2>&1 | grep -E '^(Name|Version)' | paste - - 
if ! python3 -c "from nvmath.bindings import cublas" 2>"$OUT/nvmath_err.txt"; then
    tail -3 "$OUT/nvmath_err.txt"; echo "nvmath import failed: adding .whl2 (cuda-core, cuda-pathfinder)"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl2/*.whl
    python3 -c "from nvmath.bindings import cublas; print('nvmath ok now')"
fi
nvidia-smi --query-gpu=name,memory.used,memory.total,utilization.gpu --format=csv,noheader
if [ "$TEST_S" != 0 ]; then
    timeout "$TEST_S" python3 -m pytest -q -p no:cacheprovider --timeout=60 -rfE --tb=short "$@" tests/gpu \
        tests/test_cuda_compile.py tests/test_cuda_placement.py tests/test_cuda_device_io.py \
        tests/test_cuda_transformer_placement.py > "$OUT/tests.log" 2>&1
    echo "pytest rc $?"; grep -E '^(FAILED|ERROR)|passed|failed' "$OUT/tests.log" | cut -c1-300 | tail -60
fi
if [ "$CHECK_MIN" != 0 ]; then
    timeout $(python3 -c "print(int($CHECK_MIN*60+30))") python3 benchmarks/gpu_check.py --skip-tests \
        --minutes "$CHECK_MIN" > "$OUT/check.log" 2>&1
    echo "gpu_check rc $?"; tail -c 5000 "$OUT/check.log"
    cp benchmarks/results/gpu.json "$OUT/" 2>/dev/null
fi
if [ -n "$GPU_PROFILE" ]; then
    timeout 200 python3 benchmarks/gpu_profile.py $GPU_PROFILE_ARGS > "$OUT/profile.log" 2>&1
    echo "gpu_profile rc $?"; tail -c 9000 "$OUT/profile.log"
    cp benchmarks/results/gpu_profile.json "$OUT/" 2>/dev/null
fi
