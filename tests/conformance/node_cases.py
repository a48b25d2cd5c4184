"""ONNX's node conformance cases: loading, selection by op type, exclusions, running, comparing.

onnx >= 1.23 ships no data/node folder: `onnx.backend.test.loader.load_model_tests(kind="node")`
builds every case in memory from onnx/backend/test/case/node/*.py (each
`expect(...)` call gives one TestCase with `.model`, a ModelProto, and
`.data_sets`, [(inputs, expected outputs)], arrays or TensorProtos), plus an
`_expanded` case per function-defined op whose graph is the op's function body.

A case is selected for a device when every node of its graph (subgraphs
included) has a kernel registered for that device at the model's opset
(`registry.find`); Constant nodes count as supported because the importer
turns them into weights. Selected cases whose name matches a pattern of
EXCLUDE are not run; each pattern says why. Outputs are compared as onnx's
own backend runner does: same shape and dtype, then
numpy.testing.assert_allclose(rtol=1e-3, atol=1e-7) for floats (the case's own
tolerances), exact equality for integers and booleans.
"""

from __future__ import annotations

import collections
import fnmatch
import functools
import warnings
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import numpy_helper

from pooled_predictor.serving.backend import PooledPredictorBackend, cuda_available
from pooled_predictor.importers.subgraph import all_nodes as graph_nodes  # subgraphs included
from pooled_predictor.ops.registry import find

_FLEX_MODS = ("FlexAttention (ai.onnx.preview) with score_mod/prob_mod subgraphs: not run yet (they need "
              "nested Programs, as If/Loop bodies); such a model fails to load with UnsupportedOpError")

# Selected cases we do not run: glob pattern on the case name -> why.
EXCLUDE: dict[str, str] = {
    "*_string*": "string tensors are not supported by our kernels",
    "*_training_mode": "training mode (batch statistics, running-mean outputs) is not supported: "
                       "inference only",
    "test_training_dropout*": "training mode (random masks) is not supported: inference only",
    "test_identity_sequence": "Sequence types are not supported (tensors only)",
    "test_identity_opt": "Optional types are not supported (tensors only)",
    "test_resize_downsample_scales_*_align_corners":
        "the expected data uses the unrounded length input*scale (2.4) in the align_corners formula; "
        "the spec's formula uses the resized length (2), as onnxruntime and we do (same values as onnxruntime)",
    **{f"test_flexattention_{name}": _FLEX_MODS for name in (
        "score_mod", "prob_mod", "causal_mask", "soft_cap", "relative_positional")},
    "test_maxunpool_export_with_output_shape":
        "the expected data puts the default-size unpooled block at the start of output_shape; the indices "
        "index the output_shape tensor itself (the spec: they range over the pooled input, which output_shape "
        "restores), as onnxruntime and PyTorch's max_unpool do, and we do (same values as onnxruntime)",
}

DEVICES = ("cpu", "cuda")


@functools.lru_cache(maxsize=None)
def load_cases() -> tuple:
    """Every node TestCase of the installed onnx (built once per process, about 10 s)."""
    from onnx.backend.test.loader import load_model_tests

    state = np.random.get_state()  # the case builders draw from numpy's global generator
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            return tuple(load_model_tests(kind="node"))
    finally:
        np.random.set_state(state)


def _domain(d: str) -> str:
    return "" if d in ("", "ai.onnx") else d


def case_ops(case) -> list[str]:
    """The distinct op types of a case's graph, in order of appearance (Constant left out)."""
    ops = [n.op_type for n in graph_nodes(case.model.graph)
           if not (n.op_type == "Constant" and _domain(n.domain) == "")]
    return list(dict.fromkeys(ops)) or ["Constant"]


def missing_ops(case, device: str) -> list[str]:
    """Op types of the case with no kernel on `device` at the model's opset."""
    opset = {_domain(o.domain): int(o.version) for o in case.model.opset_import}
    missing = []
    for n in graph_nodes(case.model.graph):
        d = _domain(n.domain)
        if n.op_type == "Constant" and d == "":
            continue  # imported as a weight
        if find(n.op_type, d, opset.get(d, 0), device) is None:
            missing.append(n.op_type + (f" ({d})" if d else ""))
    return list(dict.fromkeys(missing))


