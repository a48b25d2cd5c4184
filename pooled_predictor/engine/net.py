"""Net: a Program bound to blobs (Caffe's Net: reshape(), forward(), blob_by_name()).

A Net holds the Program's weights (shared, read-only) and its layouts (one per set of input
shapes, built by engine/layout.py's pipeline, cached by shapes), and runs the current one.
forward(inputs) checks the inputs (engine/inputs.py), reshapes when their shapes changed,
feeds them and runs the bound calls, allocating no activation arrays; nodes whose output
shape depends on data run per forward (Layout.run_dynamic). One thread at a time uses a Net.
Tiered (engine/tiering.py), a layout whose compiled kernels are not loaded in this process yet
runs the numpy reference kernels until a background job has them ready (_build, _upgrade).
"""

from __future__ import annotations

import importlib
import logging
import time
import weakref
from typing import Iterable, Mapping, Sequence

import numpy as np

from .. import budget
from ..errors import InputError, KernelError, PooledPredictorError, ResourceExhaustedError, UnknownBlobError
from ..ops import int8_arithmetic as int8_arithmetic_
from ..ops.context import set_default_body_runner
from ..ops.cpu import compiled
from ..ops.cpu.compiled import isa
from .control_flow import BodyRuns
from .device import GraphCache, get_device
from .inputs import InputSpec, fill_out, outputs_on_device
from . import layout as layout_stage
from .layout import IoRun, Layout, LayoutOptions, Optimization, build_layout
from .layout_cache import LayoutCache
from .tiering import COMPILER, compile_jobs, not_cached
from .placement import IO_COPY_OP
from .profiling import Profiler, precision_of
from .program import Program

log = logging.getLogger(__name__)

__all__ = ["BODIES", "Net", "Optimization"]


# the data input of ops whose first inputs are scales (QLinearConcat: Y's scale and zero point, then X_0): the
# profile's precision column reads this one's type (a QLinearConcat of uint8 inputs showed "float32->uint8")
_DATA_INPUT = {"QLinearConcat": 2}


