"""What the CUDA kernels share: CuPy (imported here, optional), the compiled modules, launches, cuBLAS.

* CuPy is optional, imported on first use (`cupy.module()` is None without it) and `unavailable()` says why;
  the kernels stay registered (their coverage is the build's, `pooled-predictor ops --device cuda`)
  and engine/device.py refuses device="cuda" with a typed error before any is set up.
* Each kernels/*.cu file is compiled once per GPU (cupy.RawModule, NVRTC) on first use; KERNELS
  lists the functions each file must define (tests/test_cuda_compile.py checks them).
* Kernels launch on the calling thread's current CuPy stream: a pool worker runs its Net inside
  `with stream:` (engine/device.py), so a CUDA graph captured on that stream records them.
* GEMMs go to cuBLAS through nvmath-python with a handle per thread whose stream is set to the
  thread's current stream before each call that finds it changed -- so before a capture, whose
  first run is eager (CuPy's own matmul cannot be captured: DEVICE.md).
"""

from __future__ import annotations

import atexit
import os
import threading

import numpy as np

from . import sources

class _Cupy:
    """cupy, imported on first use: its import takes 1.5-2 s, which `import pooled_predictor` never pays
    on the CPU; `module()` is None on the CPU-only install (kernels registered, none set up)."""

    _lock = threading.Lock()

    def __init__(self):
        self._module, self._tried = None, False

    def module(self):
        if not self._tried:
            with self._lock:
                if not self._tried:
                    try:
                        import cupy as module  # noqa: PLC0415  (optional, and slow to import)
                    except ImportError:
                        module = None
                    self._module, self._tried = module, True
        return self._module

    def __getattr__(self, name):
        module = self.module()
        if module is None:
            raise ModuleNotFoundError(f"CuPy is not installed (cupy.{name} was asked for)")
        return getattr(module, name)


cupy = _Cupy()

THREADS = 256       # threads per block of the element-wise kernels (and the row kernels' blocks)
MAX_BLOCKS = 65535  # grid-stride loops: a larger n loops inside the kernel
NULL = np.uint64(0)  # an absent optional pointer argument (bias, residual)

# file -> the kernel functions the wrappers launch from it
KERNELS = {
    "elementwise.cu": ("unary_f32", "binary_f32", "bias_act_f32", "gemm_epilogue_f32"),
    "conv.cu": ("im2col_f32", "im2col_wide_f32", "conv_unfold_f32", "conv_epilogue_f32", "winograd_input_f32",
                "winograd_output_f32", "depthwise_f32"),
    "pooling.cu": ("pool2d_f32", "global_pool_f32"),
    "normalization.cu": ("softmax_f32", "layernorm_f32", "channel_affine_f32"),
    "rearrange.cu": tuple(f"{k}_{t}" for k in ("strided_copy", "gather_axis", "pad") for t in ("b1", "b2", "b4", "b8")),
    "resize.cu": ("resize_nearest_f32", "resize_linear_f32"),
    "reduce.cu": ("reduce_f32",),
    "attention.cu": ("sdpa_softmax_f32",),
    "logical.cu": (*(f"compare_{t}" for t in ("float", "double", "i64", "i32", "i8", "u8")), "logical_bool",
                   *(f"where_{t}" for t in ("b1", "b2", "b4", "b8")),
                   *(f"cast_{a}_{b}" for a in ("float", "double", "i64", "i32", "i8", "u8", "bool")
                     for b in ("float", "double", "i64", "i32", "i8", "u8", "bool") if a != b)),
}

_modules: dict = {}
_modules_lock = threading.Lock()
_local = threading.local()


def unavailable() -> str | None:
    """None when CUDA kernels can run here, else what is missing (CuPy, a driver, a GPU)."""
    if cupy.module() is None:
        return "CuPy is not installed (pip install 'pooled-predictor[gpu]': cupy-cuda13x, nvmath-python)"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # no driver: cudaErrorInsufficientDriver, cudaErrorNoDevice
        return f"CuPy {cupy.__version__} finds no CUDA device ({type(exc).__name__}: {exc})"
    if count < 1:
        return f"CuPy {cupy.__version__} finds no CUDA device"
    return None


