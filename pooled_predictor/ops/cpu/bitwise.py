"""Bitwise CPU kernels on integer tensors: BitShift, BitwiseAnd, BitwiseOr,
BitwiseXor, BitwiseNot.

ONNX spec: each op's section of Operators.md; broadcasting per "Broadcasting in
ONNX". BitShift-11 takes unsigned types; BitShift-28 adds signed ones, where a
right shift is arithmetic, and defines shifts by a negative amount or by at
least the bit width as the sign fill alone (-1 for a negative X shifted right,
0 otherwise): numpy's shifts give exactly that.
"""

from __future__ import annotations

import numpy as np

from ..registry import kernel


@kernel("BitShift", since=(11, 28), inplace=(0, 1))
def bit_shift(x, y, *, out, direction):
    """Z = X << Y (direction "LEFT") or X >> Y ("RIGHT"); X and Y of one integer type."""
    (np.left_shift if direction == "LEFT" else np.right_shift)(x, y, out=out)


@kernel("BitwiseAnd", since=18, inplace=(0, 1))
def bitwise_and(a, b, *, out):
    """C = A & B (integers)."""
    np.bitwise_and(a, b, out=out)


@kernel("BitwiseOr", since=18, inplace=(0, 1))
def bitwise_or(a, b, *, out):
    """C = A | B (integers)."""
    np.bitwise_or(a, b, out=out)


@kernel("BitwiseXor", since=18, inplace=(0, 1))
def bitwise_xor(a, b, *, out):
    """C = A ^ B (integers)."""
    np.bitwise_xor(a, b, out=out)


@kernel("BitwiseNot", since=18, inplace=(0,))
def bitwise_not(x, *, out):
    """Y = ~X (integers)."""
    np.invert(x, out=out)
