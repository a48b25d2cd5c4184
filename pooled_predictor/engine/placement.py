"""Device placement: which nodes run on a device and which on its host, and the io_copy steps between.

Paddle-Lite's static_kernel_pick_pass + type_target_cast_pass, with the device as part of the kernel
type. For a layout on a Device with a `host` (engine/device.py: CUDA), in the layout pipeline:

* place (stage 1, at each node once its output shapes are known): the node runs on the device when
  device.kernel_for(step, ctx) gives a kernel -- the registry has one for the device, taking the
  node's attributes and supporting its shapes and dtypes -- and on the host (its CPU kernel)
  otherwise. Only the kernel that runs is set up.
* insert_io_copies (stage 2, after the layout transforms): names follow passes/assign.typed_name's
  rule -- a value named v is always the host's, v@<device> its device copy. Graph inputs and outputs,
  kept blobs and the inputs of data-dependent nodes are host values, so the Net feeds and reads
  host (pinned) memory; a device node reads and writes v@<device>; an io_copy step (IoCopy, our
  domain) is inserted before the first node that needs a value on the side it is not on -- a
  graph input's copy to the device before every node -- and after the last node for the host
  values read after the run. Those copies at the run's two ends are its edges: a CUDA graph
  captures what lies between (engine/net.py), and Layout.io_run swaps them for copies from
  the caller's device arrays, or drops them for outputs returned on the device. Weights a device node reads are the
  device's copies, placed once per device (w@<device>: Device.weights).
* the arena (stage 3) is planned per side with memory_opt, the same planner as the CPU's: the
  device's values in the device arena, the host's in a host arena (restrict() gives the planner
  each side's view of the steps).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..ir import Node
from ..ops.registry import KernelDef
from ..ops.shapes.fused import DOMAIN
from ..ops.step import Step

IO_COPY_OP = "IoCopy"
HOST, DEVICE = "host", "device"


def _io_copy_impl(x, *, out, to=HOST):  # never called: the Device's to_device / to_host run the step
    raise NotImplementedError


IO_COPY = KernelDef(IO_COPY_OP, DOMAIN, 1, "cpu", _io_copy_impl)


def _same_shape(ctx):
    return [(ctx.shape(0), ctx.dtype(0))]


def device_name(value: str, device) -> str:
    """The name of `value`'s copy on `device` (v@cuda)."""
    return f"{value}@{device.name}"


@dataclass
class Placement:
    """What insert_io_copies planned.

    Attributes:
        planned: the steps with io_copy steps inserted and device nodes' inputs/outputs renamed.
        on_device: value names stored on the device (v@<device>), activations and weights.
        device_statics: device name -> host value name, for the statics device nodes read.
        copies: the inserted io_copy Nodes, in order.
    """

    planned: list
    on_device: set = field(default_factory=set)
    device_statics: dict = field(default_factory=dict)
    copies: list = field(default_factory=list)


def insert_io_copies(planned, device_nodes: set, static, host_reads, device) -> Placement:
    """Rename device nodes' values to their device copies and insert the io_copy steps.

    Args:
        planned: (Step, runner, scratch refs) in run order; the nodes named in device_nodes run on
            the device (their runners bound to device kernels), the others on the host.
        static: values known before forward (weights, folded values): never copied by a step.
        host_reads: values read on the host after the run (graph outputs, kept blobs, the inputs
            of data-dependent nodes): brought back to the host after the last node.
        device: the Device (its name makes the device copies' names).
    Returns:
        Placement; its io_copy steps have runner None (the Net binds device.to_device / to_host).
    """
    where: dict[str, set] = {}  # value -> the sides holding it (absent: the host only)
    out = Placement([])
    front = []  # the graph inputs' copies to the device: first, before any node (Layout.io_run swaps them)

    def copy(value: str, to: str, first: bool = False):
        src, dst = (value, device_name(value, device)) if to == DEVICE else (device_name(value, device), value)
        node = Node(IO_COPY_OP, [src], [dst], {"to": to}, DOMAIN, name=f"{dst}/io_copy")
        out.copies.append(node)
        (front if first else out.planned).append((Step(node, IO_COPY, 1, _same_shape), None, []))
        where.setdefault(value, {HOST}).add(to)
        if to == DEVICE:
            out.on_device.add(dst)

    for st, runner, refs in planned:
        node = st.node
        side = DEVICE if node.name in device_nodes else HOST
        inputs = list(node.inputs)
        for j, v in enumerate(inputs):
            if not v:
                continue
            if v in static:
                if side == DEVICE:
                    inputs[j] = device_name(v, device)
                    out.device_statics[inputs[j]] = v
                    out.on_device.add(inputs[j])
                continue
            if side not in where.get(v, {HOST}):
                copy(v, side, first=v not in where)  # a value no step wrote: a graph input
            if side == DEVICE:
                inputs[j] = device_name(v, device)
        outputs = list(node.outputs)
        for j, o in enumerate(outputs):
            if o:
                where[o] = {side}
                if side == DEVICE:
                    outputs[j] = device_name(o, device)
                    out.on_device.add(outputs[j])
        if side == DEVICE:
            node = Node(node.op_type, inputs, outputs, node.attrs, node.domain, node.name)
            st = Step(node, st.kernel, st.version, st.rule, st.alternatives)
        out.planned.append((st, runner, refs))
    for v in dict.fromkeys(host_reads):
        if v in where and HOST not in where[v]:
            copy(v, HOST)
    out.planned[:0] = front
    return out


def restrict(planned, names: set) -> list:
    """The steps as one side's planner sees them: inputs and outputs not in `names` blanked (''),
    scratch kept only for the steps whose outputs are on this side (a step writes one side)."""
    res = []
    for st, runner, refs in planned:
        node = st.node
        ins = [i if i in names else "" for i in node.inputs]
        outs = [o if o in names else "" for o in node.outputs]
        mine = any(outs) or (not any(node.outputs) and any(ins))
        sub = Node(node.op_type, ins, outs, node.attrs, node.domain, node.name)
        res.append((Step(sub, st.kernel, st.version, st.rule), runner, refs if mine else []))
    return res
