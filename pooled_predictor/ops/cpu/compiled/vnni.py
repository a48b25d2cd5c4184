"""Whether the host has VNNI (AVX512-VNNI or AVX-VNNI), from llvmlite's host CPU features.

onnxruntime's MLAS sums u8 x s8 products exactly with vpdpbusd there, and in int16-saturated
pairs with vpmaddubsw elsewhere on x86 (ops/int8_arithmetic.py). POOLED_PREDICTOR_HOST_VNNI=0 (or 1)
says what onnxruntime's arithmetic is to be taken as instead of the host's VNNI: 0 where the onnxruntime
compared with runs its AVX2 kernels on a VNNI host (benchmarks/ort_avx2.py's copy; tests/avx2_target.sh
with ORT_AVX2=1). It changes the arithmetic only: which kernels can compile still follows the target.
"""

from __future__ import annotations

import logging
import os

from .isa import target_features


def _host_features() -> dict:
    try:
        from llvmlite import binding

        return dict(binding.get_host_cpu_features())
    except Exception:  # no feature query on this platform: the common AVX2 host
        return {}


_HOST = _host_features()
DETECTED_VNNI = bool(_HOST.get("avx512vnni", False) or _HOST.get("avxvnni", False))
"""Whether this host's CPU has AVX512-VNNI or AVX-VNNI (whether VNNI code can run here)."""
_WANTED = os.environ.get("POOLED_PREDICTOR_HOST_VNNI", "").strip()
if _WANTED not in ("", "0", "1"):
    logging.getLogger(__name__).warning("POOLED_PREDICTOR_HOST_VNNI=%r is not 0 or 1; using the host's (%s)",
                                        _WANTED, int(DETECTED_VNNI))
HOST_VNNI = {"0": False, "1": True}.get(_WANTED, DETECTED_VNNI)
"""Whether this host has AVX512-VNNI or AVX-VNNI, as onnxruntime's u8 x s8 arithmetic goes (module docstring:
POOLED_PREDICTOR_HOST_VNNI)."""


def _target_vnni() -> bool:
    """Whether numba compiles for a CPU with VNNI: the host's (as detected), unless NUMBA_CPU_FEATURES names
    another target (then only where its features string enables a VNNI). NUMBA_CPU_NAME alone is numba's
    scheduling model with the host's features (isa.target_features: numba's own rule), so the host's VNNI
    stands there; it once counted as "no VNNI", and a build tuned for icelake-server on a VNNI host ran the
    int16-pair kernels, 4x slower (session 20)."""
    features = target_features()
    if features is not None:
        return "+avx512vnni" in features or "+avxvnni" in features
    return DETECTED_VNNI


TARGET_VNNI = _target_vnni()
"""Whether the kernels compile for a CPU with AVX512-VNNI or AVX-VNNI (the vpdpbusd kernels need it)."""


def _target_vnni512() -> bool:
    features = target_features()
    if features is not None:
        return "+avx512vnni" in features
    return TARGET_VNNI and bool(_HOST.get("avx512vnni", False))


TARGET_VNNI512 = _target_vnni512()
"""Whether the kernels compile for a CPU with AVX512-VNNI (vpdpbusd on zmm registers): the host's, or where
NUMBA_CPU_FEATURES names a target, whether it enables +avx512vnni."""
