"""The compile-for-shapes pipeline: a Program plus input shapes -> a runnable Layout.

    layout = build_layout(program, shapes, device, options, bodies)

Stages, in order (each a function of this module or of arena.py):

1. infer_and_bind: every node's output shapes and dtypes from its shape rule (ops/step.py),
   values known before forward evaluated now (weights, Shape chains, constants), each
   other node's kernel set up for its shapes; nodes whose shapes depend on data fed at
   forward (NonZero, NMS, a Reshape to an input's values, and everything downstream)
   are set aside to run per forward.
2. assign_types: a kernel type per node (layout: NCHW, NCHW8c) and the transforms between
   neighbours that disagree (passes/assign.py; Paddle-Lite's type_layout_cast_pass); on a Device
   with a host beside it (CUDA), assign_devices: the io_copy steps between the nodes stage 1
   placed on the device and those on the host (engine/placement.py; type_target_cast_pass).
3. plan_arena: which bytes of one arena each activation and workspace gets (arena.py,
   memory_opt), the Concat inputs stored in place, the memory budget checked; on a device with a
   host, plan_sides: the same plan for each side's arena (the device's; the host's, pinned).
4. bind_arrays: the arena from the Device, a view per blob, and each node's call bound to
   its arrays (the kernel's prepared call where it has one: Paddle-Lite's PrepareForRun).

A Layout is what a Net holds per input shapes: the blobs and the calls in order. It is
used by one thread at a time (its Net's). Derived per-shape data that does not depend on
the arena (kernel-type plans) is cached on the Program and shared read-only by every Net.
"""

from __future__ import annotations

import enum
import math
import re
import time
from dataclasses import dataclass
from functools import partial
from typing import Callable

import numpy as np

from .. import budget
from ..errors import InputError, ResourceExhaustedError, UnknownBlobError
from ..ops import int8_arithmetic
from ..ops.context import NotStatic, ScratchRef
from ..ops.cpu import compiled
from ..ops.cpu.compiled import isa
from ..ops.layouts import DEFAULT_LAYOUT, TRANSFORM_OP, physical_shape, transform
from ..ops.registry import lookup
from ..ops.shapes import get_rule
from ..ops.shapes.fused import DOMAIN
from ..ops.step import SHAPE_ONLY_OPS, Step
from ..passes.assign import assign_kernel_types, supported_choices
from .arena import aligned, concats_in_place, nbytes, plan_memory
from .device import Device
from .placement import DEVICE, IO_COPY_OP, insert_io_copies, restrict


class Optimization(enum.Enum):
    """fb-caffe-exts' names: NONE keeps every blob; MEMORY plans them into one arena."""

    NONE = "none"
    MEMORY = "memory"


CONCAT_IN_PLACE = True
"""Under Optimization.MEMORY (arena planner), layouts built from now on store the inputs of a Concat
in its output where that is one contiguous range per input (arena.concats_in_place); False: every
Concat copies (its inputs planned as values of their own)."""

PREPARE_CALLS = True
"""Nets created from now on run each node through its kernel's prepare_run() where it has one;
False: runner(*inputs, out=...) every time (the same bits: tests/test_prepared.py)."""


SHARED_INPUT_MIN_BYTES = 1 << 20
"""Net.forward(share_inputs="large") reads an input array in place from this size up (bytes). A node that
reads the caller's array runs its kernel's plain call, not its prepared one (_prepared), which
costs 20-85 us more on the stem convolutions measured; copying costs about that below a MiB
(MobileNetV2's 588 KiB input: 24 us hot, the pool's throughput the same either way; PP-OCR rec's
180 KiB: 0.99x) and more above (PP-OCR det's 3.5 MiB: 0.36 ms hot, 0.75-1.5 ms in the pool's
workers; its throughput through the pool, 2 workers, +1.1%)."""


@dataclass(frozen=True)
class LayoutOptions:
    """How a Net lays out its blobs (the Net's constructor arguments).

    Attributes:
        optimization: Optimization.NONE (every blob its own bytes) or MEMORY (one planned arena).
        planner: "arena" or "shared" (fb-caffe-exts' baseline), under MEMORY.
        keep: intermediate blobs that stay readable under MEMORY.
        memory_limit_bytes: budget of one layout (outputs of each node, then the arena).
        prepare_calls: bind kernels' prepared calls (PREPARE_CALLS at the Net's creation).
        lanes: the vector width of the blocked kernel types the assignment may choose (8: NCHW8c,
            16: NCHW16c; compiled/isa.py's lanes() at the Net's creation); 0: lanes() now.
        int8_arithmetic: "onnxruntime" or "exact", the u8 x s8 arithmetic of the quantized kernels
            (ops/int8_arithmetic.py); "": its current() at build.
    """

    optimization: Optimization = Optimization.NONE
    planner: str = "arena"
    keep: tuple = ()
    memory_limit_bytes: int = 0
    prepare_calls: bool = True
    lanes: int = 0
    int8_arithmetic: str = ""


