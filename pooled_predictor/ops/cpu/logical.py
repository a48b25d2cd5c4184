"""Logical CPU kernels: Equal, Less, Greater, LessOrEqual, GreaterOrEqual, Not, And, Or, Xor, Where.

ONNX spec: each op's section of Operators.md; broadcasting per "Broadcasting in
ONNX" (numpy multidirectional rules). Comparisons write bool; strings (object
arrays) compare by value (Equal-19). A comparison's output can take the place
of a bool input (Equal on bools), hence inplace=(0, 1).
"""

from __future__ import annotations

import numpy as np

from ..registry import kernel


@kernel("Equal", since=(11, 13, 19), inplace=(0, 1))
def equal(a, b, *, out):
    """C = (A == B), element-wise over broadcast inputs (bool, ints, floats; strings from Equal-19)."""
    np.equal(a, b, out=out)


@kernel("Less", since=(9, 13), inplace=(0, 1))
def less(a, b, *, out):
    """C = (A < B), element-wise over broadcast inputs (False wherever a NaN is compared)."""
    np.less(a, b, out=out)


@kernel("Greater", since=(9, 13), inplace=(0, 1))
def greater(a, b, *, out):
    """C = (A > B), element-wise over broadcast inputs (False wherever a NaN is compared)."""
    np.greater(a, b, out=out)


@kernel("Not", since=1, inplace=(0,))
def not_(x, *, out):
    """Y = not X, element-wise on bool tensors."""
    np.logical_not(x, out=out)


@kernel("Where", since=(9, 16), inplace=(1, 2))
class Where:
    """output = X where condition else Y, element-wise over the broadcast of all three (ONNX Where).

    numpy.where with three arguments, written into `out`: Y is copied, then X
    where the condition holds. When `out` holds X (run in place), Y is copied
    where the condition does not hold instead.
    Shapes: condition (bool), X, Y broadcast to the output; dtype X's (any, strings included).
    Workspace: not-condition, condition's shape (bool), used only in place on X.
    """

    def __init__(self, ctx):
        self.not_cond = ctx.scratch(ctx.shape(0), np.bool_)

    def __call__(self, cond, x, y, *, out):
        if np.may_share_memory(out, x):
            if np.may_share_memory(out, y):  # Where(c, v, v) in place: rare, allocates
                np.copyto(out, np.where(cond, x, y))
                return
            nc = self.not_cond.array
            np.logical_not(cond, out=nc)
            np.copyto(out, y, where=nc)
            return
        np.copyto(out, y)
        np.copyto(out, x, where=cond)


@kernel("LessOrEqual", since=(12, 16), inplace=(0, 1))
def less_or_equal(a, b, *, out):
    """C = (A <= B), element-wise over broadcast inputs (False wherever a NaN is compared)."""
    np.less_equal(a, b, out=out)


@kernel("GreaterOrEqual", since=(12, 16), inplace=(0, 1))
def greater_or_equal(a, b, *, out):
    """C = (A >= B), element-wise over broadcast inputs (False wherever a NaN is compared)."""
    np.greater_equal(a, b, out=out)


# And-1, Or-1, Xor-1 (legacy `broadcast`/`axis` attributes, opsets 1-6) are not registered.
@kernel("And", since=7, inplace=(0, 1))
def and_(a, b, *, out):
    """C = A and B on bool tensors."""
    np.logical_and(a, b, out=out)


@kernel("Or", since=7, inplace=(0, 1))
def or_(a, b, *, out):
    """C = A or B on bool tensors."""
    np.logical_or(a, b, out=out)


@kernel("Xor", since=7, inplace=(0, 1))
def xor(a, b, *, out):
    """C = A xor B on bool tensors."""
    np.logical_xor(a, b, out=out)
