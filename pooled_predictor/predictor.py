"""Predictor: one canonical Net holding the weights, one Net per calling thread.

As fb-caffe-exts' Predictor: the model is loaded and compiled once; each thread
that calls forward() gets its own Net, created lazily on that thread's first
call, sharing the canonical weights (read-only) and owning its activations.
The three forward forms are fb-caffe-exts':

    predictor.forward(inputs, output_names)       -> list of arrays
    predictor.forward(inputs, output_names, out)  -> fills `out` in place
    predictor.forward(inputs)                     -> dict name -> array (every blob)

and `run(output_names, input_feed)` is onnxruntime's InferenceSession.run.
Returned arrays are copies: they stay valid after the next forward.
"""

from __future__ import annotations

import threading
from typing import Mapping, Sequence

import numpy as np

from .blas import limit_blas_threads, release_blas_threads
from .errors import InputError, UnknownBlobError
from .importers import load_onnx
from .ir import Graph, Value
from .net import Net, Optimization
from .program import Program


class Predictor:
    """Thread-safe inference over one model.

    Args:
        model: path, bytes or onnx.ModelProto (or an already imported Graph).
        device: "cpu" (numpy kernels) or "cuda".
        optimization: Optimization.MEMORY (default) places each Net's activations
            in one arena planned by memory_opt: intermediates are then readable
            only when named in `keep`. Optimization.NONE gives every blob its own
            memory and keeps all of them (fb-caffe-exts' names).
        planner: "arena" (offset planning to the liveness lower bound) or
            "shared" (fb-caffe-exts' shared-buffer baseline), under MEMORY.
        keep: intermediate blobs that stay readable under MEMORY (the graph
            passes leave them in place too).
        graph_optimization_level: "none", "basic", "extended" or "all" (default,
            as onnxruntime's): the passes run between import and compile (see
            pooled_predictor.passes); `optimization_report` says what they did.
        disabled_passes: pass names never to run (Paddle's delete_pass).
        cache_bytes: per-Net budget of cached layouts for other input shapes.
        disable_blas_threading: limit BLAS to one thread per call while this
            Predictor lives (fb-caffe-exts' default).
        enable_profiling: time every node of every Net (onnxruntime's option):
            `profiler` collects them; end_profiling() writes the Chrome trace.
    Raises:
        ModelLoadError: unreadable or invalid model file.
        UnsupportedOpError: ops without a kernel, all listed.
    """

    def __init__(self, model, *, device: str = "cpu", optimization: Optimization = Optimization.MEMORY,
                 planner: str = "arena", keep=(), cache_bytes: int = 256 << 20,
                 graph_optimization_level: str = "all", disabled_passes=(),
                 disable_blas_threading: bool = True, enable_profiling: bool = False):
        graph = model if isinstance(model, Graph) else load_onnx(model, device=device)
        self.imported_graph = graph
        self.optimization_report = None
        if graph_optimization_level != "none" or disabled_passes:
            from .passes import optimize

            # blobs named in `keep` stay: passes never remove or rename graph outputs
            keep_outputs = [k for k in keep if k not in graph.output_names]
            if keep_outputs:
                graph = graph.copy()
                graph.outputs = list(graph.outputs) + [Value(k) for k in keep_outputs]
            graph, self.optimization_report = optimize(graph, graph_optimization_level, disable=disabled_passes)
            if keep_outputs:
                graph.outputs = graph.outputs[:len(graph.outputs) - len(keep_outputs)]
        self.graph = graph
        self.device = device
        self.optimization = Optimization(optimization)
        self.program = Program(graph, device)
        self._net_options = dict(optimization=self.optimization, planner=planner, keep=tuple(keep),
                                 cache_bytes=cache_bytes)
        self.profiler = None
        if enable_profiling:
            from .profiling import Profiler

            self.profiler = Profiler()
        self.canonical_net = self.new_net()
        self._local = threading.local()
        self._nets_lock = threading.Lock()
        self._net_count = 0
        self._blas_token = limit_blas_threads(1) if disable_blas_threading else None

    def __del__(self):
        token = getattr(self, "_blas_token", None)
        if token is not None:
            release_blas_threads(token)
            self._blas_token = None

    # ---- description ---------------------------------------------------------
    @property
    def inputs(self) -> list[Value]:
        """The model's inputs: name, dtype, shape (ints, symbolic names or None)."""
        return list(self.program.inputs)

    @property
    def outputs(self) -> list[Value]:
        return list(self.program.outputs)

    @property
    def input_names(self) -> list[str]:
        return self.program.input_names

    @property
    def output_names(self) -> list[str]:
        return self.program.output_names

    @property
    def thread_net_count(self) -> int:
        """How many per-thread Nets have been created so far."""
        return self._net_count

    def new_net(self) -> Net:
        """A new Net over this model's shared weights, with the Predictor's options."""
        net = Net(self.program, **self._net_options)
        if self.profiler is not None:
            net.enable_profiling(self.profiler)
        return net

    def end_profiling(self, path=None) -> str | None:
        """Write the Chrome trace of what was profiled (onnxruntime's end_profiling).

        Args:
            path: the JSON file; None: pooled_predictor_profile_<date>_<time>.json here.
        Returns:
            the file written, or None when profiling is not enabled.
        """
        if self.profiler is None:
            return None
        if path is None:
            import time

            path = time.strftime("pooled_predictor_profile_%Y-%m-%d_%H-%M-%S.json")
        return self.profiler.write_trace(path)

    def net(self) -> Net:
        """This thread's Net (created on the first call from this thread)."""
        net = getattr(self._local, "net", None)
        if net is None:
            net = self._local.net = self.new_net()
            with self._nets_lock:
                self._net_count += 1
        return net

    def warmup(self, input_shapes: Mapping[str, Sequence[int]] | None = None) -> float:
        """Pay the first forward's one-time costs now: compiled kernels (numba's compile or
        disk-cache load), kernel setup and the canonical Net's layout.

        Args:
            input_shapes: name -> shape; None: the declared shapes, symbolic dims as 1.
        Returns:
            seconds it took.
        Raises:
            InputError, ShapeInferenceError: shapes the model does not take.
        """
        import time

        from .ops.cpu.compiled import load_all

        t0 = time.perf_counter()
        load_all()
        net = self.canonical_net
        shapes = net.check_shapes(input_shapes) if input_shapes is not None else net.default_input_shapes()
        feeds = {v.name: np.zeros(shapes[v.name], v.dtype if v.dtype is not None else np.float32)
                 for v in self.inputs}
        net.forward(feeds)
        return time.perf_counter() - t0

    # ---- forward -------------------------------------------------------------
    def forward(self, inputs, output_names: Sequence[str] | None = None, out: Sequence[np.ndarray] | None = None):
        """Run the model on this thread's Net.

        Args:
            inputs: list in input order, dict name -> array, or one array.
            output_names: blobs to return; with `out`, the blobs to copy into it.
            out: preallocated arrays, one per output name, filled in place
                (shape and dtype must match).
        Returns:
            list of arrays (output_names given), `out` (filled), or a dict
            name -> array of every readable blob (neither given): all blobs under
            Optimization.NONE; inputs, outputs and `keep` under MEMORY.
        Raises:
            InputError: bad inputs or `out` arrays; UnknownBlobError: unknown name;
            ShapeInferenceError, KernelError: the model rejects the inputs.
        """
        net = self.net()
        net.forward(inputs)
        if output_names is None:
            if out is not None:
                raise InputError("`out` needs `output_names`")
            return {n: np.array(net.blob_by_name(n)) for n in activation_names(net)}
        if isinstance(output_names, str):
            raise InputError("output_names must be a list of names, not a string")
        blobs = [net.blob_by_name(n) for n in output_names]
        if out is None:
            return [np.array(b) for b in blobs]
        if len(out) != len(blobs):
            raise InputError(f"{len(out)} `out` arrays for {len(blobs)} output names")
        for name, b, o in zip(output_names, blobs, out):
            if not isinstance(o, np.ndarray) or o.shape != b.shape or o.dtype != b.dtype:
                got = (getattr(o, "shape", None), getattr(o, "dtype", type(o).__name__))
                raise InputError(f"`out` for {name!r} must be an ndarray of shape {b.shape} "
                                 f"and dtype {b.dtype}, got {got}")
            np.copyto(o, b)
        return out

    def run(self, output_names: Sequence[str] | None, input_feed: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """onnxruntime's InferenceSession.run: outputs (None: all) for a feed dict."""
        return self.forward(dict(input_feed), list(output_names or self.output_names))


def activation_names(net: Net) -> list[str]:
    """The names of a Net's readable blobs: inputs and computed values (no weights)."""
    weights = net.program.weights
    return [n for n in net.blob_names if n not in weights]


__all__ = ["Predictor", "UnknownBlobError"]