class Layout:
    """Everything a Net binds for one set of input shapes.

    Attributes:
        blobs: name -> array (weights, static values, views of the arena, dynamic outputs).
        run: one zero-argument call per node, in order; run_nodes: their Nodes.
        plain: each call as a partial runner(*args, out=...) (Net.forward swaps an input
            read in place into it); readers: input name -> indices of the calls that read it.
        dynamic: the Steps run per forward (data-dependent shapes); env: the blob dict they
            read and write (blobs, or blobs with inputs read in place during one forward).
        arena, plan, liveness, plan_seconds, activation_bytes, readable: the memory facts.
        typed: model name -> (typed blob, layout, logical shape) for values held only in
            another layout; typed_names: every value stored in another layout (v@NCHW8c).
        tier, generation: "compiled"; "unproven" (compiled, tiered, before its first run: that
            run is in memory-only mode); or "reference" (engine/tiering.py); and the background
            compiler's generation when it was built.
        graphable: whether the run may be captured into a CUDA graph (every node on the device,
            none data-dependent; engine/net.py), None until a Net first asks.
        native: on the CPU, (run with its runs of compiled kernels each one native call, each entry's first
            index in run) (compiled/native_runs.py), made by the first compiled run; False: nothing to fuse.
        head, tail: on a device with a host, run[:head] are the graph inputs' copies to the device
            and run[tail:] the copies back to the host after the last node (the run's edges; a CUDA
            graph captures run[head:tail]); edge_in / edge_out: graph input / output name -> the
            index of its copy there. On the CPU: 0, len(run), {}, {}.
        device_fed: input name -> the caller's device array, for the inputs the last run read from
            device arrays (their host blobs were not written, and under MEMORY their device blobs
            are reused: blob() copies the caller's array); dropped at the next feed().
    """

    __slots__ = ("blobs", "env", "run", "plain", "run_nodes", "dynamic", "dynamic_outputs", "arena", "plan",
                 "readable", "activation_bytes", "liveness", "plan_seconds", "typed", "typed_names", "readers",
                 "device", "memory_limit_bytes", "bodies", "fixed_outputs", "host_arena", "host_plan",
                 "device_nodes", "tier", "generation", "graphable", "memos", "head", "tail", "edge_in", "edge_out",
                 "device_fed", "native", "__weakref__")

    def __init__(self, device: Device, memory_limit_bytes: int, bodies):
        self.device, self.memory_limit_bytes, self.bodies = device, memory_limit_bytes, bodies
        self.blobs: dict = {}
        self.env: dict = self.blobs
        self.run, self.plain, self.run_nodes, self.dynamic = [], [], [], []
        self.dynamic_outputs: frozenset = frozenset()
        self.arena, self.plan, self.liveness, self.plan_seconds = None, None, None, 0.0
        self.readable, self.activation_bytes = set(), 0
        self.typed, self.typed_names, self.readers = {}, frozenset(), {}
        self.fixed_outputs: dict | None = None  # output name -> array, where none is dynamic or typed
        # a device with a host (engine/placement.py): the host side's arena and plan, the nodes on the device
        self.host_arena, self.host_plan, self.device_nodes = None, None, set()
        # "compiled" (as ops/cpu/compiled.active() chose), or "reference": the numpy kernels while the
        # compiled ones compile (engine/tiering.py); generation: the compiler's when it was built
        self.tier, self.generation = "compiled", 0
        # whether its run may be captured into a CUDA graph (engine/net.py): None until first asked
        self.graphable: bool | None = None
        # (id(step), compiled.active()) -> the setups Step.evaluate keeps for a node run per forward (its memo); this
        # layout's own, so one thread's
        self.memos: dict = {}
        self.head, self.tail, self.edge_in, self.edge_out, self.device_fed = 0, 0, {}, {}, {}
        # (run with its runs of compiled kernels fused, each entry's first index in run): engine/net.py, on the
        # first compiled run (compiled/native_runs.py); None until then, False where nothing is fused
        self.native: tuple | bool | None = None

    @property
    def nbytes(self) -> int:
        return int(self.arena.nbytes)

    def run_dynamic(self, step: Step) -> None:
        """Run a node whose shapes depend on data: infer, allocate and run now (the shape rule and the
        kernel's setup kept per distinct input shapes: Step.evaluate's memo)."""
        env = self.env
        arrays = [env[i] if i else None for i in step.node.inputs]
        key = (id(step), compiled.active())  # a setup made under reference_kernels() serves only there
        memo = self.memos.get(key)
        if memo is None:
            memo = self.memos[key] = []
        outs = step.evaluate(arrays, (self.device.host or self.device).name, self.memory_limit_bytes, self.bodies,
                             memo)
        for o, arr in zip(step.node.outputs, outs):
            if o:
                env[o] = arr

    def blob(self, name: str, output_names) -> np.ndarray:
        """The array of a readable blob (Net.blob_by_name); a value held only in another layout
        comes back as a copy in the model's layout.

        Raises:
            UnknownBlobError: no blob has this name, or MEMORY reused its bytes.
        """
        if name in self.device_fed:  # fed from the caller's device array: the host blob was not written
            return self.device.copy_out(self.device_fed[name])
        if name in self.typed:
            return self.model_layout_copy(name)
        if name in self.blobs:
            if name in self.readable or name in self.dynamic_outputs:
                return self.blobs[name]
            raise UnknownBlobError(
                f"blob {name!r} is not kept: under Optimization.MEMORY its bytes are reused by "
                f"later blobs; pass keep=[{name!r}] to read it")
        raise UnknownBlobError(f"no blob named {name!r}; outputs are {output_names}")

    def readable_names(self) -> list[str]:
        """Names of the blobs blob() reads, as the model names them."""
        readable, dynamic, hidden = self.readable, self.dynamic_outputs, self.typed_names
        names = [n for n in self.blobs if (n in readable or n in dynamic) and n not in hidden]
        return names + [n for n in self.typed if n not in self.blobs]

    def feed(self, arrays: dict, share) -> dict:
        """Copy checked inputs into the input blobs (the Device's io_copy), except those read in
        place (share: True, every array that can be; "large": those of SHARED_INPUT_MIN_BYTES and
        more, on the host only -- a device's layout stages them; False: none); returns those.

        Raises:
            InputError: share is none of those.
        """
        blobs, copy_in = self.blobs, (self.device.host or self.device).copy_in  # inputs are host blobs
        on_device = getattr(arrays, "on_device", ())
        if self.device_fed:
            self.device_fed = {}
        if on_device:  # the caller's device arrays: io_run() reads them
            arrays = {n: a for n, a in arrays.items() if n not in on_device}
        if share == "large" and self.device.host is not None:
            # a device's layout: inputs go through its pinned staging blobs, from which io_copy runs
            # asynchronously and a captured CUDA graph reads (engine/net.py)
            share = False
        if not share:
            for n, a in arrays.items():
                copy_in(blobs[n], a)
            return {}
        if share is not True and share != "large":
            raise InputError(f"share_inputs must be True, False or 'large', not {share!r}")
        least = SHARED_INPUT_MIN_BYTES if share == "large" else 0
        shared = {}
        for n, a in arrays.items():
            blob = blobs[n]
            if a.nbytes >= least and a.flags.c_contiguous and a.flags.aligned and a.dtype == blob.dtype:
                shared[n] = a
            else:
                copy_in(blob, a)
        return shared

    def io_run(self, arrays, device_outputs) -> "IoRun":
        """The run for device arrays at its edges (ONNX Runtime's IOBinding on a device): each input in
        arrays.on_device read from the caller's device array -- copied device to device in place of its
        copy from the host (Device.copy_device), or, where host nodes read the input, copied to its
        host blob now -- after the stream waits for arrays.ready; the copies back to the host of the
        outputs in `device_outputs` dropped (their device blobs are returned: device_output()), the
        stream synchronized in their place. Call after feed().

        Returns:
            IoRun: the run's calls, aligned with run_nodes (a CUDA graph of run[head:tail] replays for it).
        """
        device, blobs, nodes = self.device, self.blobs, self.run_nodes
        run = IoRun(self.run)
        device.wait(getattr(arrays, "ready", None))
        for n in getattr(arrays, "on_device", ()):
            j = self.edge_in.get(n)
            if j is not None and self.readers.get(n) == [j]:  # only its copy to the device reads the host blob
                dst = nodes[j].outputs[0]
                run[j] = partial(device.copy_device, arrays[n], out=blobs[dst])
                self.device_fed[n] = arrays[n]
            else:
                device.to_host(arrays[n], out=blobs[n])
        for n in device_outputs:
            j = self.edge_out.get(n)
            if j is not None:
                run[j] = device.synchronize
        return run

    def device_output(self, name: str):
        """Output `name` as a device array (io_run's device_outputs): its device blob where the run kept
        it there (the Net's own array), else a device copy of the host value (Device.upload)."""
        j = self.edge_out.get(name)
        if j is not None:
            return self.blobs[self.run_nodes[j].inputs[0]]
        if name in self.device_fed:  # an input the caller fed on the device: that array, not a trip through the host
            return self.device_fed[name]
        a = self.blob(name, ())
        if not isinstance(a, np.ndarray):  # a value the run keeps on the device (an input fed there)
            return a
        return self.device.upload(np.ascontiguousarray(a))

    def calls_reading(self, arrays: dict) -> list:
        """The run with the calls that read these inputs bound to the given arrays instead of the
        input blobs (their plain calls, arguments swapped; `readers` lists them); the dynamic nodes,
        which look blobs up by name, see them too until end_reading()."""
        swap = {id(self.blobs[n]): a for n, a in arrays.items()}
        run = list(self.run)
        for j in sorted({j for n in arrays for j in self.readers.get(n, ())}):
            f = self.plain[j]
            run[j] = partial(f.func, *[swap.get(id(x), x) for x in f.args], **f.keywords)
        if self.dynamic:
            self.env = {**self.blobs, **arrays}
        return run

    def end_reading(self) -> None:
        """After running calls_reading(): what the dynamic nodes stored is kept where blob_by_name looks."""
        if self.env is not self.blobs:
            for o in self.dynamic_outputs:
                if o in self.env:
                    self.blobs[o] = self.env[o]
            self.env = self.blobs

    def model_layout_copy(self, name: str) -> np.ndarray:
        """A value held only in another layout, copied into the model's layout (ops/layouts.transform)."""
        typed, lay, logical = self.typed[name]
        if lay == self.device.name:  # a value held only on the device (engine/placement.py)
            return self.device.copy_out(self.blobs[typed])
        out = np.empty(logical, self.blobs[typed].dtype)
        transform(self.blobs[typed], lay, DEFAULT_LAYOUT, out)
        return out


