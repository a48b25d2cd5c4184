"""Which u8 x s8 integer arithmetic the quantized kernels use: onnxruntime's on this host, or exact.

    "onnxruntime" (default): the products of uint8 activations and int8 weights are summed as
        onnxruntime's MLAS sums them on this host. Without VNNI (AVX2, AVX-512 F/BW without
        AVX512-VNNI / AVX-VNNI) MLAS multiplies with vpmaddubsw, which adds two adjacent products
        into int16 WITH SATURATION before the exact int32 sum:

            acc = sum_j saturate_int16(x[2j] w[2j] + x[2j+1] w[2j+1])      (raw x, raw w)

        the pairs taken along k in onnxruntime's order: K's natural order for MatMulInteger,
        QLinearMatMul, QGemm, DynamicQuantizeMatMul, MatMulIntegerToFloat; (kh, kw, c) for a
        QLinearConv group (im2col on NHWC, or MLAS's symmetric convolution, which packs 4 input
        channels per tap) -- checked against onnxruntime 1.32 with crafted inputs
        (tests/ops/test_int8_arithmetic.py). Where the host has VNNI, MLAS uses vpdpbusd
        (exact), and so does this mode. Our kernels are fastest this way on AVX2 (vpmaddubsw
        does 32 multiply-adds an instruction) and give onnxruntime's bits.
    "exact": every sum exact in int32 (the ONNX spec's arithmetic), whatever the host.

Only u8 x s8 products saturate: uint8 weights (MLAS's u8 x u8 kernel), int8 activations
(MLAS's s8 x s8 and its QLinearConv<int8_t> on this host) and depthwise convolutions are
exact in onnxruntime too. Known differences from onnxruntime under "onnxruntime": a compiled
QLinearConv / QLinearMatMul / QGemm / DynamicQuantizeMatMul whose int8 weights have a zero
point other than 0 sums exactly (MLAS saturates the raw products there; onnxruntime's
quantizer writes symmetric int8 weights, zero point 0); so do QLinearConv's and the fused
DynamicQuantizeMatMul's reference tier, which a tiered Net serves while its kernels compile
(engine/tiering.py: float64 BLAS, where numpy's saturating pairs would take seconds a forward). The numpy
MatMulInteger / QLinearMatMul / QGemm / MatMulIntegerToFloat / DynamicQuantizeMatMul kernels saturate as MLAS
(quantized.integer_product), and so does the numpy QLinearConv where it is a node's own kernel (3-D and 1-D
convolutions, dynamic weights: quantized.saturating_conv, the windows in MLAS's (taps, channel) order).
tests/avx2_target.sh with ORT_AVX2=1 checks all of it against onnxruntime's AVX2 kernels on any AVX-512 host.

The u8 x s8 kernels that sum 4 k in each 32-bit lane (compiled/qgemm.py's qgemm2d_sat / qgemm2d_sat_rows /
qgemv_sat, compiled/dqgemm.py's dynamic_qmatmul_sat / qmatmul_sat: uint8 activations, int8 weights with zero
point 0, non-depthwise) take one of three dot products (compiled/dots.py), dot_product() says which:
"vpmaddubsw" (the saturating pairs: "onnxruntime" without VNNI), "vpdpbusd" (exact, one instruction for
4 products: "onnxruntime" or "exact" on a VNNI host, MLAS's own kernel there), "emulated" (the same exact sum
in generic IR, any host: POOLED_PREDICTOR_INT8_DOT=emulate, for tests of the VNNI kernels' packing and
epilogue on hosts without VNNI); None: exact sums by the int16-pair kernels (vpmaddwd), the "exact"
arithmetic without VNNI. POOLED_PREDICTOR_INT8_DOT=vnni (the default: vpdpbusd where the host has it),
emulate, or pairs (the int16-pair kernels for exact sums even on a VNNI host); use_dot() sets it for a while.

A Net fixes its arithmetic at creation (Net / Predictor / Config `int8_arithmetic`, default:
current(), the value use() sets or POOLED_PREDICTOR_INT8_ARITHMETIC, else "onnxruntime"); its
kernels read current() while its layouts are built (engine/layout.py enters use()).
"""

from __future__ import annotations

import contextvars
import logging
import os
import threading
from contextlib import contextmanager
from functools import cache

from .cpu import compiled

__all__ = ["ARITHMETICS", "DOT_CHOICES", "current", "describe", "dot_product", "host_vnni", "saturating", "use",
           "use_dot", "validate"]

log = logging.getLogger(__name__)

ARITHMETICS = ("onnxruntime", "exact")


