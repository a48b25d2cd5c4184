"""Every CUDA C source of ops/cuda/kernels compiles for sm_80 and sm_90, with no GPU.

The compiler: NVRTC through cupy.cuda.nvrtc (what cupy.RawModule uses at run time) where CuPy and
libnvrtc load; else nvcc (/usr/local/bin/nvcc, on the developers' machines and CI: DEVICE.md);
the test skips only when neither is there. Where both are, NVRTC is the one tested (it is what
runs); PP_CUDA_COMPILER=nvcc picks nvcc. A compile error fails the test with the compiler's log.
"""

from __future__ import annotations

import os

import pytest

from pooled_predictor.ops.cuda import sources


def _compiler() -> str | None:
    wanted = os.environ.get("PP_CUDA_COMPILER")
    if wanted in ("nvrtc", "nvcc"):
        return wanted
    if sources.nvrtc_usable() is None:
        return "nvrtc"
    return "nvcc" if sources.nvcc_path() else None


COMPILER = _compiler()
pytestmark = pytest.mark.skipif(COMPILER is None, reason="neither NVRTC (cupy + libnvrtc) nor nvcc is installed "
                                f"(NVRTC: {sources.nvrtc_usable()})")


def test_the_kernel_sources_are_found():
    names = set(sources.sources())
    assert {"attention.cu", "conv.cu", "elementwise.cu", "logical.cu", "normalization.cu", "pooling.cu",
            "rearrange.cu", "reduce.cu", "resize.cu"} <= names
    assert "#pragma once" in sources.header()


@pytest.mark.parametrize("arch", sources.ARCHS)
@pytest.mark.parametrize("name", sorted(sources.sources()))
def test_source_compiles(name, arch):
    cubin = sources.compile_cubin(name, arch, COMPILER)
    assert cubin[:4] == b"\x7fELF"  # a cubin is an ELF image


@pytest.mark.parametrize("name", sorted(sources.sources()))
def test_the_kernels_runtime_asks_for_exist(name):
    """Every kernel name the Python wrappers launch (runtime.KERNELS) is a symbol of the compiled file:
    `extern "C"` names appear unmangled in the cubin's symbol table (macro instantiations included),
    and every .cu file is listed."""
    from pooled_predictor.ops.cuda import runtime

    assert name in runtime.KERNELS, f"{name} is not in ops/cuda/runtime.KERNELS"
    cubin = sources.compile_cubin(name, "sm_90", COMPILER)
    missing = sorted(k for k in runtime.KERNELS[name] if b"\0" + k.encode() + b"\0" not in cubin)
    assert not missing, f"{name} does not define {missing}"


def test_a_compile_error_fails(tmp_path, monkeypatch):
    """A broken source raises CompileError with the log (the test can fail)."""
    (tmp_path / "broken.cu").write_text('#include "common.cuh"\nextern "C" __global__ void k(float* x) { x[0] = y; }\n')
    (tmp_path / sources.HEADER).write_text(sources.header())
    monkeypatch.setattr(sources, "KERNEL_DIR", tmp_path)
    with pytest.raises(sources.CompileError, match="broken.cu"):
        sources.compile_cubin("broken.cu", "sm_90", COMPILER)