def build_layout(program, shapes: dict[str, tuple], device: Device, options: LayoutOptions,
                 bodies: Callable | None = None) -> Layout:
    """Lay a Program out for these input shapes: _build_layout under options.int8_arithmetic
    (the quantized kernels read it when they are built: ops/int8_arithmetic.py)."""
    with int8_arithmetic.use(options.int8_arithmetic or None):
        return _build_layout(program, shapes, device, options, bodies)


def _build_layout(program, shapes: dict[str, tuple], device: Device, options: LayoutOptions,
                  bodies: Callable | None = None) -> Layout:
    """Lay a Program out for these input shapes (checked by InputSpec.check_shapes).

    Args:
        program: the compiled Program (engine/program.py).
        shapes: input name -> shape, every input.
        device: where the arena and weights live (engine/device.py).
        options: LayoutOptions.
        bodies: the body runner handed to If/Loop/Scan through OpContext (control_flow.BodyRuns).
    Raises:
        ShapeInferenceError: shapes the model's operators reject.
        KernelError: a kernel's setup failed.
        ResourceExhaustedError: a node's outputs or the arena over options.memory_limit_bytes.
    """
    layout = Layout(device, options.memory_limit_bytes, bodies)
    shape, dtype, static, planned, dynamic = infer_and_bind(program, shapes, layout)
    # Values that must survive the run: outputs, kept blobs, inputs of dynamic nodes.
    keep = set(program.output_names) | set(options.keep)
    keep.update(i for st in dynamic for i in st.node.inputs if i and i not in static)
    planned, layout_of = assign_types(program, planned, shape, dtype, static, keep, layout,
                                      options.lanes or isa.lanes())
    on_device: set = set()
    if layout.device_nodes:
        planned, on_device = assign_devices(program, planned, shape, dtype, static, keep, layout)
    activations = list(program.input_names) + [o for st, _, _ in planned for o in st.node.outputs if o]
    physical = {n: physical_shape(shape[n], layout_of[n]) if n in layout_of else shape[n] for n in activations}
    sizes = {n: nbytes(physical[n], dtype[n]) for n in activations}
    if on_device:
        offsets, parts, in_place, scratch_at, arena_bytes, host_bytes = plan_sides(
            program, planned, shape, physical, dtype, layout_of, static, keep, sizes, options, layout, on_device)
    else:
        offsets, parts, in_place, scratch_at, arena_bytes = plan_arena(
            program, planned, shape, physical, dtype, layout_of, static, keep, sizes, options, layout)
        host_bytes = 0
    budget.check(arena_bytes + host_bytes, options.memory_limit_bytes,
                 f"the layout for input shapes {shapes} (arena: activations and scratch)")
    try:
        layout.arena = (device if on_device else device.host or device).arena(arena_bytes)
        if on_device:
            layout.host_arena = device.host_arena(host_bytes)
    except ResourceExhaustedError as exc:  # under the budget, but the device has less
        raise ResourceExhaustedError(f"cannot allocate the arena of {arena_bytes:,} bytes for input shapes "
                                     f"{shapes}", arena_bytes, options.memory_limit_bytes) from exc
    where = None
    if device.host is not None:  # each value and scratch in its side's arena (all the host's: no device node)
        host = (device.host, layout.host_arena if on_device else layout.arena)
        where = {n: (device, layout.arena) if n in on_device else host for n in activations}
        where.update({id(r): (device, layout.arena) if st.node.name in layout.device_nodes else host
                      for st, _, refs in planned for r in refs})
    bind_arrays(program, layout, planned, dynamic, activations, physical, dtype, static, offsets, parts, in_place,
                scratch_at, options.prepare_calls, where)
    if options.optimization is Optimization.MEMORY:
        layout.readable = set(static) | set(program.input_names) | (keep & set(layout.blobs))
    else:
        layout.readable = set(layout.blobs)
    for n, lay in layout_of.items():  # typed names (passes/assign.typed_name): value@layout
        base = n[:-len(lay) - 1] if n.endswith("@" + lay) else None
        if base and base not in layout.blobs and n in layout.readable:
            layout.typed[base] = (n, lay, shape[n])
    for n in on_device:  # v@cuda: blob_by_name("v") copies it back where the host holds no v
        base = n[:-len(device.name) - 1]
        if base not in layout.blobs and n in layout.readable and n not in static:
            layout.typed[base] = (n, device.name, shape[n])
    # the device's copies of the weights (w@cuda) are no blobs of the model's: blob_names and a
    # Predictor.forward() with no names never copy them back (100 MB a forward for ResNet-50)
    suffix = "@" + device.name
    device_statics = frozenset(n for n in static if n.endswith(suffix)) if device.host is not None else frozenset()
    layout.typed_names = frozenset(layout_of) | frozenset(on_device) | device_statics
    layout.activation_bytes = sum(sizes.values())
    layout.dynamic_outputs = frozenset(o for st in dynamic for o in st.node.outputs if o)
    find_edges(layout, program)
    if all(n in layout.blobs and n not in layout.dynamic_outputs and n not in layout.typed
           for n in program.output_names):
        layout.fixed_outputs = {n: layout.blobs[n] for n in program.output_names}
    return layout


