"""The host's vector ISA and width, chosen once at import, and the blocked layout that follows it.

    ISA      lanes  blocked layout
    avx512   16     NCHW16c     (AVX-512 F: Intel Xeon since Skylake-SP, AMD since Zen 4)
    avx2      8     NCHW8c      (AVX2 + FMA, and anything older: the kernels' generic vectors still run)

Detected from Linux's /proc/cpuinfo flags, else llvmlite's host CPU features (the ones numba
compiles for: `avx512f`, `avx2`), or from NUMBA_CPU_FEATURES where it names numba's target;
POOLED_PREDICTOR_ISA=avx2|avx512 overrides the choice (an unknown value is logged and the
detected ISA used). The kernels are written with LLVM's generic vector types (<8 x float>,
<16 x float>, llvm.fmuladd on vectors), never ISA intrinsics, so both widths compile and run
on any x86-64 host (LLVM splits a <16 x float> into two ymm registers on AVX2): the tests check
the 16-wide kernels' bits on every machine (compiled/widths.py builds each width's modules).

`lanes()` is the width Nets created from now on lay their blocked chains out at (the host's, or
the one `use_lanes()` sets for a while: tests and benchmarks building Nets at the other width).
A Net reads it once, at creation (engine/net.py), so its layouts keep one width whatever thread
builds them; a model compiles only the kernels of its width (issue 31).
"""

from __future__ import annotations

import logging
import os
import threading
from contextlib import contextmanager

__all__ = ["DETECTED", "ISA", "ISAS", "LANES", "blocked_layout", "describe", "lanes", "target_features", "use_lanes"]

log = logging.getLogger(__name__)

ISAS = {"avx2": 8, "avx512": 16}
"""ISA name -> float32 lanes of its vectors (the channel block of its blocked layout)."""


def _cpuinfo_field(name: str) -> str | None:
    """The first processor's `name` field in Linux's /proc/cpuinfo; None elsewhere or where it has none."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip() == name:
                    return value.strip()
    except OSError:
        pass
    return None


def _cpuinfo_flags() -> set | None:
    """The first processor's "flags" in Linux's /proc/cpuinfo (x86: the CPUID features the kernel enabled,
    AVX-512's register state included); None elsewhere."""
    flags = _cpuinfo_field("flags")
    return None if flags is None else set(flags.split())


def vendor() -> str:
    """The CPU's vendor as CPUID names it ("GenuineIntel", "AuthenticAMD"; /proc/cpuinfo's vendor_id), or ""
    where Linux does not say."""
    return _cpuinfo_field("vendor_id") or ""


def target_features() -> str | None:
    """NUMBA_CPU_FEATURES where it names numba's target, else None: numba compiles for the host's features.
    numba's own rule: NUMBA_CPU_NAME alone still takes the host's features; an empty features string
    counts only beside a name. Read here and by vnni.py, so both follow one target."""
    features = os.environ.get("NUMBA_CPU_FEATURES")
    if features is not None and (features or os.environ.get("NUMBA_CPU_NAME", "").strip()):
        return features
    return None


def _detect() -> str:
    """avx512 where numba compiles for AVX-512 F, else avx2. numba's target is the host unless
    NUMBA_CPU_FEATURES names another (numba's own rule: with NUMBA_CPU_NAME alone it still takes the host's
    features; vnni.py reads them alike): then "+avx512f" in that string decides, so a cache built for an AVX2
    fleet (NUMBA_CPU_NAME=haswell NUMBA_CPU_FEATURES=...) gets 8-lane layouts. The host's: from
    /proc/cpuinfo's x86 flags where Linux gives them (the CPUID bits LLVM reads too; loading llvmlite's LLVM
    for the question cost 50 ms of CPU of every import, issue 31), else from llvmlite's host CPU features."""
    features = target_features()
    if features is not None:
        return "avx512" if "+avx512f" in features else "avx2"
    flags = _cpuinfo_flags()
    if flags is not None and ("avx" in flags or "sse2" in flags):
        return "avx512" if "avx512f" in flags else "avx2"
    try:
        from llvmlite import binding

        features = binding.get_host_cpu_features()
        return "avx512" if features.get("avx512f", False) else "avx2"
    except Exception:  # no feature query on this platform: the narrower width runs anywhere
        return "avx2"


def _choose(detected: str) -> str:
    wanted = os.environ.get("POOLED_PREDICTOR_ISA", "").strip().lower()
    if not wanted:
        return detected
    if wanted not in ISAS:
        log.warning("POOLED_PREDICTOR_ISA=%r is not one of %s; using the detected %s", wanted, sorted(ISAS), detected)
        return detected
    return wanted


DETECTED = _detect()
"""The target's ISA ("avx512" or "avx2"): the host's, as /proc/cpuinfo or llvmlite reports it, or
NUMBA_CPU_FEATURES's."""

ISA = _choose(DETECTED)
"""The ISA the kernels are laid out for: DETECTED, or POOLED_PREDICTOR_ISA's."""

LANES = ISAS[ISA]
"""float32 lanes of ISA's vectors: 16 (avx512) or 8 (avx2)."""

_lock = threading.Lock()
_override: list = []  # use_lanes() stack (process-wide: a Net's pool workers see what its creator saw)


def lanes() -> int:
    """The width Nets created now lay their blocked chains out at: use_lanes()'s, else LANES."""
    return _override[-1] if _override else LANES


def blocked_layout(width: int | None = None) -> str:
    """"NCHW<width>c" (width: lanes() when None)."""
    return f"NCHW{lanes() if width is None else int(width)}c"


@contextmanager
def use_lanes(width: int):
    """Context: Nets created inside lay their blocked chains out at `width` lanes (8 or 16), process-wide
    (tests and benchmarks running both widths in one process).

    Raises:
        ValueError: width not 8 or 16.
    """
    if width not in ISAS.values():
        raise ValueError(f"use_lanes: {width} lanes; expected one of {sorted(ISAS.values())}")
    with _lock:
        _override.append(int(width))
    try:
        yield
    finally:
        with _lock:  # this context's entry: the last of its width (nested contexts of one width unwind in order)
            del _override[len(_override) - 1 - _override[::-1].index(int(width))]


def describe() -> str:
    """One line for profile headers and logs: e.g. "avx512 (16 lanes, NCHW16c)"; names the override."""
    note = "" if ISA == DETECTED else f", POOLED_PREDICTOR_ISA over detected {DETECTED}"
    return f"{ISA} ({LANES} lanes, {blocked_layout(LANES)}{note})"
