"""Compiled CPU kernels: plain numba loops where numpy cannot fuse passes over memory
or vectorize (per-pixel sampling).

Every function is ``@njit(<explicit signature>, nogil=True, cache=True)``: one or
two specializations each (float32; the sampling loops float32 and float64, callers
cast float16 to float32 around them); the GIL is released while it runs; no threads
of its own (the pool's workers are the parallelism); machine code cached on disk.
`njit` here is jit.py's: a function compiles (or loads from the disk cache) when a
kernel first needs it, not at import, so a model pays only for what it calls. The
numpy kernels they replace stay as the tested reference (tests/ops/test_compiled.py)
and serve while a cold cache's kernels compile in the background (engine/tiering.py):
builders ask active(), which reference_kernels() turns off in its thread.

numba's cache goes beside this package when that directory is writable, else
under ~/.cache/pooled-predictor/numba (NUMBA_CACHE_DIR, set here before numba
is imported unless the user set it): an installed, read-only package still
compiles once per machine, not once per process. numba invalidates a cached
function when its own file changes, not when a function it inlines from another
module does (expf.exp32, epilogue's activations, gemm's micro-kernels), so jit.py
stamps every cache entry with a digest of all this package's sources too
(jit.sources_digest): editing any kernel source recompiles every kernel on first
use, and none runs a callee's old code.

Modules: epilogue.py (activations applied to an output block in cache; GELU;
erf), expf.py (a vectorizable float32 exp), gemm.py (packed-weight GEMM with bias
and activation fused), softmax.py (Softmax rows), depthwise.py (depthwise
convolution with bias and activation fused), winograd.py (Winograd F(2x2,3x3) and
F(4x4,3x3) transforms), sampling.py (GridSample, RoiAlign, DeformConv sampling),
pooling.py (2-D MaxPool / AveragePool),
sigmoid.py (a vectorized float32 Sigmoid), col2im.py (ConvTranspose's tile
scatter; for kernel width 2 the GEMM and the scatter in one pass), resize.py
(nearest and bilinear Resize), matmul.py (MatMul / Gemm with a weight as right
operand: packed panels, A read in place, the bias fused), rowreduce.py (sums and
means over trailing axes: ReduceMean, ReduceSum, GlobalAveragePool), lrn.py (LRN across channels), phases.py (the
stride-phase split of a padded input, for the indirect and depthwise convolutions);
the NCHW8c kernel types' (ops/cpu/conv_nchwc.py, blocked.py): nchwc_gemm.py (the
pointwise and stem convolutions' micro-kernel, 6 pixels x 16 output channels),
nchwc_depthwise.py (depthwise convolution, a tile of 8 pixels a call), nchwc_chain.py (a 1x1
convolution and the depthwise convolution reading it, a group of channels at a time), nchwc_winograd.py
(Winograd F(4x4,3x3) with both transforms on 8-channel vectors), reorder.py
(NCHW <-> NCHW8c, 8x8 register transposes), blocked.py (spatial means, per-channel
Add/Sub/Mul, nearest Resize, MaxPool over NCHW8c arrays); the 8-bit integer kernels: qgemm.py (u8/s8
GEMM with exact int32 sums, vpmaddwd, and the requantization fused; QLinearConv, DynamicQuantizeMatMul in exact
sums), dqgemm.py (DynamicQuantizeLinear, the saturating u8 x s8 GEMM and the float scale and bias in one call:
DynamicQuantizeMatMul, MatMulIntegerToFloat under onnxruntime's arithmetic), dots.py (qgemm.py's and
dqgemm.py's u8 x s8 quad kernels again with vpdpbusd, VNNI hosts, or its emulation: vpdpbusd/, emulated/),
qconv.py (the 8-bit phase split, int8 depthwise convolution along a channel's pixels), qdepthwise.py (int8
depthwise convolution with 8 channels in the lanes, two taps a vpmaddwd), quantize.py (per-tensor Quantize /
DequantizeLinear in one pass); recurrent.py (RNN, GRU and LSTM, ops/cpu/recurrent.py:
a whole node per call, its small-row GEMM and float32 Tanh / Sigmoid); fc.py (FusedGemm's product and
activation in one call); transpose.py (Transpose as tiled 8 x 8 register transposes); nms.py (greedy non-maximum
suppression, ops/nms.py's procedure with the boxes that cannot overlap skipped).

Vector width: isa.py detects the host's (8 float32 lanes on AVX2, 16 on AVX-512;
POOLED_PREDICTOR_ISA overrides). The blocked kernels (nchwc_*.py, blocked.py) are
templates over it (widths.py): imported as themselves they are the 8-lane NCHW8c kernels,
lanes16/ holds the same sources at 16 lanes (NCHW16c), both registered as kernel types;
a Net lays its chains out at the width isa.lanes() gave when it was made. matmul.py has a
kernel at each width (matmul_const / matmul_const16, matmul_rows8 / 16), chosen by isa.lanes() when
a MatMul / Gemm kernel is built. The other modules (gemm.py's NCHW GEMM, softmax.py, ...) are 8
lanes wide.
"""