class IoRun(list):
    """A layout's run with its edges swapped for device arrays (Layout.io_run), aligned with run_nodes."""

    __slots__ = ()


def find_edges(layout: Layout, program) -> None:
    """layout.head / tail / edge_in / edge_out (see Layout): the copies of graph inputs to the device at
    the run's start, and the copies to the host after its last node."""
    nodes = layout.run_nodes
    inputs, outputs = set(program.input_names), set(program.output_names)
    head = 0
    while (head < len(nodes) and nodes[head].op_type == IO_COPY_OP and nodes[head].attrs.get("to") == DEVICE
           and nodes[head].inputs[0] in inputs):
        layout.edge_in[nodes[head].inputs[0]] = head
        head += 1
    tail = len(nodes)
    while tail > head and nodes[tail - 1].op_type == IO_COPY_OP and nodes[tail - 1].attrs.get("to") != DEVICE:
        tail -= 1
    layout.edge_out = {nodes[j].outputs[0]: j for j in range(tail, len(nodes)) if nodes[j].outputs[0] in outputs}
    layout.head, layout.tail = head, tail


def _shape_only_stub(shape: tuple, dtype: np.dtype) -> np.ndarray:
    """A zero-byte array with the given shape, for ops that read only the shape."""
    return np.lib.stride_tricks.as_strided(np.zeros(1, dtype), shape, (0,) * len(shape), writeable=False)


