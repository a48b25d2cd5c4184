"""The operation codes the CUDA C kernels switch on (kernels/common.cuh, elementwise.cu, reduce.cu),
and the registration every CUDA kernel goes through.

A CUDA kernel is registered for the same ONNX schema versions as the CPU kernel of its op (the
CPU's are the reference: tests/gpu compares against them), with a `supports(ctx)` that says at
reshape whether it runs the node at those shapes and dtypes; where it does not, the placement
stage (engine/placement.py) runs the CPU kernel behind host<->device copies.
"""

from __future__ import annotations

import numpy as np

from ..registry import kernel, versions

# activations: kernels/common.cuh ACT_*
ACT = {"Identity": 0, "Relu": 1, "LeakyRelu": 2, "Clip": 3, "Sigmoid": 4, "Tanh": 5, "HardSigmoid": 6,
       "HardSwish": 7, "Elu": 8, "Gelu": 9, "GeluTanh": 10, "Silu": 11, "Softplus": 12, "Mish": 13, "Selu": 14,
       "Softsign": 15}
# unary math past the activations: kernels/elementwise.cu U_*
UNARY = {"Exp": 100, "Log": 101, "Sqrt": 102, "Neg": 103, "Abs": 104, "Reciprocal": 105, "Erf": 106, "Floor": 107,
         "Ceil": 108, "Sin": 109, "Cos": 110, "Round": 111, "Sign": 112, "Identity": 113}
# binary: kernels/elementwise.cu B_*
BINARY = {"Add": 0, "Sub": 1, "Mul": 2, "Div": 3, "Pow": 4, "Max": 5, "Min": 6, "PRelu": 7}
# reductions: kernels/reduce.cu R_*
REDUCE = {"ReduceSum": 0, "ReduceMean": 1, "ReduceMax": 2, "ReduceMin": 3, "ReduceProd": 4, "ReduceL1": 5,
          "ReduceL2": 6, "ReduceSumSquare": 7, "ReduceLogSumExp": 8}

F32 = np.dtype(np.float32)


def float32_io(ctx) -> bool:
    """Every present input that is not a static weight, and every output, is float32."""
    ins = [ctx.dtype(i) for i in range(ctx.num_inputs) if ctx.has_input(i) and not ctx.is_static(i)]
    outs = ctx.out_dtypes or []
    return all(np.dtype(t) == F32 for t in ins + [o for o in outs if o is not None])


def cuda_kernel(op_type: str, *, domain: str = "", since=None, supports=float32_io, inplace=()):
    """Register a CUDA kernel at the CPU kernel's schema versions (or `since`).

    Raises:
        ValueError: the op has no CPU kernel to take the versions from and `since` is not given.
    """
    if since is None:
        since = tuple(sorted(versions(op_type, domain, "cpu")))
        if not since:
            raise ValueError(f"{op_type}: no CPU kernel to take the schema versions from; give since=")
    return kernel(op_type, since=since, device="cuda", domain=domain, supports=supports, inplace=inplace)


def activation_of(attrs: dict) -> tuple[int, float, float]:
    """(code, alpha, beta) of a fused node's `activation` / `activation_params` (ops/shapes/fused.py)."""
    name = attrs.get("activation", "Identity") or "Identity"
    if isinstance(name, bytes):
        name = name.decode()
    p = [float(v) for v in attrs.get("activation_params", []) or []] + [0.0, 0.0]
    if name == "Clip":
        lo = p[0] if np.isfinite(p[0]) else -np.inf
        hi = p[1] if np.isfinite(p[1]) else np.inf
        return ACT["Clip"], lo, hi
    return ACT[name], p[0], p[1]
