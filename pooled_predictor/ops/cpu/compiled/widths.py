"""One source, a kernel module per vector width: the blocked (NCHW<c>c) kernels at 8 and 16 lanes.

The blocked kernels' modules (nchwc_gemm.py, nchwc_depthwise.py, nchwc_winograd.py, nchwc_chain.py,
blocked.py) are written once over a module-level LANES: the channel block, the LLVM vector type of
their micro-kernels (<LANES x float>) and every stride follow it. Imported as themselves they are the
8-lane (NCHW8c) kernels; `lanes16/<name>.py` runs the same source again with LANES = 16 as a module of
its own (`instantiate`), so both widths' functions exist side by side, each compiled lazily on first
use (jit.py): a model compiles only its width's.

numba's disk cache keys a function on its source file, qualified name and signature, not on the module
globals baked into its IR: the 16-lane copy of a function would load the 8-lane machine code from the
cache. jit.njit therefore files a width's functions under their own cache names (`CACHE_TAG`, e.g.
`gemm_nchwc__w16`); the source file is the template's, so editing it invalidates both widths.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

__all__ = ["TEMPLATES", "instantiate", "lanes_here", "module", "sibling"]

TEMPLATES = ("nchwc_gemm", "nchwc_depthwise", "nchwc_winograd", "nchwc_chain", "blocked")
"""The modules written over LANES (in dependency order)."""

_PACKAGE = __name__.rpartition(".")[0]  # pooled_predictor.ops.cpu.compiled


def lanes_here(module_globals: dict) -> int:
    """A template's LANES: what instantiate() set, else 8 (the module imported as itself)."""
    return int(module_globals.get("LANES", 8))


def instantiate(module_globals: dict, name: str, lanes: int) -> None:
    """Run template `name`'s source in `module_globals` (a lanes<N>/ module's) with LANES = lanes.

    Relative imports in the template resolve against this package (its shared modules: gemm,
    epilogue, jit); its functions keep the template's file (numba's cache stamps) and are filed
    under cache names tagged with the width (module docstring).
    """
    if name not in TEMPLATES:
        raise ValueError(f"{name!r} is not a width template; expected one of {TEMPLATES}")
    path = Path(__file__).resolve().parent / f"{name}.py"
    module_globals.update(LANES=int(lanes), CACHE_TAG=f"w{int(lanes)}", __package__=_PACKAGE)
    code = compile(path.read_text(), str(path), "exec")
    exec(code, module_globals)  # noqa: S102 -- our own template, the width's module


def module(name: str, lanes: int):
    """Template `name` at `lanes` (8: the module itself; 16: lanes16/<name>.py), imported on demand."""
    if name not in TEMPLATES:
        raise ValueError(f"{name!r} is not a width template; expected one of {TEMPLATES}")
    if lanes == 8:
        return importlib.import_module(f"{_PACKAGE}.{name}")
    if lanes == 16:
        return importlib.import_module(f"{_PACKAGE}.lanes16.{name}")
    raise ValueError(f"no {lanes}-lane kernels; expected 8 or 16")


def sibling(module_globals: dict, name: str):
    """Template `name` at the width of the template running in `module_globals` (e.g. nchwc_chain's
    nchwc_gemm)."""
    return module(name, lanes_here(module_globals))


def loaded(lanes: int) -> list:
    """The templates' modules at `lanes` imported so far (none are imported by this)."""
    prefix = f"{_PACKAGE}." if lanes == 8 else f"{_PACKAGE}.lanes16."
    return [sys.modules[prefix + n] for n in TEMPLATES if prefix + n in sys.modules]
