"""Shape rules of LayerNormalization (three outputs) and Einsum (the equation's output term).

LRN, InstanceNormalization and Softmax keep their input's shape (`same_as_input`
in common.py); BatchNormalization's rule is in matmul.py. `parse_einsum` and
`einsum_shape` are shared with the Einsum kernels.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import shape_rule
from .common import norm_axis

# ONNX TensorProto elem_type -> numpy dtype for the stash_type attribute
# (FLOAT, FLOAT16, DOUBLE; BFLOAT16 = 16 has no numpy dtype).
STASH_DTYPES = {1: np.dtype(np.float32), 10: np.dtype(np.float16), 11: np.dtype(np.float64)}


def stash_dtype(ctx) -> np.dtype:
    """The precision LayerNormalization computes its statistics in (stash_type, default 1 = float)."""
    st = int(ctx.attr("stash_type", 1))
    if st not in STASH_DTYPES:
        raise ctx.error(f"stash_type={st} is not supported (expected one of {sorted(STASH_DTYPES)}: "
                        f"float, float16, double)")
    return STASH_DTYPES[st]


@shape_rule("LayerNormalization")
def layer_normalization(ctx):
    """Y: X's shape and dtype; Mean, InvStdDev: (d[0], ..., d[axis-1], 1, ..., 1) in stash_type.

    ONNX LayerNormalization-17: normalized axes are [axis, ..., rank-1]; Scale
    and B broadcast unidirectionally to X.
    """
    shape = tuple(ctx.shape(0))
    rank = len(shape)
    if rank == 0:
        raise ctx.error("X must have rank >= 1")
    axis = norm_axis(ctx, int(ctx.attr("axis", -1)), rank)
    for i, name in ((1, "Scale"), (2, "B")):
        if ctx.has_input(i) and not _broadcasts_to(ctx.shape(i), shape):
            raise ctx.error(f"{name} of shape {tuple(ctx.shape(i))} does not broadcast "
                            f"unidirectionally to X of shape {shape}")
    reduced = shape[:axis] + (1,) * (rank - axis)
    stash = stash_dtype(ctx)
    return [(shape, ctx.dtype(0)), (reduced, stash), (reduced, stash)]


def _broadcasts_to(shape, target) -> bool:
    """Unidirectional broadcasting (ONNX Broadcasting.md): `shape` stretches to `target`."""
    try:
        return tuple(np.broadcast_shapes(tuple(shape), tuple(target))) == tuple(target)
    except ValueError:
        return False


# ---- Einsum -------------------------------------------------------------------
ELLIPSIS = "..."


@dataclass(frozen=True)
class EinsumSpec:
    """A parsed Einsum equation for given operand ranks.

    Attributes:
        equation: the equation in numpy's form (no spaces, output term explicit).
        inputs: per operand, its labels ('.' stands for the ellipsis, once).
        output: the output labels, '.' for the ellipsis.
        ellipsis_ranks: per operand, how many dimensions its ellipsis covers.
    """

    equation: str
    inputs: tuple
    output: str
    ellipsis_ranks: tuple


def parse_einsum(equation: str, ranks, error=ValueError) -> EinsumSpec:
    """Parse an ONNX Einsum equation (Einsum-12 spec) for operands of the given ranks.

    Labels are ASCII letters (upper and lower case distinct); '...' stands for
    the same broadcast dimensions in every term; spaces are ignored. Without
    '->' the output is the ellipsis (if any) followed by the labels that occur
    exactly once, sorted by ASCII code ("A" < "Z" < "a" < "z").

    Raises:
        error(message): malformed equation, wrong number of terms, a term whose
            label count does not fit its operand's rank.
    """
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    if "->" in rhs:
        raise error(f"equation {equation!r} has more than one '->'")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise error(f"equation {equation!r} has {len(terms)} input term(s) for {len(ranks)} input(s)")
    inputs, ell = [], []
    for k, (term, rank) in enumerate(zip(terms, ranks)):
        labels = _labels(term, equation, error)
        n = len(labels) - ("." in labels)
        if "." in labels:
            if rank < n:
                raise error(f"equation {equation!r}: term {k} {term!r} names {n} dimension(s) "
                            f"besides '...', input {k} has rank {rank}")
            ell.append(rank - n)
        else:
            if rank != n:
                raise error(f"equation {equation!r}: term {k} {term!r} names {n} dimension(s), "
                            f"input {k} has rank {rank}")
            ell.append(0)
        inputs.append(labels)
    if arrow:
        output = _labels(rhs, equation, error)
        seen = set(c for t in inputs for c in t)
        for c in output:
            if c not in seen and c != ".":
                raise error(f"equation {equation!r}: output label {c!r} appears in no input term")
        if len(set(output)) != len(output):
            raise error(f"equation {equation!r}: output term {rhs!r} repeats a label")
        if "." not in output and max(ell, default=0) > 0:
            raise error(f"equation {equation!r}: '...' covers {max(ell)} dimension(s) of an input "
                        f"but is missing from the output term (it cannot be summed over)")
    else:
        counts: dict[str, int] = {}
        for t in inputs:
            for c in t:
                counts[c] = counts.get(c, 0) + 1
        once = sorted(c for c, n in counts.items() if n == 1 and c != ".")
        output = ("." if any("." in t for t in inputs) else "") + "".join(once)
    np_eq = ",".join(t.replace(".", ELLIPSIS) for t in inputs) + "->" + output.replace(".", ELLIPSIS)
    return EinsumSpec(np_eq, tuple(inputs), output, tuple(ell))


def _labels(term: str, equation: str, error) -> str:
    """A term with its ellipsis as '.', checked: letters and at most one '...'."""
    if term.count(ELLIPSIS) > 1 or term.replace(ELLIPSIS, "").count("."):
        raise error(f"equation {equation!r}: term {term!r} has a malformed or repeated '...'")
    t = term.replace(ELLIPSIS, ".")
    bad = [c for c in t if not (c == "." or ("a" <= c <= "z") or ("A" <= c <= "Z"))]
    if bad:
        raise error(f"equation {equation!r}: {bad[0]!r} is not a label (letters a-z, A-Z, and '...')")
    return t


def einsum_shape(spec: EinsumSpec, shapes, error=ValueError) -> tuple:
    """Output shape of an Einsum: label sizes (1 broadcasts, as numpy) and the broadcast ellipsis."""
    sizes: dict[str, int] = {}
    ell_shapes = []
    for k, (labels, shape) in enumerate(zip(spec.inputs, shapes)):
        shape = tuple(shape)
        e = spec.ellipsis_ranks[k]
        dims = iter(shape)
        for c in labels:
            if c == ".":
                ell_shapes.append(tuple(next(dims) for _ in range(e)))
                continue
            d = next(dims)
            old = sizes.get(c)
            if old is None or old == 1:
                sizes[c] = d
            elif d != old and d != 1:
                raise error(f"equation {spec.equation!r}: label {c!r} has size {old} and {d}")
    try:
        ell = tuple(np.broadcast_shapes(*ell_shapes)) if ell_shapes else ()
    except ValueError:
        raise error(f"equation {spec.equation!r}: the '...' dimensions {ell_shapes} "
                    f"do not broadcast") from None
    out = []
    for c in spec.output:
        out.extend(ell if c == "." else (sizes[c],))
    return tuple(out)


@shape_rule("Einsum")
def einsum(ctx):
    """Output: the sizes of the output term's labels (ellipsis broadcast); dtype of the inputs."""
    n = ctx.num_inputs
    if n == 0:
        raise ctx.error("needs at least one input")
    dtypes = {np.dtype(ctx.dtype(i)) for i in range(n)}
    if len(dtypes) != 1:
        raise ctx.error(f"inputs have different dtypes {sorted(map(str, dtypes))}")
    spec = parse_einsum(str(ctx.attr("equation", "")), [len(ctx.shape(i)) for i in range(n)], ctx.error)
    return [(einsum_shape(spec, [ctx.shape(i) for i in range(n)], ctx.error), ctx.dtype(0))]