def infer_and_bind(program, shapes: dict, layout: Layout):
    """Stage 1: shapes and dtypes of every value, static values evaluated, kernels set up.

    Returns:
        (shape, dtype, static, planned [(Step, runner, scratch refs)], dynamic [Step]).
    """
    device, limit, bodies = layout.device, layout.memory_limit_bytes, layout.bodies
    host = device.host  # a device with a host beside it runs there what it has no kernel for
    static: dict[str, np.ndarray] = dict((host or device).weights(program))
    shape = {name: arr.shape for name, arr in static.items()}
    dtype = {name: arr.dtype for name, arr in static.items()}
    for v in program.inputs:
        shape[v.name] = shapes[v.name]
        dtype[v.name] = v.dtype if v.dtype is not None else np.dtype(np.float32)
    planned: list[tuple[Step, Callable, list[ScratchRef]]] = []
    dynamic: list[Step] = []
    dynamic_values: set[str] = set()
    for step in program.steps:
        node = step.node
        ins = node.inputs
        if any(i in dynamic_values for i in ins if i):
            dynamic.append(step)
            dynamic_values.update(o for o in node.outputs if o)
            continue
        values = [static.get(i) if i else None for i in ins]
        if node.op_type in SHAPE_ONLY_OPS or all(v is not None for i, v in zip(ins, values) if i):
            arrays = [v if v is not None or not i else _shape_only_stub(shape[i], dtype[i])
                      for i, v in zip(ins, values)]
            with compiled.reference_kernels():  # static values: the reference kernels, in every tier
                outs = step.evaluate(arrays, "cpu", limit, bodies)
            for o, arr in zip(node.outputs, outs):
                if o:
                    arr.flags.writeable = False
                    static[o], shape[o], dtype[o] = arr, arr.shape, arr.dtype
            continue
        refs: list[ScratchRef] = []
        ctx = step.context([shape[i] if i else None for i in ins], [dtype[i] if i else None for i in ins],
                           values, (host or device).name, refs.append, bodies)
        try:
            specs = step.infer(ctx)
            budget.check(sum(budget.nbytes_of(s, t) for s, t in specs if s is not None), limit,
                         f"node {node.name!r} ({node.op_type}) outputs")  # before the kernel's setup
            if host is not None:  # placement: the device's kernel where it has one for these shapes
                k = device.kernel_for(step, ctx)
                if k is not None:
                    step = Step(node, k, step.version, step.rule)
                    ctx = step.context(ctx.shapes, ctx.dtypes, values, device.name, refs.append, bodies)
                    step.infer(ctx)
                    layout.device_nodes.add(node.name)
            runner = step.bind(ctx)
        except NotStatic:  # the shape (or the kernel's setup) needs data fed at forward
            dynamic.append(step)
            dynamic_values.update(o for o in node.outputs if o)
            continue
        for o, (s, t) in zip(node.outputs, specs):
            if o:
                shape[o], dtype[o] = s, t
        planned.append((step, runner, refs))
    return shape, dtype, static, planned, dynamic


