"""ops/cpu/reference_split.py: the reference tier's large products split by rows over threads."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from pooled_predictor.ops.cpu import compiled, reference_split


@pytest.mark.parametrize("m, k, n, batch", [(64, 576, 3136, None), (100, 300, 2000, None), (37, 512, 4000, None),
                                            (64, 256, 784, 3), (2, 2048, 8192, None), (4, 4096, 1000, None)])
@pytest.mark.parametrize("threads", [2, 3, 4])
def test_a_split_product_is_the_unsplit_one(m, k, n, batch, threads):
    rng = np.random.default_rng(m + n)
    a = rng.standard_normal((m, k), np.float32)
    b = rng.standard_normal((k, n) if batch is None else (batch, k, n), np.float32)
    want = np.matmul(a, b)
    out = np.full(want.shape, np.nan, np.float32)
    reference_split.matmul(a, b, out=out, threads=threads)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())  # BLAS's own error


def test_it_splits_large_products_only_and_one_at_a_time(monkeypatch):
    seen = []
    real = np.matmul

    def spy(a, b, out):
        seen.append((a.shape[0], threading.current_thread().name))
        real(a, b, out=out)

    monkeypatch.setattr(reference_split.np, "matmul", spy)
    a, b = np.ones((64, 512), np.float32), np.ones((512, 1024), np.float32)  # 67 MFLOP
    out = np.empty((64, 1024), np.float32)
    reference_split.matmul(a, b, out=out, threads=2)
    assert sorted(s for s, _ in seen) == [32, 32] and len({t for _, t in seen}) == 2
    assert (out == 512).all()
    seen.clear()
    reference_split.matmul(a[:8], b[:, :64], out=out[:8, :64], threads=2)  # small: one call, this thread
    assert seen == [(8, threading.current_thread().name)]
    seen.clear()
    with reference_split._splitting:  # another product is being split: this one runs unsplit
        reference_split.matmul(a, b, out=out, threads=2)
    assert seen == [(64, threading.current_thread().name)]
    seen.clear()
    with reference_split.background_job():  # the background compiler has the other cores
        reference_split.matmul(a, b, out=out, threads=2)
    assert seen == [(64, threading.current_thread().name)]
    seen.clear()
    reference_split.matmul(a, b, out=out, threads=2)  # and after it
    assert len(seen) == 2


def test_a_thin_product_splits_by_columns_of_b(monkeypatch):
    seen = []
    real = np.matmul

    def spy(a, b, out):
        seen.append((a.shape, b.shape))
        real(a, b, out=out)

    monkeypatch.setattr(reference_split.np, "matmul", spy)
    w = np.arange(8192 * 2048, dtype=np.float32).reshape(8192, 2048) % 7  # a Gemm with transB: b = W.T (34 MFLOP)
    a = np.ones((1, 2048), np.float32)
    out = np.empty((1, 8192), np.float32)
    reference_split.matmul(a, w.T, out=out, threads=2)
    assert sorted(seen) == [((1, 2048), (2048, 4096))] * 2
    np.testing.assert_array_equal(out, real(a, w.T))


@pytest.mark.parametrize("axis", [0, 2])
def test_a_split_copy_is_the_copy(axis, monkeypatch):
    src = np.lib.stride_tricks.as_strided(np.arange(3 * 40 * 64 * 70, dtype=np.float32), (3, 40, 64, 35),
                                          (40 * 64 * 70 * 4, 64 * 70 * 4, 70 * 4, 8))  # strided windows, 1 MB
    dst = np.zeros(src.shape, np.float32)
    calls = []
    real = np.copyto
    monkeypatch.setattr(reference_split.np, "copyto", lambda d, s: (calls.append(d.shape), real(d, s)))
    monkeypatch.setattr(reference_split, "MIN_COPY_BYTES", 1 << 19)
    reference_split.copyto(dst, src, axis, threads=3)
    np.testing.assert_array_equal(dst, src)
    assert sorted(shape[axis] for shape in calls) == ([1, 1, 1] if axis == 0 else [21, 21, 22])
    calls.clear()
    reference_split.copyto(dst[:, :2], src[:, :2], axis, threads=3)  # under MIN_COPY_BYTES: one copy
    assert len(calls) == 1


def test_a_block_that_fails_raises_on_the_caller_and_frees_the_split():
    a, b = np.ones((64, 512), np.float32), np.ones((512, 1024), np.float32)
    with pytest.raises(ValueError):
        reference_split.matmul(a, b, out=np.empty((64, 1000), np.float32), threads=2)
    assert reference_split._splitting.acquire(blocking=False)
    reference_split._splitting.release()


def test_only_a_tiered_reference_conv_splits(monkeypatch):
    """Conv's numpy paths take reference_split only inside reference_kernels() with compiled kernels on
    (a tiered Net's reference layout), never as the plain numpy reference (POOLED_PREDICTOR_COMPILED=0)."""
    import onnx
    from onnx import TensorProto, helper

    from pooled_predictor import Predictor

    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 32, 3, 3)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], strides=[2, 2])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 64, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [onnx.numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    calls = []
    real = reference_split.matmul
    monkeypatch.setattr(reference_split, "matmul", lambda *a, **k: (calls.append(1), real(*a, **k)))
    x = rng.standard_normal((1, 32, 64, 64)).astype(np.float32)
    want = Predictor(model.SerializeToString()).forward({"x": x})["y"]
    with compiled.reference_kernels():
        got = Predictor(model.SerializeToString()).forward({"x": x})["y"]
    assert calls
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    calls.clear()
    monkeypatch.setattr(compiled, "ENABLED", False)
    Predictor(model.SerializeToString()).forward({"x": x})
    assert not calls