class Net:
    """A Program bound to its own activation blobs.

    Args:
        program: the compiled Program (weights shared with every other Net of it).
        input_shapes: optional shapes to reshape to at once (name -> tuple).
        optimization: Optimization.NONE keeps every blob; MEMORY plans them into one arena.
        planner: "arena" (memory_opt's offsets at the lower bound) or "shared"
            (fb-caffe-exts' shared buffers), under MEMORY.
        keep: intermediate blobs that stay readable under MEMORY.
        cache_bytes: budget of cached layouts of other input shapes.
        memory_limit_bytes: budget of one layout (arena: activations and scratch;
            each node's outputs, checked before its kernel is set up); None:
            budget.default_memory_limit(). A reshape over it raises
            ResourceExhaustedError and leaves the Net at its previous shapes.
        device: where it lays out ("cpu", "cuda", "cuda:1" or an engine.device.Device); None: the
            Program's device.
        lanes: the vector width of the blocked kernel types its layouts may use (8: NCHW8c, 16:
            NCHW16c); None: compiled/isa.py's lanes() now (the host's, or use_lanes()'s).
        cuda_graphs: on a device with graphs (CUDA), the most captured graphs kept (an LRU of
            layouts; 0: never capture). A layout whose every node runs on the device, none
            data-dependent, is captured the second time it runs and replayed from then on, when
            the thread's current stream is not the default one (a pool worker's own stream);
            the rest run eagerly. A graph keeps its layout's arenas' addresses: it is dropped
            with its layout.
        int8_arithmetic: "onnxruntime" (onnxruntime's u8 x s8 sums on this host: int16-saturated
            pairs without VNNI) or "exact"; None: ops/int8_arithmetic.current() now.
    Attributes:
        input_names / output_names: the graph's, in order.
        input_spec: the InputSpec every input goes through.
        device: the Device the layouts live on (engine/device.py).
    """

    def __init__(self, program: Program, input_shapes: Mapping[str, Sequence[int]] | None = None, *,
                 optimization: Optimization = Optimization.NONE, planner: str = "arena",
                 keep: Iterable[str] = (), cache_bytes: int = 256 << 20, memory_limit_bytes: int | None = None,
                 device=None, lanes: int | None = None, cuda_graphs: int = 8, int8_arithmetic: str | None = None):
        if planner not in ("arena", "shared"):
            raise ValueError(f"planner must be 'arena' or 'shared' (fb-caffe-exts' baseline), got {planner!r}")
        self.program = program
        self.device = get_device(program.device if device is None else device)
        self.optimization = Optimization(optimization)
        self.planner = planner
        self.keep = tuple(keep)
        self.memory_limit_bytes = budget.resolve_limit(memory_limit_bytes)
        self.input_spec = InputSpec(program.inputs, self.device)
        self._layouts = LayoutCache(cache_bytes)
        self._default_invalid = False
        self.restored = False  # restore() has nothing to do: it ran, and no reshape since
        self.profiler = None  # a profiling.Profiler while profiling (enable_profiling)
        self.prepare_calls = layout_stage.PREPARE_CALLS  # kernels' prepared calls in the run (layout._prepared)
        # the width of its blocked kernel types (8: NCHW8c, 16: NCHW16c), fixed now: compiled/isa.py
        self.lanes = isa.lanes() if lanes is None else int(lanes)
        # the quantized kernels' u8 x s8 arithmetic ("onnxruntime" / "exact"), fixed now: ops/int8_arithmetic.py
        self.int8_arithmetic = int8_arithmetic_.validate(int8_arithmetic or int8_arithmetic_.current())
        self.layout: Layout | None = None  # the current layout (None before reshape)
        self.tiered = True  # tier kernels when compiled.tiered() (engine/tiering.py); bodies: as their Net
        self._compile_attempts: dict[tuple, int] = {}  # shapes -> background compiles asked for them
        self._input_shapes = None
        self.graphs = None  # GraphCache of this Net's CUDA graphs (device.supports_graphs), keys id(layout)
        if int(cuda_graphs) > 0 and self.device.supports_graphs:
            self.graphs = GraphCache(int(cuda_graphs), self._capture)
        if input_shapes is not None:
            self.reshape(input_shapes)

    # ---- description ---------------------------------------------------------
    @property
    def input_names(self) -> list[str]:
        return self.program.input_names

    @property
    def output_names(self) -> list[str]:
        return self.program.output_names

    @property
    def input_shapes(self) -> dict[str, tuple] | None:
        """The shapes the Net is currently laid out for (None before reshape)."""
        return None if self._input_shapes is None else dict(self._input_shapes)

    @property
    def output_shapes(self) -> dict[str, tuple | None]:
        """Output shapes at the current input shapes (None: known only after forward)."""
        layout = self.layout
        blobs, dyn = (layout.blobs, layout.dynamic_outputs) if layout is not None else ({}, ())
        return {n: (blobs[n].shape if n in blobs and n not in dyn else None) for n in self.output_names}

    @property
    def blob_names(self) -> list[str]:
        """Names of the blobs that can be read (see blob_by_name), as the model names them."""
        return [] if self.layout is None else self.layout.readable_names()

    @property
    def has_dynamic_shapes(self) -> bool:
        """True when some nodes' shapes depend on data and are inferred per forward."""
        return self.layout is not None and bool(self.layout.dynamic)

    def blob_by_name(self, name: str) -> np.ndarray:
        """The Net's own array for a blob (valid until the next forward or reshape).

        Under Optimization.MEMORY only inputs, outputs, weights and the names
        in `keep` can be read: the bytes of other intermediates are reused.
        A value the kernel-type assignment keeps only in another layout (under
        NONE, an intermediate of an NCHW8c chain) comes back as a copy in the
        model's layout (ops/layouts.transform); its typed name ("v@NCHW8c")
        gives the Net's own blocked array.

        Raises:
            UnknownBlobError: no blob has this name, or MEMORY reused its bytes.
        """
        if self.layout is None:
            raise UnknownBlobError(f"no blob named {name!r}; outputs are {self.output_names}")
        return self.layout.blob(name, self.output_names)

    @property
    def memory_plan(self):
        """The memory_opt Plan of the current layout (None under Optimization.NONE)."""
        return None if self.layout is None else self.layout.plan

    @property
    def memory_liveness(self):
        """The memory_opt Liveness the current plan was made from (None under NONE)."""
        return None if self.layout is None else self.layout.liveness

    @property
    def plan_seconds(self) -> float:
        """Seconds memory_opt took to plan the current layout (0 under NONE)."""
        return 0.0 if self.layout is None else self.layout.plan_seconds

    @property
    def arena_bytes(self) -> int:
        """Bytes of the current layout's arena (activations and workspace)."""
        return 0 if self.layout is None else self.layout.nbytes

    @property
    def activation_bytes(self) -> int:
        """Bytes of all activations if each had its own array (the naive total)."""
        return 0 if self.layout is None else self.layout.activation_bytes

    @property
    def cache_bytes(self) -> int:
        """Budget of cached layouts of other input shapes (bytes)."""
        return self._layouts.budget_bytes

    @cache_bytes.setter
    def cache_bytes(self, value: int) -> None:
        self._layouts.budget_bytes = int(value)

    @property
    def cached_layouts(self) -> int:
        return len(self._layouts)

    @property
    def layouts_built(self) -> int:
        """Layouts built so far (a cached one reused is not built again)."""
        return self._layouts.built

    def default_input_shapes(self) -> dict[str, tuple]:
        """Declared input shapes, symbolic or unknown dimensions taken as 1."""
        return self.input_spec.default_shapes()

    # ---- layouts ---------------------------------------------------------------
    def reshape(self, input_shapes: Mapping[str, Sequence[int]] | None = None) -> None:
        """Infer every blob's shape for these input shapes and lay the blobs out once.

        Layouts are cached by input shapes (LRU, at most `cache_bytes` of
        activations beside the current one), so alternating shapes do not
        re-plan every call.

        Args:
            input_shapes: name -> shape; None: the declared shapes with symbolic dims as 1.
        Raises:
            InputError: shapes that do not fit the declared inputs.
            ShapeInferenceError: shapes the model's operators reject.
            ResourceExhaustedError: the layout needs more than memory_limit_bytes
                (the Net stays at its previous shapes).
        """
        current = self._input_shapes
        if input_shapes is not None and current is not None and len(input_shapes) == len(current) \
                and all(tuple(input_shapes.get(n, ())) == s for n, s in current.items()):
            return  # same shapes: nothing to do
        spec = self.input_spec
        self._reshape_checked(spec.check_shapes(input_shapes if input_shapes is not None else spec.default_shapes()))
        if COMPILER.holding:
            COMPILER.release()  # a background compile it asked for (engine/tiering.py)

    def _reshape_checked(self, shapes: dict[str, tuple]) -> None:
        if shapes == self._input_shapes:
            return
        self.restored = False
        self.layout = self._layouts.get(tuple(shapes.items()), lambda: self._build(shapes))
        self._input_shapes = shapes

    def _options(self) -> LayoutOptions:
        return LayoutOptions(self.optimization, self.planner, self.keep, self.memory_limit_bytes, self.prepare_calls,
                             self.lanes, self.int8_arithmetic)

    def _build(self, shapes: dict[str, tuple], tier: str | None = None) -> Layout:
        """The layout for these shapes: compiled kernels, or (tiered, with kernels numba's cache does
        not hold yet) the reference kernels while a background compile builds the compiled ones
        (engine/tiering.py). tier "compiled" builds that one or raises NotCached."""
        if tier is None and not (self.tiered and compiled.tiered()):
            layout = build_layout(self.program, shapes, self.device, self._options(), BODIES)
            if compiled.active():  # its kernels are in memory now (warm-up, untiered): later layouts try them
                self.program.tiers_loaded = True
            return layout
        generation = COMPILER.generation
        # Until one compiled layout of this Program has been built in this process (its kernels loaded
        # by the background compiler), trying one fails, after the weights' packing and transforms
        # (ResNet-50's Winograd: seconds): the reference layout at once.
        if tier is not None or self.program.tiers_loaded or COMPILER.finished(self._compile_key(shapes)):
            try:
                with compiled.memory_only():  # kernels loaded in this process already: no compile, no disk
                    layout = build_layout(self.program, shapes, self.device, self._options(), BODIES)
                layout.tier, layout.generation = "unproven", generation
                self.program.tiers_loaded = True
                return layout
            except Exception as exc:
                if not not_cached(exc) or tier == "compiled":
                    raise
        with compiled.reference_kernels():
            layout = build_layout(self.program, shapes, self.device, self._options(), BODIES)
        layout.tier, layout.generation = "reference", generation
        self._request_compile(shapes)
        return layout

    def _compile_key(self, shapes: dict[str, tuple], attempt: int = 0) -> tuple:
        return self.program.token, tuple(shapes.items()), self._options(), attempt

    def _request_compile(self, shapes: dict[str, tuple], feeds: dict | None = None, attempt: int = 0) -> None:
        """Ask the background compiler for the compiled kernels of these shapes' layout: its thread
        builds that layout and runs it once (on `feeds`, or zeros) loading each kernel from numba's
        disk cache, and where one is not there, a process of its own compiles them all into the
        cache first. Once per Program, shapes, options and attempt.
        """
        program, device, options = self.program, self.device, self._options()
        key = self._compile_key(shapes, attempt)
        if COMPILER.finished(key):
            return
        if feeds is None:
            feeds = {v.name: np.zeros(shapes[v.name], v.dtype if v.dtype is not None else np.float32)
                     for v in program.inputs}

        def load():
            layout = build_layout(program, shapes, device, options, BODIES)
            layout.feed(feeds, False)
            for call in layout.run:
                call()

        COMPILER.request(key, load, lambda: dict(
            graph=program.graph, device="cpu", shapes=shapes, options=options, feeds=feeds,
            jobs=compile_jobs()), hold=True)  # released when this forward (or reshape) is done

    def release(self) -> None:
        """Drop every layout (activations, arena): the next forward lays them out again."""
        self._layouts.clear()
        self.layout = self._input_shapes = None

    def restore(self) -> None:
        """Release the memory of a large input's layout: fb-caffe-exts' guard after each pool job.

        A worker should not hold the memory of one large input until its next
        job. While every cached layout, the current one included, fits in
        `cache_bytes`, there is nothing to release (going back to the default
        shapes would keep the current layout cached): the Net keeps its shapes.
        Past the budget it goes back to the default input shapes (trimming the
        cache); models whose default shapes are not valid inputs drop the
        current layout instead. Either way `restored` is True until the next
        reshape.
        """
        if self.layout is not None and self._layouts.nbytes() > self.cache_bytes:
            if not self._default_invalid:
                try:
                    self.reshape()
                    self._layouts.trim(tuple(self._input_shapes.items()))
                except PooledPredictorError:
                    self._default_invalid = True  # e.g. a spatial size 1 the model cannot take
            if self._default_invalid:
                self.layout = self._input_shapes = None
                self._layouts.trim(None)
        self.restored = True  # until the next reshape to other shapes

    # ---- profiling -----------------------------------------------------------
    def _precisions(self) -> list[str]:
        """Each run node's precision (profiling.precision_of: its first data input's and output's element
        types), computed once per layout."""
        layout = self.layout
        cached = getattr(self, "_precisions_of", None)
        if cached is not None and cached[0] is layout:
            return cached[1]
        blobs = layout.blobs

        def dtype(name):
            a = blobs.get(name) if name else None
            return None if a is None else a.dtype

        def data_input(n):
            i = _DATA_INPUT.get(n.op_type, 0)
            return n.inputs[i] if len(n.inputs) > i else ""

        out = [precision_of(dtype(data_input(n)), dtype(n.outputs[0] if n.outputs else "")) for n in layout.run_nodes]
        self._precisions_of = (layout, out)
        return out

    def enable_profiling(self, profiler: Profiler | None = None) -> Profiler:
        """Time every node of each forward from now on (onnxruntime's enable_profiling).

        Args:
            profiler: a profiling.Profiler to record into (shared by several Nets);
                None: a new one.
        Returns:
            the Profiler (also `self.profiler`): table(), chrome_trace(), write_trace().
        """
        self.profiler = profiler if profiler is not None else Profiler()
        return self.profiler

    def disable_profiling(self) -> None:
        """Stop timing nodes; the Profiler keeps what it recorded."""
        self.profiler = None

    # ---- forward -------------------------------------------------------------
    def forward(self, inputs=None, outputs: Sequence[str] | None = None, *, out=None,
                share_inputs: bool | str = False, output_device: str | None = None) -> dict[str, np.ndarray]:
        """Run the net: the one way in (Caffe's Forward; ForwardPrefilled when `inputs` is None).

        Args:
            inputs: list (input order), dict name -> array, or a single array, checked by
                input_spec (CheckedInputs from it are not checked again); None runs on the
                input blobs as they are.
            outputs: blob names to return (graph outputs, inputs, weights, kept blobs);
                None: the graph's outputs.
            out: optional arrays to copy the outputs into, one per name of `outputs` (a
                sequence in that order, or a dict by name); each must match the blob's
                shape and dtype.
            share_inputs: True: read every input array that can be (C-contiguous,
                aligned, of the blob's dtype) in place instead of copying it into the Net
                (Paddle's share_external_data); "large": only those of at least
                layout.SHARED_INPUT_MIN_BYTES, where that is faster (the pool's jobs); False: copy.
                Shared arrays must stay unchanged until this returns; others are copied.
            output_device: None or "cpu": outputs as numpy arrays; the Net's device ("cuda"): as
                its arrays (CuPy), with no copy to the host (engine/inputs.outputs_on_device).
                Inputs may be the device's arrays or DLPack producers either way (engine/inputs.py).
        Returns:
            name -> array for each name of `outputs`: the Net's own arrays (valid until the
            next forward or reshape), the caller's array for an input read in place, or
            the `out` arrays.
        Raises:
            InputError: inputs that do not fit (count, names, rank, dims, dtype), a device array
                on a CPU Net, `out` arrays that do not match (or given with device outputs), an
                output_device the Net does not run on.
            UnknownBlobError: a name in `outputs` that cannot be read.
            ShapeInferenceError: shapes the operators reject.
            KernelError: a kernel failed; the message names the node.
            ResourceExhaustedError: the inputs' layout passes memory_limit_bytes.
        """
        on_device = outputs_on_device(output_device, self.device)
        if on_device and out is not None:
            raise InputError("`out` takes host arrays; with output_device on the device, use the returned arrays")
        try:
            if inputs is None:
                if self.layout is None:
                    raise InputError("forward() with no inputs before any reshape: feed inputs first")
                self._run(self.layout.run)
                shared = {}
            else:
                arrays = self.input_spec.check(inputs)
                current = self._input_shapes
                if current is None:
                    self._reshape_checked({n: a.shape for n, a in arrays.items()})
                else:
                    for n, a in arrays.items():
                        if a.shape != current[n]:
                            self._reshape_checked({n: a.shape for n, a in arrays.items()})
                            break
                layout = self.layout
                if layout.tier == "reference" and layout.generation != COMPILER.generation:
                    self._upgrade()
                device_outputs = (self.output_names if outputs is None else outputs) if on_device else ()
                try:
                    shared = self._feed_and_run(arrays, share_inputs, device_outputs)
                except KernelError as exc:
                    if self.layout.tier != "unproven" or not not_cached(exc):
                        raise
                    self._downgrade(arrays)  # a kernel called at run time is not compiled yet
                    shared = self._feed_and_run(arrays, share_inputs, device_outputs)
        finally:
            if COMPILER.holding:
                COMPILER.release()  # a background compile this forward asked for: after its result
        if on_device:
            layout = self.layout
            return {n: layout.device_output(n) for n in (self.output_names if outputs is None else outputs)}
        return self._outputs(outputs, out, shared)

    def run_in_place(self) -> None:
        """Run the current layout on its blobs as they are, returning nothing: a control-flow body's
        iteration (control_flow.BodyRun), which writes its inputs into the blobs and reads its
        outputs from them; forward(None) without building the outputs' dict.

        Raises:
            InputError: no layout yet (reshape first); KernelError as forward().
        """
        if self.layout is None:
            raise InputError("run_in_place() before any reshape")
        self._run(self.layout.run)

    def _feed_and_run(self, arrays: dict, share_inputs, device_outputs=()) -> dict:
        layout = self.layout
        if device_outputs or getattr(arrays, "on_device", None):  # device arrays at the edges
            layout.feed(arrays, False)  # host inputs into the staging blobs, which io_run's copies read
            self._run(layout.io_run(arrays, device_outputs))
            return {}
        shared = layout.feed(arrays, share_inputs)
        if shared:
            try:
                self._run(layout.calls_reading(shared))
            finally:
                layout.end_reading()
        else:
            self._run(layout.run)
        return shared

    # ---- tiers (engine/tiering.py) -----------------------------------------------
    def _upgrade(self) -> None:
        """A background job finished since this reference layout was built: build the compiled one if
        every kernel it needs is in this process's memory now (memory-only; else wait for the next)."""
        key = tuple(self._input_shapes.items())
        try:
            layout = self._build(self._input_shapes, tier="compiled")
        except Exception as exc:
            if not not_cached(exc):
                raise
            self.layout.generation = COMPILER.generation
            return
        self._layouts.replace(key, layout)
        self.layout = layout

    def _downgrade(self, arrays: dict) -> None:
        """The compiled layout's first run met a kernel not loaded in this process: the reference
        layout for these shapes, and a background job run on these inputs (after 3 of those for the
        same shapes, the next compiled layout compiles what it meets inline instead)."""
        shapes = self._input_shapes
        key = tuple(shapes.items())
        attempt = self._compile_attempts.get(key, 0) + 1
        self._compile_attempts[key] = attempt
        if attempt > 3:
            layout = build_layout(self.program, shapes, self.device, self._options(), BODIES)
            layout.tier = "compiled"  # runs outside memory-only mode: compiles what it meets
        else:
            with compiled.reference_kernels():
                layout = build_layout(self.program, shapes, self.device, self._options(), BODIES)
            layout.tier, layout.generation = "reference", COMPILER.generation
            self._request_compile(shapes, {n: np.array(a) for n, a in arrays.items()}, attempt)
        self._layouts.replace(key, layout)
        self.layout = layout

    def _run(self, run: list) -> None:
        """Call every bound node in order (timed while profiling), in the layout's tier's mode
        (engine/tiering.py); errors name the node."""
        tier = self.layout.tier
        if tier == "compiled":
            return self._run_calls(run)
        if tier == "reference":
            with compiled.reference_kernels():
                return self._run_calls(run)
        # "unproven": a tiered compiled layout's first run, in memory-only mode (a kernel it calls at
        # run time, not loaded yet, raises NotCached: forward() falls back); then plainly "compiled"
        with compiled.memory_only():
            self._run_calls(run)
        self.layout.tier = "compiled"

    # ---- CUDA graphs -------------------------------------------------------------
    def _capture(self, key):
        """GraphCache's capture: the current layout's run between its edges (layout.head, tail: the
        copies of inputs in and outputs out, run around each replay), recorded (key is id(layout))."""
        layout = self.layout
        return weakref.ref(layout), self.device.capture(layout.run[layout.head:layout.tail])

    def _replayed(self, layout, run) -> bool:
        """Run `layout` from its CUDA graph when it has one or is due for capture (GraphCache: the
        second run of a layout), `run`'s edge calls before and after it; False: run it eagerly. A
        layout that fails to capture runs eagerly from then on (logged once)."""
        if layout.graphable is None:
            layout.graphable = bool(layout.device_nodes) and not layout.dynamic and all(
                n.name in layout.device_nodes or n.op_type == IO_COPY_OP for n in layout.run_nodes)
        if not layout.graphable or layout.tier != "compiled" or not self.device.can_capture():
            return False
        graphs, key = self.graphs, id(layout)
        try:
            entry = graphs.get(key)
            if entry is not None and entry[0]() is not layout:  # id reused by a new layout: recapture later
                graphs.discard(key)
                entry = None
        except Exception as exc:  # the capture failed: this layout runs eagerly
            layout.graphable = False
            graphs.discard(key)
            log.warning("CUDA graph capture failed for input shapes %s; they run eagerly: %s: %s",
                        self._input_shapes, type(exc).__name__, exc)
            return False
        if entry is None:
            return False
        try:
            for f in run[:layout.head]:
                f()
            self.device.replay(entry[1])
            for f in run[layout.tail:]:
                f()
        except MemoryError as exc:
            raise ResourceExhaustedError(f"CUDA graph replay ran out of memory: {exc}") from exc
        except Exception as exc:
            raise KernelError(f"CUDA graph replay failed: {type(exc).__name__}: {exc}") from exc
        return True

    def _run_calls(self, run: list) -> None:
        if (self.graphs is not None and (run is self.layout.run or type(run) is IoRun) and self.profiler is None
                and self._replayed(self.layout, run)):
            return
        starts = None
        if run is self.layout.run and self.profiler is None and self.layout.tier == "compiled":
            native = self.layout.native
            if native is None:
                native = self.layout.native = self._native_run(self.layout)
            if native:
                run, starts = native
        i = 0
        try:
            if self.profiler is not None:
                clock, times = time.perf_counter_ns, []
                for f in run:
                    t0 = clock()
                    f()
                    times.append((t0, clock()))
                    i += 1
                self.profiler.add_forward(self.layout.run_nodes, times, self._precisions())
            else:
                for f in run:
                    f()
                    i += 1
        except PooledPredictorError:
            raise
        except Exception as exc:
            if starts is not None:  # the fused run's entry i: the node it names, or its first
                failed = getattr(run[i], "failed_at", None)
                i = starts[i] if failed is None else failed
            raise self.node_error(i, exc) from exc

    def _native_run(self, layout):
        """layout.native (engine/layout.py): its run with each run of compiled kernel calls one native call
        (compiled/native_runs.py), on the CPU where POOLED_PREDICTOR_NATIVE_RUNS allows; False: none."""
        if layout.device.host is not None or layout.device_nodes or not compiled.active():
            return False
        runs = importlib.import_module(f"{compiled.__name__}.native_runs")
        if not runs.ENABLED:
            return False
        fused, starts = runs.fuse(layout.run)
        return (fused, starts) if len(fused) < len(layout.run) else False

    def node_error(self, i: int, exc: Exception) -> PooledPredictorError:
        """The typed error for `exc`, raised by call i of the current layout's run: ResourceExhaustedError
        for a MemoryError, else KernelError, naming the node."""
        node = self.layout.run_nodes[i]
        if isinstance(exc, MemoryError):
            return ResourceExhaustedError(f"node {node.name!r} ({node.op_type}) ran out of memory: {exc}")
        return KernelError(f"node {node.name!r} ({node.op_type}) failed: {type(exc).__name__}: {exc}")

    def _outputs(self, names, out, shared: dict) -> dict[str, np.ndarray]:
        if names is None or names is self.output_names:  # the pool's jobs pass the Program's own list
            fixed = self.layout.fixed_outputs
            if fixed is not None and out is None and not shared:
                return dict(fixed)
            names = self.output_names
        result = {n: shared[n] if n in shared else self.blob_by_name(n) for n in names}
        return result if out is None else fill_out(names, out, result)


def _body_net(program: Program, keep) -> Net:
    """A control-flow body's Net (control_flow.BodyRun): its activations planned in one arena; its
    kernels built and run in the mode of the Net running it (reference, cache-only: not tiered itself)."""
    net = Net(program, optimization=Optimization.MEMORY, keep=keep)
    net.tiered = False
    return net


BODIES = BodyRuns(_body_net)
"""The body runner every Net hands to If/Loop/Scan kernels (OpContext.bodies); also the default
for contexts built outside a Net (Program's constant folding, the passes' static evaluation)."""
set_default_body_runner(BODIES)
