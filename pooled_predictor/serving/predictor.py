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

import os
import threading
import time
from typing import Mapping, Sequence

import numpy as np

from .. import budget
from . import model_cache
from ..engine.net import Net, Optimization
from ..engine.profiling import Profiler
from ..engine.inputs import outputs_on_device, owned_copies
from ..engine.program import Program
from ..errors import InputError, UnknownBlobError
from ..importers import load_caffe, load_model
from ..ir import Graph, Value
from ..ops import int8_arithmetic as int8_arithmetic_
from ..ops.cpu.compiled import compile_inline, isa
from ..passes import optimize
from .blas import limit_blas_threads, release_blas_threads
from .paddle_api import HandleAPI


class Predictor(HandleAPI):
    """Thread-safe inference over one model.

    Args:
        model: ONNX path, bytes or onnx.ModelProto; a Caffe pair (prototxt,
            caffemodel) of paths or of (text, binary) contents; or an already
            imported Graph. For Caffe models, see also paths(), strings() and
            hdf5_paths() (fb-caffe-exts' factories).
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
        external_data_dir: directory of the model's external data files
            (default: the model file's directory; required for bytes or a
            ModelProto with external data). Nothing outside it is read.
        memory_limit_bytes: budget in bytes (None: budget.default_memory_limit(),
            0.8 of the memory this process may use) for the weights at load and
            for each Net's layout at reshape (see pooled_predictor.budget).
        enable_profiling: time every node of every Net (onnxruntime's option):
            `profiler` collects them; end_profiling() writes the Chrome trace.
        cuda_graphs: on "cuda", CUDA graphs kept per Net (0: none): a layout run
            wholly on the GPU is captured on its second run and replayed after,
            on a thread whose current stream is its own (a pool worker's, or
            inside `with cupy.cuda.Stream():`); see engine.net.Net.
        output_device: where forward() returns outputs by default (its output_device
            overrides it per call): "cpu" (numpy arrays) or, on device "cuda", "cuda"
            (CuPy arrays, copied on the GPU; ONNX Runtime IOBinding's bind_output). Inputs may
            be CuPy arrays or any DLPack producer either way (engine/inputs.py).
        cache_dir: the model cache (pooled_predictor/serving/model_cache.py: an ONNX file's optimized graph and
            weights, kept on disk and found again by the file's bytes, the code and the CPU): None, the
            default directory (POOLED_PREDICTOR_CACHE_DIR, else ~/.cache/pooled-predictor/models);
            a path; or False, off. `cached` says whether this Predictor's graph came from it.
        int8_arithmetic: the quantized kernels' u8 x s8 arithmetic, "onnxruntime" (default:
            onnxruntime's sums on this host, int16-saturated pairs where it lacks VNNI) or
            "exact" (pooled_predictor/ops/int8_arithmetic.py); None: its current().
    Raises:
        ValueError: an output_device the Predictor does not run on.
        ModelLoadError: unreadable or invalid model file, external data outside
            its directory, any failure of a graph pass (naming it).
        UnsupportedOpError: ops without a kernel, all listed.
        ResourceExhaustedError: weights or folded constants over memory_limit_bytes.
    """

    def __init__(self, model, *, device: str = "cpu", optimization: Optimization = Optimization.MEMORY,
                 planner: str = "arena", keep=(), cache_bytes: int = 256 << 20,
                 graph_optimization_level: str = "all", disabled_passes=(),
                 disable_blas_threading: bool = True, external_data_dir=None, memory_limit_bytes: int | None = None,
                 enable_profiling: bool = False, cuda_graphs: int = 8, output_device: str = "cpu",
                 int8_arithmetic: str | None = None, cache_dir=None):
        self.memory_limit_bytes = limit = budget.resolve_limit(memory_limit_bytes)
        self._model_source = (model, external_data_dir)
        key_options = {"device": device, "level": graph_optimization_level,
                       "disabled": sorted(map(str, disabled_passes)), "keep": [str(k) for k in keep],
                       "memory_limit_bytes": memory_limit_bytes, "external_data_dir":
                           None if external_data_dir is None else os.path.abspath(os.fspath(external_data_dir))}
        hit, pending = (None, None) if isinstance(model, Graph) else model_cache.lookup(
            model, model_cache.resolve_dir(cache_dir), key_options)
        self.cached = hit is not None
        if hit is not None:
            self._imported_graph = None  # imported again only if asked for (imported_graph)
            self.graph, self.optimization_report = hit
            budget.check(sum(int(a.nbytes) for a in self.graph.weights.values()), limit,
                         f"model {self.graph.source!r}: the weights")
        else:
            self._build_graph(model, device, external_data_dir, limit, keep, graph_optimization_level,
                              disabled_passes, pending)
        self.device = device
        self.optimization = Optimization(optimization)
        self.program = Program(self.graph, device, memory_limit_bytes=limit)
        self._net_options = dict(optimization=self.optimization, planner=planner, keep=tuple(keep), lanes=isa.lanes(),
                                 cache_bytes=cache_bytes, memory_limit_bytes=limit, cuda_graphs=cuda_graphs,
                                 int8_arithmetic=int8_arithmetic_.validate(
                                     int8_arithmetic or int8_arithmetic_.current()))
        self.profiler = None
        if enable_profiling:
            self.profiler = Profiler()
        self.canonical_net = self.new_net()
        try:
            outputs_on_device(output_device, self.canonical_net.device)
        except InputError as exc:
            raise ValueError(str(exc)) from None
        self.output_device = output_device
        self._local = threading.local()
        self._nets_lock = threading.Lock()
        self._net_count = 0
        self._blas_token = limit_blas_threads(1) if disable_blas_threading else None

    def _build_graph(self, model, device, external_data_dir, limit, keep, graph_optimization_level, disabled_passes,
                     pending) -> None:
        """Import and optimize the model (not found in the model cache); queue its entry's writing."""
        graph = model if isinstance(model, Graph) else load_model(
            model, device=device, external_data_dir=external_data_dir, memory_limit_bytes=limit,
            data=None if pending is None else pending.data, facts=None if pending is None else pending.facts)
        self._imported_graph = graph
        self.optimization_report = None
        if graph_optimization_level != "none" or disabled_passes:
            # blobs named in `keep` stay: passes never remove or rename graph outputs
            keep_outputs = [k for k in keep if k not in graph.output_names]
            if keep_outputs:
                graph = graph.copy()
                graph.outputs = list(graph.outputs) + [Value(k) for k in keep_outputs]
            graph, self.optimization_report = optimize(graph, graph_optimization_level, disable=disabled_passes,
                                                       memory_limit_bytes=limit)
            if keep_outputs:
                graph.outputs = graph.outputs[:len(graph.outputs) - len(keep_outputs)]
        self.graph = graph
        if pending is not None:
            pending.store_later(graph, self.optimization_report)

    @property
    def imported_graph(self) -> Graph:
        """The Graph as imported, before the passes (imported again when the optimized one came from the
        model cache)."""
        if self._imported_graph is None:
            model, external_data_dir = self._model_source
            self._imported_graph = load_model(model, device=self.device, external_data_dir=external_data_dir,
                                              memory_limit_bytes=self.memory_limit_bytes)
        return self._imported_graph

    # ---- fb-caffe-exts' factories (Caffe models) --------------------------------------
    @classmethod
    def paths(cls, prototxt_path, weights_path, optimization: Optimization = Optimization.MEMORY,
              disable_blas_threading: bool = True, **kwargs) -> "Predictor":
        """A Predictor of a Caffe model from a prototxt and a caffemodel path (Predictor::paths).

        Raises:
            ModelLoadError: unreadable files or missing weights (names file and layer);
            UnsupportedOpError: every unsupported layer type at once.
        """
        return cls(load_caffe(prototxt_path, weights_path, device=kwargs.get("device", "cpu")),
                   optimization=optimization, disable_blas_threading=disable_blas_threading, **kwargs)

    @classmethod
    def strings(cls, text_prototxt, binary_weights, optimization: Optimization = Optimization.MEMORY,
                disable_blas_threading: bool = True, **kwargs) -> "Predictor":
        """A Predictor of a Caffe model from the prototxt text and the caffemodel bytes (Predictor::strings)."""
        if isinstance(text_prototxt, str):
            text_prototxt = text_prototxt.encode()
        return cls(load_caffe(text_prototxt, bytes(binary_weights), device=kwargs.get("device", "cpu")),
                   optimization=optimization, disable_blas_threading=disable_blas_threading, **kwargs)

    @classmethod
    def hdf5_paths(cls, prototxt_path, hdf5_weights_path, optimization: Optimization = Optimization.MEMORY,
                   disable_blas_threading: bool = True, **kwargs) -> "Predictor":
        """A Predictor of a Caffe model whose weights are in Caffe's HDF5 layout (Predictor::hdf5_paths).

        Needs h5py (the `hdf5` extra).
        """
        return cls(load_caffe(prototxt_path, hdf5_weights_path, weights_format="hdf5",
                              device=kwargs.get("device", "cpu")),
                   optimization=optimization, disable_blas_threading=disable_blas_threading, **kwargs)

    def clone(self) -> "Predictor":
        """A new Predictor over the same compiled model and weights (Paddle's Predictor.clone).

        Nothing is imported or compiled again; the clone has its own Nets
        (activations) and its own handles.
        """
        other = object.__new__(type(self))
        shared = ("_imported_graph", "_model_source", "cached", "optimization_report", "graph", "device",
                  "optimization", "program",
                  "_net_options", "memory_limit_bytes", "profiler", "output_device")
        other.__dict__.update({k: self.__dict__[k] for k in shared})
        other.canonical_net = other.new_net()
        other._local = threading.local()
        other._nets_lock = threading.Lock()
        other._net_count = 0
        other._blas_token = limit_blas_threads(1) if self._blas_token is not None else None
        return other

    # ---- Paddle's handle API (pooled_predictor/paddle_api.py) -----------------------------
    def _handle_inputs(self) -> list[Value]:
        return self.program.inputs

    def _handle_outputs(self) -> list[Value]:
        return self.program.outputs

    def _handle_run(self, arrays: dict) -> dict:
        return self.net().forward(arrays, self.output_names, share_inputs=True)

    def __del__(self):
        token = getattr(self, "_blas_token", None)
        if token is not None:
            self._blas_token = None
            try:
                release_blas_threads(token)
            except NameError:  # at interpreter exit, threadpoolctl's builtins are gone: nothing to restore
                pass

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

    def new_net(self, device=None) -> Net:
        """A new Net over this model's shared weights, with the Predictor's options.

        Args:
            device: where the Net lays out ("cuda:1", an engine.device.Device); None: the
                Predictor's device. Weights are placed once per device and shared.
        """
        net = Net(self.program, device=device, **self._net_options)
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
            path = time.strftime("pooled_predictor_profile_%Y-%m-%d_%H-%M-%S.json")
        return self.profiler.write_trace(path)

    def net(self, device=None) -> Net:
        """This thread's Net (created on the first call from this thread).

        Args:
            device: None (the Predictor's device), or another device this thread's Net for it is
                on (a pool worker on one of several GPUs, Config.devices): one Net per thread and device.
        """
        if device is None:
            net = getattr(self._local, "net", None)
            if net is None:
                net = self._local.net = self.new_net()
                with self._nets_lock:
                    self._net_count += 1
            return net
        nets = getattr(self._local, "nets", None)
        if nets is None:
            nets = self._local.nets = {}
        net = nets.get(device)
        if net is None:
            net = nets[device] = self.new_net(device)
            with self._nets_lock:
                self._net_count += 1
        return net

    def warmup(self, input_shapes: Mapping[str, Sequence[int]] | None = None) -> float:
        """Pay the first forward's one-time costs now: the compiled kernels this model calls at
        these shapes (numba's compile, or its disk-cache load; nothing else is compiled), kernel
        setup and the canonical Net's layout. Tiered or not, the compile happens here, so the
        first request runs the compiled kernels (engine/tiering.py).

        Args:
            input_shapes: name -> shape; None: the declared shapes, symbolic dims as 1.
        Returns:
            seconds it took.
        Raises:
            InputError, ShapeInferenceError: shapes the model does not take.
        """
        t0 = time.perf_counter()
        net = self.canonical_net
        shapes = net.input_spec.check_shapes(input_shapes) if input_shapes is not None else net.default_input_shapes()
        feeds = {v.name: np.zeros(shapes[v.name], v.dtype if v.dtype is not None else np.float32)
                 for v in self.inputs}
        with compile_inline():
            net.forward(feeds)
        return time.perf_counter() - t0

    # ---- forward -------------------------------------------------------------
    def forward(self, inputs, output_names: Sequence[str] | None = None, out: Sequence[np.ndarray] | None = None,
                *, output_device: str | None = None):
        """Run the model on this thread's Net.

        Args:
            inputs: list in input order, dict name -> array, or one array
                (None is refused: unlike a bare Net's ForwardPrefilled, this
                thread's Net may hold another request's inputs). Arrays: numpy,
                DLPack producers on the CPU (numpy.from_dlpack, no copy), and on
                device "cuda" CuPy / CUDA DLPack arrays (PyTorch, JAX), copied GPU to
                GPU into the Net, never through the host; on "cpu" a device array is
                an InputError (engine/inputs.py).
            output_names: blobs to return; with `out`, the blobs to copy into it.
            out: preallocated arrays, one per output name, filled in place
                (writeable ndarrays of the blob's shape and dtype, any strides: a
                transposed or sliced view is filled through np.copyto, as numpy's out=).
            output_device: "cpu" or "cuda" for this call (None: the Predictor's
                output_device): "cuda" returns CuPy arrays (copies made on the GPU,
                done when this returns); `out` is then refused.
        Returns:
            list of arrays (output_names given), `out` (filled), or a dict
            name -> array of every readable blob (neither given): all blobs under
            Optimization.NONE; inputs, outputs and `keep` under MEMORY.
        Raises:
            InputError: bad inputs, output names or `out` arrays (checked before
            running where they can be); UnknownBlobError: unknown name;
            ShapeInferenceError, KernelError: the model rejects the inputs;
            ResourceExhaustedError: the inputs' layout passes memory_limit_bytes.
        """
        if inputs is None:
            raise InputError("Predictor.forward() needs inputs (None would run on whatever this thread's "
                             "Net last held)")
        output_names = check_output_names(output_names)
        if out is not None:
            out = _check_out_arrays(out, output_names)
        return self._forward(inputs, output_names, out, output_device)

    def _forward(self, inputs, output_names, out, output_device):
        """forward() once its arguments are checked (run() checks its own)."""
        net = self.net()
        od = self.output_device if output_device is None else output_device
        on_device = outputs_on_device(od, net.device)
        if output_names is None:
            if not on_device:
                net.forward(inputs)
                copy = net.device.copy_out  # numpy copies; a device Net's device blobs copied to the host
                return {n: copy(net.blob_by_name(n)) for n in activation_names(net)}
            blobs = net.forward(inputs, output_device=od)
            names = activation_names(net)
            blobs.update({n: net.layout.device_output(n) for n in names if n not in blobs})
            return owned_copies(blobs, names, net.device, True)
        blobs = net.forward(inputs, output_names, out=out, output_device=od)
        if out is not None:
            return out
        if not on_device:
            copy = net.device.copy_out  # owned_copies' numpy copies, as a list
            return [copy(blobs[n]) for n in output_names]
        copies = owned_copies(blobs, output_names, net.device, on_device)
        return [copies[n] for n in output_names]

    def run(self, output_names: Sequence[str] | None = None,
            input_feed: Mapping[str, np.ndarray] | None = None) -> list[np.ndarray] | None:
        """onnxruntime's InferenceSession.run: outputs (None: all) for a feed dict.

        With no arguments, Paddle Inference's run(): runs on the arrays fed to the
        input handles and fills the output handles (see paddle_api.py).

        Outputs are numpy arrays whatever the Predictor's output_device, as
        onnxruntime's run() returns them (device outputs: forward(output_device="cuda"),
        as its run_with_iobinding); the feed may hold device arrays (engine/inputs.py).

        Raises:
            InputError: input_feed is not a mapping; as forward().
        """
        if input_feed is None and output_names is None:
            return self._paddle_run()
        if type(input_feed) is not dict and not isinstance(input_feed, Mapping):  # typing's check: ~0.5 us
            raise InputError(f"input_feed must be a dict name -> array, not {type(input_feed).__name__}")
        return self._forward(dict(input_feed), check_output_names(output_names) or list(self.output_names), None,
                             "cpu")