_BLOCKED = re.compile(r"NCHW(\d+)c")


def at_width(kernel_def, lanes: int) -> bool:
    """Whether a kernel type's layouts are unblocked or blocked by `lanes` (NCHW8c, NCHW->NCHW8c at 8)."""
    return all(int(b) == lanes for b in _BLOCKED.findall(kernel_def.layout))


def assign_types(program, planned, shape: dict, dtype: dict, static: dict, keep: set, layout: Layout,
                 lanes: int = 8):
    """Stage 2: a kernel type per node and layout transforms between disagreeing neighbours.

    Blocked kernel types are those of one width, `lanes` (compiled/isa.py: the host's), so a
    model compiles one width's kernels.

    Returns (planned steps with transforms inserted and changed kernels bound, value ->
    layout for values not in the default layout). A model whose ops have one kernel type
    each comes back unchanged.
    """
    if not any(st.alternatives for st, _, _ in planned):
        return planned, {}
    device = layout.device

    def context(step, refs=None):
        ins = step.node.inputs
        return step.context([shape[i] if i else None for i in ins], [dtype[i] if i else None for i in ins],
                            [static.get(i) if i else None for i in ins], device.name,
                            None if refs is None else refs.append, layout.bodies)

    accept = partial(at_width, lanes=lanes)
    choices = [supported_choices(st.kernel, st.alternatives, context(st), accept) if st.alternatives else [st.kernel]
               for st, _, _ in planned]
    sizes = {v: math.prod(s) for v, s in shape.items() if s is not None}
    # the plan depends on the candidates and sizes only: every thread's Net of a Program shares it
    key = (tuple(tuple(id(k) for k in c) for c in choices), tuple(sorted(keep)), tuple(sorted(sizes.items())))
    cache = program.assignments
    plan = cache.get(key)
    if plan is None:
        plan = assign_kernel_types([st.node for st, _, _ in planned], choices, static=set(static),
                                   outputs=keep, sizes=sizes)
        if len(cache) >= 64:
            cache.pop(next(iter(cache)))
        cache[key] = plan
    if not plan.changed:
        return planned, {}
    transform_kernel = lookup(TRANSFORM_OP, DOMAIN, 1, device.name)
    transform_rule = get_rule(TRANSFORM_OP, DOMAIN)

    def bind(step):
        for name in step.node.outputs:  # typed names: the logical shape of their value
            base = name.split("@", 1)[0]
            if name and name != base:
                shape[name], dtype[name] = shape[base], dtype[base]
        refs = []
        ctx = context(step, refs)
        step.infer(ctx)
        return step, step.bind(ctx), refs

    out = []
    for i, ((st, runner, refs), k, node) in enumerate(zip(planned, plan.kernels, plan.nodes)):
        out += [bind(Step(t, transform_kernel, 1, transform_rule)) for t in plan.before.get(i, ())]
        out.append((st, runner, refs) if k is st.kernel and node is st.node
                   else bind(Step(node, k, st.version, st.rule, st.alternatives)))
    out += [bind(Step(t, transform_kernel, 1, transform_rule)) for t in plan.after]
    return out, plan.layouts


