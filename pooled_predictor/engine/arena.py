"""The arena stage of the layout pipeline: which bytes each activation and workspace gets.

Under Optimization.MEMORY the bound steps become memory_opt's abstract steps (what each
reads and writes, which write may reuse a dying input in place, scratch as a value live
at one step) and memory_opt places every value in one arena at the liveness lower bound
(planner "arena") or in fb-caffe-exts' shared buffers (planner "shared"). Concat inputs
that are consecutive ranges of the Concat's output are stored there by their producers
(concats_in_place), so the Concat copies nothing.
"""

from __future__ import annotations

import math

import numpy as np
from memory_opt import Step as PlanStep
from memory_opt import analyze, plan_arena, plan_shared_buffers

from ..ops.layouts import DEFAULT_LAYOUT, block_of
from .device import ALIGNMENT


CONCAT_IN_PLACE = True
"""Under Optimization.MEMORY (arena planner), layouts built from now on store the inputs of a Concat
in its output where that is one contiguous range per input (concats_in_place); False: every
Concat copies (its inputs planned as values of their own)."""


def concats_in_place(planned, shape: dict, physical: dict, dtype: dict, layout_of: dict, static: dict,
                      pinned: set) -> tuple[dict, set]:
    """The Concat nodes whose inputs can be written straight into their output, and where.

    As TensorRT's and OpenVINO's concat elimination: each producer writes its slice of the
    Concat's output, and the Concat copies nothing. A Concat qualifies
    when its inputs' arrays are consecutive ranges of its output's array: they agree with the
    output on every physical axis but one, whose sizes add up to the output's, and all axes
    before it have size 1 (so: batch 1 for a channel Concat, in NCHW or NCHW8c; in a blocked
    layout every input's channels a multiple of the block, so no padding lanes in between).
    Its inputs must be distinct values, each written by a planned node, none a graph input or
    output, kept, read by a node with a data-dependent shape, or part of another such Concat,
    and its output no part of one. Bits: the same (the same values, never copied).

    Returns:
        (value -> (the Concat output holding it, byte offset), indices of those Concat steps).
    """
    produced = {o for st, _, _ in planned for o in st.node.outputs if o}
    parts: dict[str, tuple[str, int]] = {}
    holders: set = set()
    steps: set = set()
    for k, (st, _, refs) in enumerate(planned):
        node = st.node
        if node.op_type != "Concat" or node.domain not in ("", "ai.onnx") or refs or len(node.outputs) != 1:
            continue
        out, ins = node.outputs[0], list(node.inputs)
        if not out or out in pinned or out in parts or len(ins) < 2 or len(set(ins)) != len(ins) \
                or dtype[out] == object:
            continue
        if any(not i or i in static or i in pinned or i in parts or i in holders or i not in produced
               or dtype[i] != dtype[out] for i in ins):
            continue
        po = physical[out]
        pis = [physical[i] for i in ins]
        if any(len(p) != len(po) for p in pis) or 0 in po:
            continue
        axes = {a for p in pis for a in range(len(po)) if p[a] != po[a]}
        if len(axes) != 1:
            continue
        (a,) = axes
        if sum(p[a] for p in pis) != po[a] or math.prod(po[:a]) != 1:
            continue
        lay = layout_of.get(out, DEFAULT_LAYOUT)
        if lay != DEFAULT_LAYOUT and (lay == "NHWC" or any(shape[i][1] % block_of(lay) for i in ins)
                                      or any(layout_of.get(i, DEFAULT_LAYOUT) != lay for i in ins)):
            continue
        at = 0
        for i in ins:
            parts[i] = (out, at)
            at += nbytes(physical[i], dtype[i])
        holders.add(out)
        steps.add(k)
    return parts, steps


def plan_memory(planned, sizes: dict, static: dict, keep: set, input_names, output_names, planner: str,
                parts=None, skipped=()):
    """memory_opt plan of the activations (and scratch) of these bound steps.

    planner: "arena" (offsets at the liveness lower bound; scratch planned as values live
    at one step) or "shared" (fb-caffe-exts' shared buffers; scratch left to one workspace).

    parts: value -> (the value whose buffer holds it, byte offset), for Concat inputs stored in
    their output (concats_in_place): the planner sees one value, the output, written by the
    first of their producers and read wherever any of them is; the Concats (`skipped`, step
    indices) are not steps of the plan.
    """
    parts = parts or {}
    holders = {h for h, _ in parts.values()}

    def buffer(name):
        return parts[name][0] if name in parts else name

    last_use: dict[str, int] = {}
    for k, (st, _, _) in enumerate(planned):
        if k in skipped:
            continue
        for i in st.node.inputs:
            if i:
                last_use[buffer(i)] = k
    steps, sizes = [], dict(sizes)
    outputs = set(keep) | set(output_names)
    written: set = set()
    for k, (st, _, refs) in enumerate(planned):
        if k in skipped:
            continue
        node = st.node
        reads = [buffer(i) for i in dict.fromkeys(node.inputs) if i and i not in static]
        writes = []
        for o in node.outputs:
            if o:  # a later part of a buffer already written: it is read (kept alive), not written again
                (reads if buffer(o) in written else writes).append(buffer(o))
                written.add(buffer(o))
        reads = list(dict.fromkeys(reads))
        # the arena planner places scratch too; the fb baseline leaves it to one workspace
        scratch = [f"{node.name}/scratch{j}" for j in range(len(refs))] if planner == "arena" else []
        for name, r in zip(scratch, refs):
            sizes[name] = r.nbytes
        inplace = None
        out0 = node.outputs[0] if node.outputs else ""
        if out0 and out0 not in outputs and out0 not in parts and out0 not in holders and st.kernel.inplace:
            for idx in st.kernel.inplace:
                cand = node.inputs[idx] if idx < len(node.inputs) else ""
                if cand in parts:
                    continue
                if cand and cand not in static and last_use.get(cand) == k and sizes.get(cand) == sizes[out0] \
                        and sum(buffer(i) == cand for i in node.inputs if i) == 1:
                    inplace = {out0: cand}
                    break
        # scratch: written and never read, so it lives only at this step
        steps.append(PlanStep(tuple(reads), tuple(writes + scratch), inplace))
    liveness = analyze(steps, sizes, inputs=input_names,
                       outputs=[o for o in outputs if o in sizes], inplace=planner != "shared")
    if planner == "shared":
        plan = plan_shared_buffers(liveness)
    else:
        plan = plan_arena(liveness)
    return plan, liveness


def nbytes(shape, dtype) -> int:
    return math.prod(shape) * np.dtype(dtype).itemsize


def aligned(n: int, alignment: int = ALIGNMENT) -> int:
    return (n + alignment - 1) // alignment * alignment
