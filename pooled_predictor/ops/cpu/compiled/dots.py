"""One source, a module per u8 x s8 dot product: compiled/qgemm.py's and compiled/dqgemm.py's quad kernels
(4 k of uint8 X and int8 W in each 32-bit lane) with each lane's 4 products summed one of three ways.

    DOT           the step, per 32-bit lane: acc += ...                             where
    vpmaddubsw    sat16(x0 w0 + x1 w1) + sat16(x2 w2 + x3 w3)   (vpmaddubsw, vpmaddwd by ones: MLAS on AVX2)
    vpdpbusd      x0 w0 + x1 w1 + x2 w2 + x3 w3, exact          (one vpdpbusd: AVX512-VNNI / AVX-VNNI hosts)
    emulated      the same exact sum in generic IR (zext, sext, mul, add)  (any host: tests of the VNNI kernels'
                                                                             packing, indexing and epilogue)

(x unsigned, w signed bytes; Intel SDM, VPMADDUBSW / VPDPBUSD.) compiled/qgemm.py and compiled/dqgemm.py
read their module-level DOT (vpmaddubsw when imported as themselves); `vpdpbusd/<name>.py` and
`emulated/<name>.py` run the same source with DOT set (`instantiate`), as compiled/widths.py runs the
blocked kernels at 16 lanes: the kernels' names, signatures, packing and loops are the same, only the
dot step differs, and each is filed in numba's cache under its own name (CACHE_TAG). The vpdpbusd
modules compile only on a host with VNNI (LLVM cannot select the instruction elsewhere: it aborts);
ops/int8_arithmetic.dot_product() chooses.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from . import isa

__all__ = ["DOTS", "TEMPLATES", "instantiate", "module"]

DOTS = ("vpmaddubsw", "vpdpbusd", "emulated")
"""The dot products of the quad kernels (module docstring)."""

TEMPLATES = ("qgemm", "dqgemm")
"""The modules written over DOT."""

_PACKAGE = __name__.rpartition(".")[0]  # pooled_predictor.ops.cpu.compiled


def dot_here(module_globals: dict) -> str:
    """A template's DOT: what instantiate() set, else vpmaddubsw (the module imported as itself)."""
    return str(module_globals.get("DOT", "vpmaddubsw"))


def wide_of(module_globals: dict) -> bool:
    """A template's WIDE (wide_here() of its DOT): what instantiate() set, else False."""
    return bool(module_globals.get("WIDE", False))


def wide_here(dot: str) -> bool:
    """Whether `dot`'s 16-pixel tiles sum on one 512-bit vector a row (vpdpbusd on zmm: 64 products an
    instruction) rather than two 256-bit ones: exact dot products where the kernels are 16 lanes wide
    (isa.LANES, an AVX-512 host) and, for vpdpbusd, numba's target has AVX512-VNNI (AVX-VNNI alone has
    only the 256-bit form). The saturating vpmaddubsw kernels stay 256-bit (their code is pinned)."""
    if dot == "vpmaddubsw" or isa.LANES != 16:
        return False
    return dot == "emulated" or importlib.import_module(f"{_PACKAGE}.vnni").TARGET_VNNI512  # llvmlite: on first use


def instantiate(module_globals: dict, name: str, dot: str) -> None:
    """Run template `name`'s source in `module_globals` (a vpdpbusd/ or emulated/ module's) with DOT = dot.

    Raises:
        ValueError: an unknown template or dot product.
    """
    if name not in TEMPLATES or dot not in DOTS[1:]:
        raise ValueError(f"dots.instantiate: {name!r} at {dot!r}; expected one of {TEMPLATES} at one of {DOTS[1:]}")
    wide = wide_here(dot)
    path = Path(__file__).resolve().parent / f"{name}.py"
    module_globals.update(DOT=dot, WIDE=wide, CACHE_TAG=f"{dot}512" if wide else dot, __package__=_PACKAGE)
    exec(compile(path.read_text(), str(path), "exec"), module_globals)  # noqa: S102 -- our own template


def module(name: str, dot: str):
    """Template `name` with dot product `dot` (vpmaddubsw: the module itself), imported on demand.

    Raises:
        ValueError: an unknown template or dot product.
    """
    if name not in TEMPLATES or dot not in DOTS:
        raise ValueError(f"no {name!r} kernels with dot product {dot!r}; expected one of {TEMPLATES}, {DOTS}")
    if dot == "vpmaddubsw":
        return importlib.import_module(f"{_PACKAGE}.{name}")
    return importlib.import_module(f"{_PACKAGE}.{dot}.{name}")
