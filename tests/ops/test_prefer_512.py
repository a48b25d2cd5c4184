"""numba's loops at 512 bits on AVX-512 targets whose LLVM tuning prefers 256 (compiled/jit.py: _prefer_512).

LLVM tunes Intel's AVX-512 CPUs (skylake-avx512 ... emeraldrapids) with prefer-256-bit: its loop vectorizer
then makes ymm loops. Each check compiles erf_flat (a loop numba vectorizes itself) in a child process for
icelake-server's tuning and counts the vector registers of its machine code. Compiling for a target is possible
on any x86-64 host (nothing is run), so the explicit-features cases run everywhere.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pooled_predictor.ops.cpu.compiled import isa

CHILD = """
import re
from pooled_predictor.ops.cpu.compiled import jit, epilogue
from numba.core.registry import cpu_target
jit.ensure(epilogue.erf_flat)
asm = epilogue.erf_flat.inspect_asm(epilogue.erf_flat.signatures[0])
print(jit.PREFERS_512, len(re.findall("zmm", asm)), len(re.findall("ymm", asm)),
      cpu_target.target_context.codegen()._tm_features.endswith(",-prefer-256-bit"))
"""
SKX = "+64bit,+sse2,+avx,+avx2,+fma,+f16c,+bmi,+bmi2,+avx512f,+avx512vl,+avx512bw,+avx512dq,+avx512cd"


def _child(tmp_path, **env_set):
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_CPU_") and k != "POOLED_PREDICTOR_PREFER_256"}
    env.update(env_set, NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    prefers, zmm, ymm, suffixed = out.stdout.split()
    return prefers == "True", int(zmm), int(ymm), suffixed == "True"


def _host_avx512() -> bool:
    """Whether the host (not numba's target in this process: tests/avx2_target.sh names Haswell) has AVX-512 F:
    the children drop NUMBA_CPU_FEATURES, so numba takes the host's features there."""
    flags = isa._cpuinfo_flags()
    if flags is None:
        from llvmlite import binding

        return bool(binding.get_host_cpu_features().get("avx512f", False))
    return "avx512f" in flags


def test_the_host_features_gain_prefer_512_on_an_avx512_host(tmp_path):
    """NUMBA_CPU_NAME alone (numba keeps the host's features): on an AVX-512 host the loop is zmm and the
    features end in -prefer-256-bit; on an AVX2 host nothing changes (no 512-bit registers at all)."""
    prefers, zmm, ymm, suffixed = _child(tmp_path, NUMBA_CPU_NAME="icelake-server")
    if _host_avx512():
        assert prefers and suffixed and zmm > 0
    else:
        assert not prefers and not suffixed and zmm == 0 and ymm > 0


def test_prefer_256_keeps_llvms_tuning(tmp_path):
    if not _host_avx512():
        pytest.skip("the host has no AVX-512: its loops are ymm whatever the tuning")
    prefers, zmm, ymm, suffixed = _child(tmp_path, NUMBA_CPU_NAME="icelake-server", POOLED_PREDICTOR_PREFER_256="1")
    assert not prefers and not suffixed and zmm == 0 and ymm > 0


def test_named_features_are_numbas_target_as_given(tmp_path):
    """NUMBA_CPU_FEATURES is left alone: without the suffix icelake-server's tuning gives ymm loops (what an
    Intel Xeon got before this change), with it zmm."""
    prefers, zmm, ymm, _ = _child(tmp_path, NUMBA_CPU_NAME="icelake-server", NUMBA_CPU_FEATURES=SKX)
    assert not prefers and zmm == 0 and ymm > 0
    prefers, zmm, ymm, suffixed = _child(tmp_path, NUMBA_CPU_NAME="icelake-server",
                                         NUMBA_CPU_FEATURES=SKX + ",-prefer-256-bit")
    assert prefers and suffixed and zmm > 0


def test_znver_targets_make_zmm_loops_without_the_suffix(tmp_path):
    """AMD's AVX-512 tuning has no 256-bit preference: the same features give zmm loops there (the suffix
    changes nothing on such hosts but numba's cache key)."""
    _, zmm, _, _ = _child(tmp_path, NUMBA_CPU_NAME="znver4", NUMBA_CPU_FEATURES=SKX)
    assert zmm > 0


def test_this_process_target():
    """The suite's own process: the suffix where numba's target is the AVX-512 host (and the suite did not ask
    for LLVM's tuning), none for an AVX2 target (tests/avx2_target.sh's Haswell features)."""
    from numba.core import config

    from pooled_predictor.ops.cpu.compiled import jit

    named = isa.target_features()
    if named is not None:
        assert jit.PREFERS_512 == (jit.PREFER_512 in named.split(","))
        assert config.CPU_FEATURES == named
    elif _host_avx512() and os.environ.get("POOLED_PREDICTOR_PREFER_256", "0") != "1":  # numba's target: the host
        assert jit.PREFERS_512 and config.CPU_FEATURES.endswith("," + jit.PREFER_512)
    elif not _host_avx512():
        assert not jit.PREFERS_512
