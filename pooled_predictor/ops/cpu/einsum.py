"""Einsum CPU kernel: two-operand contractions as one batched matmul, the rest by numpy.einsum."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..registry import kernel
from ..shapes.normalization import einsum_shape, parse_einsum


@kernel("Einsum", since=(12, 28))
class Einsum:
    """output[output-term] = sum over the other labels of prod_k input_k[term_k].

    ONNX Einsum-12 and -28 (-28 adds bfloat16, which numpy lacks): an equation
    ``term1, term2, ... [-> output-term]`` over letter labels (case sensitive)
    and '...' for broadcast dimensions; labels repeated in a term take the
    diagonal; without '->' the output is '...' then the labels occurring once,
    in ASCII order. Any equation numpy.einsum accepts: matrix products
    ('ij,jk->ik'), batched ones ('bhqd,bhkd->bhqk', '...ij,...jk'),
    transposes, traces, diagonals, outer products, reductions.

    Shapes: operands as the terms say; output as the output term says (label
    sizes of 1 broadcast, as in numpy). All operands share one dtype (ints,
    float16/32/64).

    Two operands whose shared labels are summed (the matmul-like cases) run as
    one batched matmul planned at reshape: labels are grouped into batch
    (both operands and output), left / right (one operand and output) and
    contracted (both operands, not output); labels only one operand has and
    the output lacks are summed away first. Each operand is viewed as
    (batch..., rows, cols), transposed for free when its layout allows, copied
    into scratch otherwise; the product goes straight into `out` when the
    output term is batch + left + right, else through scratch. Every other
    equation (one operand, three or more, diagonals) runs numpy.einsum with a
    contraction order planned at reshape; numpy allocates its intermediates.
    """

    def __init__(self, ctx, *, equation=""):
        n = ctx.num_inputs
        shapes = [tuple(ctx.shape(i)) for i in range(n)]
        spec = parse_einsum(str(equation), [len(s) for s in shapes], ctx.error)
        self.equation = spec.equation
        out_shape = einsum_shape(spec, shapes, ctx.error)
        self.plan = _MatmulPlan.build(spec, shapes, out_shape, ctx) if n == 2 else None
        self.path = False  # one operand: numpy's direct loop
        if self.plan is None and n > 1:
            # Zero-stride stand-ins: einsum_path reads only shapes.
            dummies = [np.broadcast_to(np.zeros((), ctx.dtype(i)), s) for i, s in enumerate(shapes)]
            self.path = np.einsum_path(self.equation, *dummies, optimize="greedy")[0]

    def __call__(self, *inputs, out):
        if self.plan is not None:
            self.plan.run(*inputs, out=out)
        else:
            np.einsum(self.equation, *inputs, out=out, optimize=self.path)


# ---- the batched-matmul plan ------------------------------------------------------------
def _expand(spec, ranks) -> tuple[list[list[str]], list[str]]:
    """Labels per operand and of the output with '...' spelled out as '#0', '#1', ... (right-aligned)."""
    width = max(spec.ellipsis_ranks, default=0)
    ell = [f"#{i}" for i in range(width)]
    terms = []
    for labels, e in zip(spec.inputs, spec.ellipsis_ranks):
        t = []
        for c in labels:
            t.extend(ell[width - e:] if c == "." else [c])
        terms.append(t)
    out = []
    for c in spec.output:
        out.extend(ell if c == "." else [c])
    return terms, out


@dataclass
class _Operand:
    """How one operand becomes a (batch..., rows, cols) matrix stack."""

    sum_axes: tuple          # axes summed away first (labels neither the other operand nor the output has)
    reduced: object          # ScratchRef for the summed operand, or None
    perm: tuple | None       # transpose into batch + rows + cols order when a copy is needed
    copy: object             # ScratchRef of the transposed copy, or None
    shape: tuple             # (batch..., rows, cols) or, with swap, (batch..., cols, rows)
    swap: bool               # view as (batch..., cols, rows) and swap the last two axes (no copy)

    def matrix(self, x):
        if self.sum_axes:
            r = self.reduced.array
            np.sum(x, axis=self.sum_axes, out=r)
            x = r
        if self.copy is not None:
            c = self.copy.array
            np.copyto(c, x.transpose(self.perm))
            x = c
        x = x.reshape(self.shape)
        return np.swapaxes(x, -1, -2) if self.swap else x


class _MatmulPlan:
    """out = permute(matmul(A as (batch, M, K), B as (batch, K, N))), planned once per reshape."""

    def __init__(self, a: _Operand, b: _Operand, res_shape, direct, full_shape, out_perm, res):
        self.a, self.b = a, b
        self.res_shape = res_shape
        self.direct = direct
        self.full_shape = full_shape
        self.out_perm = out_perm
        self.res = res

    @classmethod
    def build(cls, spec, shapes, out_shape, ctx):
        """The plan, or None when the equation is not a plain contraction of two operands."""
        (la, lb), lout = _expand(spec, [len(s) for s in shapes])
        if len(set(la)) != len(la) or len(set(lb)) != len(lb):
            return None  # a diagonal: numpy.einsum
        size_a, size_b = dict(zip(la, shapes[0])), dict(zip(lb, shapes[1]))
        size_out = dict(zip(lout, out_shape))
        contract = [c for c in la if c in size_b and c not in size_out]
        if not contract or any(size_a[c] != size_b[c] for c in contract):
            return None  # no shared sum (element-wise / outer) or broadcast sum labels: numpy.einsum
        batch = [c for c in lout if c in size_a and c in size_b]
        left = [c for c in lout if c in size_a and c not in size_b]
        right = [c for c in lout if c in size_b and c not in size_a]
        dtype = ctx.dtype(0)

        def prod(sizes, labels):
            return int(np.prod([sizes[c] for c in labels], dtype=np.int64))

        def operand(labels, sizes, rows, cols):
            keep = [c for c in labels if c in batch or c in rows or c in cols]
            sum_axes = tuple(i for i, c in enumerate(labels) if c not in keep)
            reduced = ctx.scratch([sizes[c] for c in keep], dtype) if sum_axes else None
            bshape = tuple(sizes[c] for c in batch)
            r, k = prod(sizes, rows), prod(sizes, cols)
            if keep == batch + rows + cols:
                return _Operand(sum_axes, reduced, None, None, bshape + (r, k), False)
            if keep == batch + cols + rows:
                return _Operand(sum_axes, reduced, None, None, bshape + (k, r), True)
            order = batch + rows + cols
            perm = tuple(keep.index(c) for c in order)
            copy = ctx.scratch([sizes[c] for c in order], dtype)
            return _Operand(sum_axes, reduced, perm, copy, bshape + (r, k), False)

        a = operand(la, size_a, left, contract)
        b = operand(lb, size_b, contract, right)
        m, n = prod(size_out, left), prod(size_out, right)
        res_shape = tuple(size_out[c] for c in batch) + (m, n)
        full = batch + left + right
        direct = full == lout
        full_shape = tuple(size_out[c] for c in full)
        out_perm = tuple(full.index(c) for c in lout)
        res = None if direct else ctx.scratch(res_shape, dtype)
        return cls(a, b, res_shape, direct, full_shape, out_perm, res)

    def run(self, x, y, *, out):
        a, b = self.a.matrix(x), self.b.matrix(y)
        if self.direct:
            if not out.flags.c_contiguous:
                raise ValueError(f"output of shape {out.shape} is not C-contiguous")
            np.matmul(a, b, out=out.reshape(self.res_shape))
        else:
            res = self.res.array
            np.matmul(a, b, out=res)
            np.copyto(out, res.reshape(self.full_shape).transpose(self.out_perm))