from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

__all__ = ["ENABLED", "TIERED", "NotCached", "active", "bound", "cache_dir", "cache_only", "chain", "compile_inline",
           "discovering", "ensure", "ensure_all", "is_pending", "load_all", "memory_only", "prepared",
           "reference_kernels", "reference_tier", "run_steps", "tiered"]

ENABLED = os.environ.get("POOLED_PREDICTOR_COMPILED", "1") != "0"
"""Kernels built from now on use the compiled paths where they apply; False: the
numpy paths, the tested reference (tests/ops/test_compiled.py compares the two)."""

TIERED = os.environ.get("POOLED_PREDICTOR_TIERED", "1") != "0"
"""Tiered execution (engine/tiering.py): a Net whose compiled kernels are not in numba's
cache yet runs the numpy reference kernels while they compile in the background, and
switches over when they are ready; False: the first forward compiles what it needs
before it runs (the test suite's setting, tests/conftest.py)."""


def cache_dir() -> Path | None:
    """Where numba caches our kernels when the package directory is not writable (None: beside it)."""
    here = Path(__file__).resolve().parent
    pycache = here / "__pycache__"
    if os.access(pycache if pycache.exists() else here, os.W_OK):
        return None
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "pooled-predictor" / "numba"


def _configure_cache() -> None:
    if os.environ.get("NUMBA_CACHE_DIR"):
        return
    where = cache_dir()
    if where is None:
        return
    where.mkdir(parents=True, exist_ok=True)
    os.environ["NUMBA_CACHE_DIR"] = str(where)
    if "numba" in sys.modules:  # imported already: numba read its config at import
        from numba.core import config

        config.CACHE_DIR = str(where)


_configure_cache()

from . import isa, widths  # noqa: E402
from .tiers import (NotCached, cache_only, compile_inline, discovering, memory_only,  # noqa: E402
                    reference_kernels, state as _state, tiered_mode)


def _jit():
    """compiled/jit.py where a kernel module has imported it (and numba with it), else None."""
    return sys.modules.get(f"{__name__}.jit")


def ensure(fn) -> None:
    """jit.ensure(fn): compile (or load) fn's explicit signatures once; a no-op for anything else,
    and before any kernel module (so numba) is imported."""
    jit = _jit()
    if jit is not None:
        jit.ensure(fn)


def ensure_all() -> None:
    """jit.ensure_all(): every function with explicit signatures defined so far (none before numba is)."""
    jit = _jit()
    if jit is not None:
        jit.ensure_all()


def is_pending(fn) -> bool:
    """jit.is_pending(fn): whether fn has explicit signatures not compiled in this process yet."""
    jit = _jit()
    return jit is not None and jit.is_pending(fn)


def __getattr__(name: str):
    """The kernel modules (MODULES, qgemm, ...) imported on first use, so that importing the package
    imports neither them nor numba (about 0.5 s of a warm start, issue 31): `compiled.gemm.gemm2d`."""
    if name.startswith("_") or not (Path(__file__).parent / f"{name}.py").is_file():
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return importlib.import_module(f"{__name__}.{name}")


def active() -> bool:
    """Whether kernels built now, in this thread, take their compiled paths: ENABLED, and not
    inside reference_kernels(). Kernel builders ask this, never ENABLED itself."""
    return ENABLED and not getattr(_state, "reference", False)