def function(file: str, name: str):
    """The kernel `name` of kernels/`file` on the current GPU (the file compiled once per GPU)."""
    dev = cupy.cuda.runtime.getDevice()
    key = (dev, file)
    mod = _modules.get(key)
    if mod is None:
        with _modules_lock:
            mod = _modules.get(key)
            if mod is None:
                mod = cupy.RawModule(code=sources.sources()[file], options=(*sources.OPTIONS,
                                                                             f"-I{sources.KERNEL_DIR}"))
                mod.compile()
                _modules[key] = mod
    return mod.get_function(name)


def launch(fn, n: int, args: tuple, threads: int = THREADS) -> None:
    """One thread per element (grid-stride): n elements."""
    if n <= 0:
        return
    blocks = min((n + threads - 1) // threads, MAX_BLOCKS)
    fn((blocks,), (threads,), args)


def launch_planes(fn, cols: int, rows: int, planes: int, args: tuple) -> None:
    """A 3-D grid: x over `cols` elements of a row (threads: the power of two >= cols, 32 to THREADS), y over
    `rows`, z over `planes` (y and z at most 65535 blocks; the kernels loop past every grid dimension: conv.cu's
    im2col, unfold and epilogue, whose block's row and plane are uniform)."""
    if cols <= 0 or rows <= 0 or planes <= 0:
        return
    threads = 32
    while threads < cols and threads < THREADS:
        threads *= 2
    fn((min((cols + threads - 1) // threads, MAX_BLOCKS), min(rows, MAX_BLOCKS), min(planes, MAX_BLOCKS)),
       (threads,), args)


def launch_rows(fn, rows: int, args: tuple, threads: int = THREADS) -> None:
    """One block per row (the row kernels loop when rows > MAX_BLOCKS)."""
    if rows <= 0:
        return
    fn((min(rows, MAX_BLOCKS),), (threads,), args)


def row_threads(length: int) -> int:
    """Threads per block of a row kernel: a multiple of 32, at most 1024, about the row's length
    (a power of two: block_prod's tree needs one)."""
    t = 32
    while t < length and t < 1024:
        t *= 2
    return t


def device_array(a: np.ndarray):
    """A device copy of a host array (setup only: never inside a capture)."""
    return cupy.asarray(np.ascontiguousarray(a))


def i64(values) -> "cupy.ndarray":
    """A small int64 device array of launch metadata (shapes, strides), made at setup."""
    return device_array(np.asarray(list(values), np.int64).reshape(-1)) if len(values) else device_array(
        np.zeros(1, np.int64))


def f32(value) -> np.float32:
    return np.float32(value)


# ---- cuBLAS through nvmath-python -------------------------------------------------------------
TF32 = os.environ.get("PP_CUDA_TF32", "0") == "1"
"""PP_CUDA_TF32=1: cuBLAS may use TF32 tensor cores for float32 GEMMs (about 1e-3 relative error)."""


_FREE_HANDLES: dict[int, list] = {}  # device -> cuBLAS handles of threads that ended, for the next threads
_FREE_LOCK = threading.Lock()


class _BlasHandles:
    """One thread's cuBLAS handles, one per device it has called cuBLAS on, each with the stream last
    set on it. A thread that moves between devices keeps one handle per device (it made a new one
    at every move before). When the thread ends (CPython frees a finished thread's threading.local
    values) its handles go to a free list per device, which later threads take from before they
    create any: a pool started and stopped again and again holds as many handles as it ever had
    threads at once. They are not destroyed then: a CUDA graph captured with a handle keeps using
    its workspace, and a Net's graphs may outlive the thread that captured them; the free ones are
    destroyed at exit (free_blas_handles)."""

    def __init__(self, cublas):
        self.cublas = cublas
        self.by_device: dict[int, list] = {}  # device -> [handle, stream pointer set on it]

    def get(self, dev: int) -> list:
        entry = self.by_device.get(dev)
        if entry is None:
            with _FREE_LOCK:
                free = _FREE_HANDLES.get(dev)
                handle = free.pop() if free else None
            if handle is None:
                handle = self.cublas.create()
                if TF32:
                    self.cublas.set_math_mode(handle, self.cublas.Math.TF32_TENSOR_OP_MATH)
            entry = self.by_device[dev] = [handle, None]
        return entry

    def __del__(self):
        handles, self.by_device = self.by_device, {}
        with _FREE_LOCK:
            for dev, (handle, _) in handles.items():
                _FREE_HANDLES.setdefault(dev, []).append(handle)


def free_blas_handles() -> int:
    """cublasDestroy every handle on the free list (those of threads that ended); returns how many.
    Runs at exit; a thread's own handles are freed with it, as above."""
    with _FREE_LOCK:
        handles = [h for free in _FREE_HANDLES.values() for h in free]
        _FREE_HANDLES.clear()
    if not handles:
        return 0
    from nvmath.bindings import cublas  # noqa: PLC0415  (there are handles: it was imported)

    for handle in handles:
        try:
            cublas.destroy(handle)
        except Exception:  # noqa: BLE001 -- at interpreter exit the driver may be gone already
            pass
    return len(handles)


atexit.register(free_blas_handles)


def blas():
    """(nvmath.bindings.cublas, this thread's handle on the current device) with the handle's stream
    set to this thread's current CuPy stream (set again only when that changed: before a capture,
    never inside one that did not run eagerly first)."""
    handles = getattr(_local, "blas", None)
    if handles is None:
        from nvmath.bindings import cublas  # noqa: PLC0415  (optional: the gpu extra)

        handles = _local.blas = _BlasHandles(cublas)
    entry = handles.get(cupy.cuda.runtime.getDevice())
    stream = cupy.cuda.get_current_stream().ptr
    if entry[1] != stream:
        handles.cublas.set_stream(entry[0], stream)
        entry[1] = stream
    return handles.cublas, entry[0]


_ONE = np.ones(1, np.float32)
_ZERO = np.zeros(1, np.float32)
_ALPHAS: dict = {}  # alpha value -> a host float32 that lives as long as the process (cuBLAS reads its address)


def _host_scalar(v: float) -> int:
    if v == 1.0:
        return _ONE.ctypes.data
    a = _ALPHAS.get(v)
    if a is None:
        a = _ALPHAS.setdefault(v, np.full(1, v, np.float32))
    return a.ctypes.data


def gemm(a, b, c, m: int, n: int, k: int, *, trans_a=False, trans_b=False, alpha=1.0, lda=None, ldb=None,
         ldc=None, batch=1, stride_a=0, stride_b=0, stride_c=0, offset_a=0, offset_b=0, offset_c=0) -> None:
    """Row-major C (m, n) = alpha * op(A) (m, k) @ op(B) (k, n), `batch` times at the given strides
    (elements), through cublasSgemm(StridedBatched) on this thread's stream.

    A row-major matrix is the column-major transpose, so this computes C^T = op(B)^T op(A)^T:
    cuBLAS's A is our B and its B our A. a, b, c: float32 device arrays (offsets in elements).
    """
    cublas, handle = blas()
    lda = lda or (m if trans_a else k)
    ldb = ldb or (k if trans_b else n)
    ldc = ldc or n
    op_a = cublas.Operation.T if trans_a else cublas.Operation.N
    op_b = cublas.Operation.T if trans_b else cublas.Operation.N
    pa, pb, pc = a.data.ptr + 4 * offset_a, b.data.ptr + 4 * offset_b, c.data.ptr + 4 * offset_c
    if batch == 1:
        cublas.sgemm(handle, op_b, op_a, n, m, k, _host_scalar(alpha), pb, ldb, pa, lda, _ZERO.ctypes.data, pc, ldc)
    else:
        cublas.sgemm_strided_batched(handle, op_b, op_a, n, m, k, _host_scalar(alpha), pb, ldb, stride_b, pa, lda,
                                     stride_a, _ZERO.ctypes.data, pc, ldc, stride_c, batch)
