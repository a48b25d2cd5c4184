"""The CUDA C sources of the kernels (kernels/*.cu) and how they are compiled.

Every .cu file includes kernels/common.cuh and nothing else (NVRTC has no standard headers).
At run time ops/cuda/runtime.py loads each file once per device with cupy.RawModule, compiled by
CuPy's NVRTC with OPTIONS. compile_cubin() compiles a file without a GPU, for a given
architecture, through NVRTC (cupy.cuda.nvrtc) where CuPy and libnvrtc load, else through nvcc:
the compile test (tests/test_cuda_compile.py) runs it for sm_80 and sm_90 in CI.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

KERNEL_DIR = Path(__file__).resolve().parent / "kernels"
HEADER = "common.cuh"
OPTIONS = ("--std=c++17",)  # RawModule adds the architecture of the device it loads on
ARCHS = ("sm_80", "sm_90")  # the compile test's: A100 and H100 / H200
NVCC = os.environ.get("NVCC", "/usr/local/bin/nvcc")


class CompileError(RuntimeError):
    """A .cu source failed to compile; the message holds the compiler's log."""


def sources() -> dict[str, str]:
    """file name (e.g. "conv.cu") -> its CUDA C text, every kernel file, sorted by name."""
    return {p.name: p.read_text() for p in sorted(KERNEL_DIR.glob("*.cu"))}


def header() -> str:
    return (KERNEL_DIR / HEADER).read_text()


def nvrtc_usable() -> str | None:
    """None when cupy.cuda.nvrtc can compile here, else why not (no cupy, no libnvrtc)."""
    try:
        from cupy.cuda import nvrtc  # noqa: PLC0415  (optional: cupy stays out of CPU-only imports)

        nvrtc.getVersion()
        return None
    except Exception as exc:  # ImportError, or libnvrtc not found by cuda-pathfinder
        return f"{type(exc).__name__}: {exc}"


def nvcc_path() -> str | None:
    """nvcc's path when it is installed (NVCC, else /usr/local/bin/nvcc, else on PATH), or None."""
    if os.path.exists(NVCC):
        return NVCC
    return shutil.which("nvcc")


def compile_cubin(name: str, arch: str, compiler: str = "nvrtc") -> bytes:
    """Compile one kernel file (a name from sources()) to a cubin for `arch` ("sm_90").

    Args:
        compiler: "nvrtc" (cupy.cuda.nvrtc: what RawModule uses at run time) or "nvcc".
    Raises:
        CompileError: the source does not compile (the compiler's log in the message).
        RuntimeError: the compiler is not available here.
    """
    src = (KERNEL_DIR / name).read_text()
    if compiler == "nvrtc":
        from cupy.cuda import nvrtc  # noqa: PLC0415

        prog = nvrtc.createProgram(src, name, [header().encode()], [HEADER.encode()])
        try:
            try:
                nvrtc.compileProgram(prog, [f"-arch={arch}", *OPTIONS])
            except nvrtc.NVRTCError as exc:
                raise CompileError(f"{name} ({arch}, NVRTC): {exc}\n{nvrtc.getProgramLog(prog)}") from None
            return nvrtc.getCUBIN(prog)
        finally:
            nvrtc.destroyProgram(prog)
    nvcc = nvcc_path()
    if nvcc is None:
        raise RuntimeError("nvcc is not installed")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "k.cubin"
        r = subprocess.run([nvcc, f"-arch={arch}", "-cubin", *OPTIONS, "-I", str(KERNEL_DIR), "-o", str(out),
                            str(KERNEL_DIR / name)], capture_output=True, text=True)
        if r.returncode != 0:
            raise CompileError(f"{name} ({arch}, nvcc): exit {r.returncode}\n{r.stderr}")
        return out.read_bytes()