def exclusion(name: str) -> str | None:
    """The EXCLUDE pattern a case name matches, or None."""
    for pattern in EXCLUDE:
        if fnmatch.fnmatchcase(name, pattern):
            return pattern
    return None


@dataclass
class Selection:
    """The node cases split for the CPU kernels.

    Attributes:
        selected: cases every node of which has a CPU kernel, not excluded.
        excluded: pattern -> names of supported cases it excludes.
        unsupported: case name -> op types without a CPU kernel.
        total: how many node cases onnx has.
    """

    selected: list = field(default_factory=list)
    excluded: dict = field(default_factory=dict)
    unsupported: dict = field(default_factory=dict)
    total: int = 0


@functools.lru_cache(maxsize=None)
def select() -> Selection:
    sel = Selection()
    for case in load_cases():
        sel.total += 1
        missing = missing_ops(case, "cpu")
        if missing:
            sel.unsupported[case.name] = missing
            continue
        pattern = exclusion(case.name)
        if pattern is not None:
            sel.excluded.setdefault(pattern, []).append(case.name)
            continue
        sel.selected.append(case)
    return sel


def missing_op_counts(sel: Selection) -> list[tuple[str, int]]:
    """Op types without a CPU kernel, by how many cases they keep out."""
    counts = collections.Counter(op for ops in sel.unsupported.values() for op in ops)
    return counts.most_common()


# ---- running and comparing -----------------------------------------------------------
def _array(x):
    """A data-set entry as numpy (TensorProto -> ndarray; sequences and None as they are)."""
    if isinstance(x, onnx.TensorProto):
        return numpy_helper.to_array(x)
    return x


def run_case(case, device: str = "cpu") -> None:
    """Prepare the case's model on `device` and check every data set.

    Raises:
        AssertionError: an output differs from onnx's expected one.
        PooledPredictorError: the model could not be imported, compiled or run.
    """
    rep = PooledPredictorBackend.prepare(case.model, device.upper())
    for inputs, expected in case.data_sets:
        outputs = rep.run([_array(x) for x in inputs])
        assert_outputs([_array(x) for x in expected], outputs, case.rtol, case.atol)


def assert_outputs(expected, outputs, rtol: float, atol: float) -> None:
    """onnx's Runner.assert_similar_outputs for tensors: shape, dtype, then values."""
    assert len(outputs) == len(expected), f"{len(outputs)} outputs, expected {len(expected)}"
    for i, (ref, out) in enumerate(zip(expected, outputs)):
        ref, out = np.asarray(ref), np.asarray(out)
        assert out.shape == ref.shape, f"output {i}: shape {out.shape}, expected {ref.shape}"
        assert out.dtype == ref.dtype, f"output {i}: dtype {out.dtype}, expected {ref.dtype}"
        if ref.dtype.kind == "V":  # ml_dtypes (bfloat16, float8, float4, int4, int2): as onnx's runner,
            kind = "f" if "float" in ref.dtype.name else "i"  # compared through float32 / int64
            if ref.dtype.name == "bfloat16":
                rtol = max(rtol, 2 ** -6)  # onnx's runner: two bfloat16 ulps
            wide = np.float32 if kind == "f" else np.int64
            ref, out = ref.astype(wide), out.astype(wide)
        if ref.dtype.kind in "fc":
            np.testing.assert_allclose(out, ref, rtol=rtol, atol=atol, err_msg=f"output {i}")
        else:
            np.testing.assert_array_equal(out, ref, err_msg=f"output {i}")


def cuda_skip_reason(case) -> str | None:
    """Why a case's CUDA variant cannot run here (None: it can)."""
    if not cuda_available():
        return "cupy or a CUDA GPU is missing"
    missing = missing_ops(case, "cuda")
    if missing:
        return f"no cuda kernel for {', '.join(missing)}"
    return None