@cache
def host_vnni() -> bool:
    """Whether this host has AVX512-VNNI or AVX-VNNI (onnxruntime's u8 x s8 sums are then exact):
    compiled/vnni.py, imported on first use (it reads llvmlite's host features)."""
    return compiled.vnni.HOST_VNNI


@cache
def target_vnni() -> bool:
    """Whether numba compiles for a CPU with VNNI (the vpdpbusd kernels compile only then): compiled/vnni.py."""
    return compiled.vnni.TARGET_VNNI


def validate(arithmetic: str) -> str:
    """The arithmetic's name, checked.

    Raises:
        ValueError: not one of ARITHMETICS.
    """
    if arithmetic not in ARITHMETICS:
        raise ValueError(f"int8_arithmetic must be one of {ARITHMETICS}, got {arithmetic!r}")
    return arithmetic


def _env_choice(name: str, choices, fallback: str) -> str:
    """Environment variable `name` when it is one of `choices`; else `fallback` (a warning when it is set)."""
    wanted = os.environ.get(name, "").strip().lower()
    if wanted and wanted not in choices:
        log.warning("%s=%r is not one of %s; using %r", name, wanted, choices, fallback)
        wanted = ""
    return wanted or fallback


DEFAULT = _env_choice("POOLED_PREDICTOR_INT8_ARITHMETIC", ARITHMETICS, "onnxruntime")
_current: contextvars.ContextVar = contextvars.ContextVar("int8_arithmetic", default=None)


def current() -> str:
    """The arithmetic kernels built now use: use()'s, else DEFAULT."""
    v = _current.get()
    return DEFAULT if v is None else v


@contextmanager
def use(arithmetic: str | None):
    """Kernels built inside use this arithmetic (None: leave current() as it is).

    Raises:
        ValueError: an unknown arithmetic.
    """
    if arithmetic is None:
        yield
        return
    token = _current.set(validate(arithmetic))
    try:
        yield
    finally:
        _current.reset(token)


def saturating(arithmetic: str | None = None) -> bool:
    """Whether u8 x s8 pairs saturate to int16 under this arithmetic (None: current()) on this host."""
    return (current() if arithmetic is None else validate(arithmetic)) == "onnxruntime" and not host_vnni()


DOT_CHOICES = ("vnni", "emulate", "pairs")
"""POOLED_PREDICTOR_INT8_DOT's values (module docstring)."""


DOT_DEFAULT = _env_choice("POOLED_PREDICTOR_INT8_DOT", DOT_CHOICES, "vnni")
_dot_lock = threading.Lock()
_dot_override: list = []  # use_dot() stack, process-wide (a Net's layouts may be built in other threads)


@contextmanager
def use_dot(choice: str):
    """Context: the u8 x s8 kernels built inside take `choice`'s dot product (one of DOT_CHOICES), process-wide.

    Raises:
        ValueError: an unknown choice.
    """
    if choice not in DOT_CHOICES:
        raise ValueError(f"int8 dot product must be one of {DOT_CHOICES}, got {choice!r}")
    with _dot_lock:
        _dot_override.append(choice)
    try:
        yield
    finally:
        with _dot_lock:
            del _dot_override[len(_dot_override) - 1 - _dot_override[::-1].index(choice)]


def dot_product(arithmetic: str | None = None) -> str | None:
    """The dot product of the u8 x s8 quad kernels under this arithmetic (None: current()) on this host:
    "vpmaddubsw", "vpdpbusd" or "emulated" (compiled/dots.py), or None where exact sums run the int16-pair
    kernels (module docstring)."""
    if saturating(arithmetic):
        return "vpmaddubsw"
    choice = _dot_override[-1] if _dot_override else DOT_DEFAULT
    if choice == "emulate":
        return "emulated"
    if choice == "vnni" and compiled.vnni.DETECTED_VNNI and target_vnni():  # VNNI code compiles and runs here
        return "vpdpbusd"
    return None


def describe(arithmetic: str | None = None) -> str:
    """One line for profiles and benchmarks: how u8 x s8 products are summed under this arithmetic here."""
    dot = dot_product(arithmetic)
    return {"vpmaddubsw": "int16-saturated pairs (vpmaddubsw), as onnxruntime on this host without VNNI",
            "vpdpbusd": "exact, 4 products an int32 lane (vpdpbusd, VNNI), as onnxruntime on this host",
            "emulated": "exact, 4 products an int32 lane (vpdpbusd emulated in generic vector ops)",
            None: "exact, int16 pairs (vpmaddwd)"}[dot]
