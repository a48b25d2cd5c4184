"""Whether the host has VNNI (AVX512-VNNI or AVX-VNNI), from llvmlite's host CPU features.

onnxruntime's MLAS sums u8 x s8 products exactly with vpdpbusd there, and in int16-saturated
pairs with vpmaddubsw elsewhere on x86 (ops/int8_arithmetic.py).
"""

from __future__ import annotations


def _host_vnni() -> bool:
    try:
        from llvmlite import binding

        f = binding.get_host_cpu_features()
        return bool(f.get("avx512vnni", False) or f.get("avxvnni", False))
    except Exception:  # no feature query on this platform: the common AVX2 host
        return False


HOST_VNNI = _host_vnni()
"""Whether this host has AVX512-VNNI or AVX-VNNI."""