def assign_devices(program, planned, shape: dict, dtype: dict, static: dict, keep: set, layout: Layout):
    """Stage 2b, on a device with a host: the io_copy steps between the nodes stage 1 placed on the
    device (layout.device_nodes) and those on the host, device nodes reading and writing the device
    copies v@<device> and the device's weights (engine/placement.py).

    Returns (planned steps with the copies, names of the values stored on the device); adds the
    device statics to `static` and the device copies' shapes and dtypes.
    """
    device = layout.device
    placed = insert_io_copies(planned, layout.device_nodes, static, list(keep), device)
    weights = device.weights(program)  # placed once per device, shared by its Nets
    for name, v in placed.device_statics.items():
        static[name] = weights[v] if v in weights else device.upload(static[v])
        shape[name], dtype[name] = shape[v], dtype[v]
    out = []
    for st, runner, refs in placed.planned:
        for o in st.node.outputs:
            if o and o not in shape:
                base = o[:-len(device.name) - 1]
                shape[o], dtype[o] = shape[base], dtype[base]
        if runner is None:  # an io_copy
            runner = device.to_device if st.node.attrs["to"] == DEVICE else device.to_host
        out.append((st, runner, refs))
    return out, placed.on_device - set(static)


class _Sides:
    """The graph's input and output names one side's planner sees (plan_sides)."""

    def __init__(self, input_names, output_names):
        self.input_names, self.output_names = list(input_names), list(output_names)


def plan_sides(program, planned, shape, physical, dtype, layout_of, static, keep, sizes, options, layout,
               on_device: set):
    """Stage 3 on a device with a host: plan_arena for each side, the host's first (layout.host_plan),
    then the device's (layout.plan: the device arena at memory_opt's lower bound).

    Returns:
        (offsets, Concat parts, in-place Concat steps, scratch offsets, device arena bytes, host arena bytes).
    """
    host_names = set(sizes) - on_device
    offsets, parts, in_place, scratch_at, total = {}, {}, set(), {}, []
    for names, sides in ((host_names, _Sides(program.input_names, program.output_names)), (on_device, _Sides((), ()))):
        sub = restrict(planned, names)
        o, p, i, s, b = plan_arena(sides, sub, shape, physical, dtype, layout_of, static, keep & names,
                                   {n: sizes[n] for n in names if n in sizes}, options, layout)
        offsets.update(o)
        parts.update(p)
        in_place |= i
        scratch_at.update(s)
        total.append(b)
        if names is host_names:
            layout.host_plan = layout.plan
    return offsets, parts, in_place, scratch_at, total[1], total[0]


