"""LayerNormalization on the compiled path (compiled/layernorm.py) against onnxruntime: transformer
rows (768 wide: three 256-blocks), widths around the 8-lane vector and the 256 block, many and
single rows, Mean / InvStdDev outputs, no bias; which inputs send it to the numpy path."""

import numpy as np
import pytest

from pooled_predictor.ir import Node
from pooled_predictor.ops.context import OpContext
from pooled_predictor.ops.cpu import normalization
from tests.onnx_helpers import check_node

rng = np.random.default_rng(21)


def f32(*shape, scale=1.0, shift=0.0):
    return (rng.standard_normal(shape) * scale + shift).astype(np.float32)


def _kernel(x_shape, scale_shape, bias_shape=None, *, axis=-1, dtype=np.float32, stash_type=1):
    shapes = [x_shape, scale_shape] + ([] if bias_shape is None else [bias_shape])
    node = Node("LayerNormalization", [f"in{i}" for i in range(len(shapes))], ["out0"], {}, "", "t")
    ctx = OpContext(node, 17, shapes, [np.dtype(dtype)] * len(shapes), [None] * len(shapes), "cpu", None)
    return normalization.LayerNormalization(ctx, axis=axis, stash_type=stash_type)


@pytest.mark.parametrize("shape,axis", [((1, 128, 768), -1), ((1, 197, 768), 2), ((3136, 96), 1), ((2, 5, 7), -1),
                                        ((4, 8), -1), ((3, 1000), -1), ((3, 256), -1), ((2, 263), -1),
                                        ((2, 3, 4, 5), 1), ((1, 1), -1)], ids=str)
@pytest.mark.parametrize("with_bias", [True, False])
def test_compiled_layernorm_matches_onnxruntime(shape, axis, with_bias):
    norm = shape[axis:]
    assert _kernel(shape, norm, norm if with_bias else None, axis=axis).compiled
    x = f32(*shape, scale=3.0, shift=2.0)  # a mean far from 0: the centring matters
    check_node("LayerNormalization", [x, f32(*norm), f32(*norm) if with_bias else None], {"axis": axis},
               opset=17, outputs=3, static=(1, 2), rtol=1e-5)


@pytest.mark.parametrize("outputs", [["y", "mean"], ["y", "", "inv"]])
def test_compiled_layernorm_optional_statistics(outputs):
    x = f32(6, 40, scale=0.5, shift=-1.0)
    check_node("LayerNormalization", [x, f32(40), f32(40)], {"epsilon": 1e-3}, opset=17, outputs=outputs,
               rtol=1e-5)


def test_scale_with_leading_ones_is_compiled():
    assert _kernel((2, 9, 16), (1, 16), (1, 1, 16)).compiled
    x = f32(2, 9, 16, shift=5.0)
    check_node("LayerNormalization", [x, f32(1, 16), f32(1, 1, 16)], {}, opset=17, static=(1, 2), rtol=1e-5)


@pytest.mark.parametrize("why", ["scale over more than the normalized axes", "float64", "float16 stash 1",
                                 "stash float64"])
def test_numpy_path_where_the_rows_do_not_apply(why):
    kw = {"scale over more than the normalized axes": dict(x_shape=(2, 3, 4), scale_shape=(3, 4)),
          "float64": dict(x_shape=(2, 4), scale_shape=(4,), dtype=np.float64),
          "float16 stash 1": dict(x_shape=(2, 4), scale_shape=(4,), dtype=np.float16),
          "stash float64": dict(x_shape=(2, 4), scale_shape=(4,), stash_type=11)}[why]
    assert not _kernel(**kw).compiled


def test_non_finite_rows_stay_in_their_row():
    """inf / NaN in one row give NaN there (inf - inf) and leave the other rows exact."""
    x = f32(3, 24)
    x[1, 5] = np.inf
    x[2, 7] = np.nan
    check_node("LayerNormalization", [x, f32(24), f32(24)], {}, opset=17, static=(1, 2), rtol=1e-5)