def reference_tier() -> bool:
    """Whether kernels built now, in this thread, serve a tiered Net's reference layout: compiled
    kernels ENABLED, but reference_kernels() in force (the plain numpy reference, ENABLED False, is
    not one). Such kernels serve a few first forwards: they copy no weights, and split their large
    products over the idle cores (ops/cpu/reference_split.py)."""
    return ENABLED and getattr(_state, "reference", False)


def tiered() -> bool:
    """Whether a Net built in this thread now tiers its kernels: TIERED and ENABLED, outside
    compile_inline() (engine/tiering.py)."""
    return TIERED and ENABLED and tiered_mode()


MODULES = ("epilogue", "expf", "gemm", "softmax", "depthwise", "winograd", "sampling", "pooling", "sigmoid", "col2im",
           "resize", "rowreduce", "phases", "matmul", "nchwc_gemm", "nchwc_depthwise", "nchwc_winograd", "reorder",
           "blocked", "lrn", "recurrent", "layernorm", "nms", "fc", "transpose")


def load_all() -> float:
    """Compile (or load from numba's disk cache) every compiled kernel with explicit signatures,
    whether a model needs it or not: `pooled-predictor warmup` with no model. (Importing the
    modules compiles nothing: compiled/jit.py.)

    Returns:
        seconds it took: minutes on a fresh machine, about a second once numba's cache holds them.
    """
    import importlib
    import time

    t0 = time.perf_counter()
    for name in MODULES:
        importlib.import_module(f"{__name__}.{name}")
    for name in widths.TEMPLATES:  # the blocked kernels at the host's width (the 8-lane ones are MODULES)
        widths.module(name, isa.LANES)
    dots, vnni = (importlib.import_module(f"{__name__}.{m}") for m in ("dots", "vnni"))  # on first use

    for name in dots.TEMPLATES:  # the u8 x s8 quad kernels: vpmaddubsw, and vpdpbusd where it compiles
        dots.module(name, "vpmaddubsw")
        if vnni.DETECTED_VNNI and vnni.TARGET_VNNI:
            dots.module(name, "vpdpbusd")
    ensure_all()
    return time.perf_counter() - t0


def bound(fn, *args):
    """A zero-argument callable that runs fn(*args), for arguments fixed from now on.

    For a numba function, the callable is the specialization numba's dispatcher would choose
    for these arguments (its typing context's overload resolution over the explicit
    signatures), called directly: the per-call type dispatch is paid once, here (about
    0.8 us of a 1.8 us call of 17 arguments, measured), not on every forward. A Net
    binds its kernels' arrays once per input shape (engine/layout.py: _prepared, prepare_run), so
    the argument types cannot change under it. Anything else, or arguments no
    specialization takes, gets an ordinary functools.partial (dispatched per call, and
    raising what a call would).
    """
    from functools import partial

    found = getattr(_state, "discover", None)
    if found is not None and is_pending(fn):  # discovering(): noted, compiled later (engine/compile_worker.py)
        found.append(fn)
        return partial(fn, *args)
    ensure(fn)  # its explicit signatures: compiled on first use (raises NotCached in cache-only mode)
    overloads = getattr(fn, "overloads", None)
    if overloads:
        try:
            sig = fn.typingctx.resolve_overload(fn.py_func, fn.nopython_signatures,
                                                tuple(fn.typeof_pyval(a) for a in args), {},
                                                allow_ambiguous=False)
            cres = overloads.get(tuple(sig.args)) if sig is not None else None
        except Exception:  # no unique specialization: leave it to the dispatcher
            cres = None
        if cres is not None:
            call = importlib.import_module(f"{__name__}.native_runs").Bound(cres.entry_point, *args)
            call.cres = cres
            return call
    return partial(fn, *args)


def chain(*calls):
    """One zero-argument callable running `calls` (zero-argument callables; None skipped) in order
    (with none: a callable that does nothing)."""
    calls = tuple(c for c in calls if c is not None)
    if len(calls) == 1:
        return calls[0]

    def run():
        for c in calls:
            c()

    run.calls = calls  # native_runs.fusible() reads them
    return run


def run_steps(steps) -> None:
    """Run steps, a sequence of (function, arguments), in order: prepared()'s calls, dispatched per call."""
    for fn, args in steps:
        fn(*args)


def prepared(steps):
    """chain() of bound() calls: steps, a sequence of (function, arguments), as one zero-argument callable."""
    return chain(*[bound(fn, *args) for fn, args in steps])
