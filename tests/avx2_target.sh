#!/bin/bash
# The test suite with every numba kernel compiled for an AVX2 machine (Haswell: AVX2 + FMA, no AVX-512), on
# any x86-64 host: numba's target is NUMBA_CPU_NAME / NUMBA_CPU_FEATURES (both needed: with a name alone it
# keeps the host's features), the kernels' width follows it (compiled/isa.py: 8 lanes), the vpdpbusd kernels
# are left out (compiled/vnni.py), and numba caches these builds apart from the host's (NUMBA_CACHE_DIR).
#   bash tests/avx2_target.sh                                  # the whole suite, 8 lanes
#   POOLED_PREDICTOR_TEST_LANES=16 bash tests/avx2_target.sh   # the 16-wide kernels, split by LLVM on AVX2
#   bash tests/avx2_target.sh -q tests/ops                     # other pytest arguments
#   ORT_AVX2=1 bash tests/avx2_target.sh                       # and onnxruntime held to its AVX2 kernels
# ORT_AVX2=1, on an AVX-512 host: the reference onnxruntime is benchmarks/ort_avx2.py's copy (MLAS's AVX2 kernels:
# NCHW8c, vpmaddubsw's saturating u8 x s8 pairs) and POOLED_PREDICTOR_HOST_VNNI=0 gives our "onnxruntime" int8
# arithmetic that host's saturating pairs, so every comparison with onnxruntime is one an AVX2 host would make.
set -e
cd "$(dirname "$0")/.."
if [ "${ORT_AVX2:-0}" = 1 ]; then
  ort_copy="$(python benchmarks/ort_avx2.py --path)"
  export PYTHONPATH="$ort_copy${PYTHONPATH:+:$PYTHONPATH}" POOLED_PREDICTOR_HOST_VNNI=0
fi
export NUMBA_CPU_NAME=haswell
export NUMBA_CPU_FEATURES="+64bit,+avx,+avx2,+bmi,+bmi2,+cmov,+cx16,+cx8,+f16c,+fma,+fsgsbase,+fxsr,+lzcnt,+mmx,+movbe,+pclmul,+popcnt,+rdrnd,+sahf,+sse,+sse2,+sse3,+sse4.1,+sse4.2,+ssse3,+xsave,+xsaveopt,-avx512f,-avx512bw,-avx512vl,-avx512dq,-avx512cd,-avx512vnni,-avxvnni,-avx512bf16,-avx512vbmi"
export NUMBA_CACHE_DIR="${NUMBA_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/pooled-predictor/numba-haswell}"
if [ $# -eq 0 ]; then set -- -q tests; fi
exec python -m pytest "$@"