def plan_arena(program, planned, shape, physical, dtype, layout_of, static, keep, sizes, options, layout):
    """Stage 3: an offset for every activation and workspace (arena.py).

    Returns:
        (offsets, Concat parts, in-place Concat steps, scratch id -> offset, arena bytes);
        sets layout.plan, layout.liveness and layout.plan_seconds under MEMORY.
    """
    memory = options.optimization is Optimization.MEMORY
    scratch_at: dict[int, int] = {}
    parts, in_place = {}, set()  # Concat inputs stored in their output (arena.concats_in_place)
    if memory and options.planner == "arena" and CONCAT_IN_PLACE:
        parts, in_place = concats_in_place(planned, shape, physical, dtype, layout_of, static,
                                           keep | set(program.input_names))
    if memory:
        t0 = time.perf_counter()
        layout.plan, layout.liveness = plan_memory(planned, sizes, static, keep, program.input_names,
                                                   program.output_names, options.planner, parts, in_place)
        layout.plan_seconds = time.perf_counter() - t0
        offsets = dict(layout.plan.offsets)
        arena_bytes = aligned(layout.plan.arena_bytes)
        if options.planner == "arena":  # scratch was planned as values live at one step
            scratch_at = {id(r): offsets[f"{st.node.name}/scratch{j}"]
                          for st, _, refs in planned for j, r in enumerate(refs)}
    else:
        offsets, arena_bytes = {}, 0
        for n in sizes:  # NONE: every blob its own region of the arena
            offsets[n] = arena_bytes
            arena_bytes += aligned(sizes[n])
    if not scratch_at:
        # NONE and the fb-caffe-exts baseline: scratch lives while its node runs,
        # so all nodes share one workspace after the blobs (as Caffe's col buffer).
        workspace = max((sum(aligned(r.nbytes) for r in refs) for _, _, refs in planned), default=0)
        for _, _, refs in planned:
            at = arena_bytes
            for r in refs:
                scratch_at[id(r)] = at
                at += aligned(r.nbytes)
        arena_bytes += workspace
    return offsets, parts, in_place, scratch_at, arena_bytes


def bind_arrays(program, layout: Layout, planned, dynamic, activations, physical, dtype, static, offsets, parts,
                in_place, scratch_at, prepare_calls: bool, where: dict | None = None) -> None:
    """Stage 4: a view of the arena per blob and scratch, each node's call bound to its arrays.

    where: value name or id(scratch ref) -> (Device, arena) on a device with a host (each side's
    arena); None: layout.device's arena for all.
    """
    device, arena = layout.device, layout.arena
    where = where or {}
    blobs = layout.blobs
    blobs.update(static)
    for n in activations:
        at = offsets[parts[n][0]] + parts[n][1] if n in parts else offsets[n]
        dev, buf = where.get(n, (device, arena))
        blobs[n] = dev.view(buf, at, physical[n], dtype[n])
    run, plain, run_nodes = layout.run, layout.plain, layout.run_nodes
    for k, (step, runner, refs) in enumerate(planned):
        if k in in_place:  # its inputs were written in place: nothing to copy
            continue
        for r in refs:
            dev, buf = where.get(id(r), (device, arena))
            r.array = dev.view(buf, scratch_at[id(r)], r.shape, r.dtype)
        args = [blobs[i] if i else None for i in step.node.inputs]
        out = step.out_arg([blobs[o] if o else None for o in step.node.outputs])
        plain.append(partial(runner, *args, out=out))
        run.append(prepare_calls and _prepared(runner, args, out) or plain[-1])
        run_nodes.append(step.node)
    for step in dynamic:
        plain.append(partial(layout.run_dynamic, step))
        run.append(plain[-1])
        run_nodes.append(step.node)
    layout.dynamic = list(dynamic)
    input_ids = {id(blobs[n]): n for n in program.input_names}
    for j, f in enumerate(plain):  # the calls that take an input blob as an argument (inputs read in place)
        for x in dict.fromkeys(map(id, f.args)):
            if x in input_ids:
                layout.readers.setdefault(input_ids[x], []).append(j)


def _prepared(runner, args: list, out):
    """The kernel's prepared call for these arrays, or None.

    A kernel may define prepare_run(*inputs, out) (for a function kernel, an attribute of the
    function, called with its bound attributes as keywords): called once when the Net binds
    its arrays, it returns a zero-argument callable that does what runner(*inputs, out=out)
    does for exactly those arrays, with the per-call Python work (views, argument lists,
    numba's type dispatch: compiled.bound) done ahead, or None where it cannot. The
    arrays stay fixed until the next reshape, which binds again (Paddle-Lite's
    PrepareForRun before Run).
    """
    if isinstance(runner, partial):
        prepare = getattr(runner.func, "prepare_run", None)
        return prepare(*runner.args, *args, out=out, **runner.keywords) if prepare is not None else None
    prepare = getattr(runner, "prepare_run", None)
    return prepare(*args, out=out) if prepare is not None else None