def check_output_names(output_names) -> list[str] | None:
    """None, or a list of str (a tuple or other iterable of str is accepted).

    Raises:
        InputError: a single string, a non-iterable, or a name that is not a str.
    """
    if output_names is None:
        return None
    if isinstance(output_names, (str, bytes)):
        raise InputError("output_names must be a list of names, not a string")
    try:
        names = list(output_names)
    except TypeError:
        raise InputError(f"output_names must be a list of names, not {type(output_names).__name__}") from None
    bad = [n for n in names if not isinstance(n, str)]
    if bad:
        raise InputError(f"output_names must be strings, got {bad[:3]!r}")
    return names


def _check_out_arrays(out, output_names) -> list[np.ndarray]:
    """`out`: one writeable ndarray per output name, of any strides (shapes and dtypes are checked
    after the run, by engine.inputs.fill_out, before any is written)."""
    if output_names is None:
        raise InputError("`out` needs `output_names`")
    if isinstance(out, np.ndarray) or not isinstance(out, (list, tuple)):
        raise InputError(f"`out` must be a list of arrays, not {type(out).__name__}")
    if len(out) != len(output_names):
        raise InputError(f"{len(out)} `out` arrays for {len(output_names)} output names")
    for name, o in zip(output_names, out):
        if not isinstance(o, np.ndarray):
            raise InputError(f"`out` for {name!r} must be an ndarray, not {type(o).__name__}")
        if not o.flags.writeable:
            raise InputError(f"`out` for {name!r} is read-only")
    return out


def activation_names(net: Net) -> list[str]:
    """The names of a Net's readable blobs: inputs and computed values (no weights)."""
    weights = net.program.weights
    return [n for n in net.blob_names if n not in weights]


__all__ = ["Predictor", "UnknownBlobError"]
