"""Every zoo model through PooledPredictor against onnxruntime, on identical inputs.

The bar, per output ("prob" and "logits"): max |ours - onnxruntime| <= 1e-4 x
max |onnxruntime|. Inputs are `cnn.sample_input`: pixels as each net was trained
on (Caffe nets: mean-subtracted 0..255, so LRN does real work; torchvision
nets: ImageNet-normalized), at batch 1 and 4.

Sizes, chosen for CI on two cores (numpy kernels, one BLAS thread per worker):

* Batch 1 at each net's real size (227 for AlexNet, 224 for the others).
* Batch 4 at the entry's `test_size`: 64x64 for the nets that end in a global
  average pool (GoogLeNet, ResNet-50, MobileNetV2, SqueezeNet 1.1), so every
  layer and weight is the real one and only the spatial size shrinks
  (GoogLeNet 32 -> 16 -> 8 -> 4 -> 2 through its ceil-mode pools, SqueezeNet
  31 -> 15 -> 7 -> 3, ResNet-50 and MobileNetV2 down to 2x2), 12x fewer MACs.
* AlexNet and VGG-16 end in fully-connected heads that need their 6x6x256 and
  7x7x512 feature maps, so both batches run at full size; VGG-16 at batch 4
  (62 GMACs) is marked slow.

Measured on the 2-core dev machine: the whole file in about 28 s (19 s with
-m "not slow"); relative errors 2e-7 .. 5e-6, well inside the bar.
"""

from __future__ import annotations

import functools
import gc

import numpy as np
import onnxruntime as ort
import pytest

from pooled_predictor import Config, PooledPredictor
from pooled_predictor.zoo import cnn

REL_TOL = 1e-4
CASES = [pytest.param(name, size, batch, id=f"{name}-{size}-b{batch}",
                      marks=[pytest.mark.slow] if (name, batch) == ("vgg16", 4) else [])
         for name, e in cnn.ZOO.items()
         for batch, size in ((1, e.input_shape[1]), (4, e.test_size))]


@functools.lru_cache(maxsize=1)  # one model at a time: VGG-16 is 0.5 GB per copy
def reference(name: str, size: int):
    """(serialized model with outputs prob and logits, onnxruntime session)."""
    data = cnn.build(name, input_size=size, outputs=("prob", "logits")).SerializeToString()
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    return data, ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module")
def pools():
    """(name, size) -> a PooledPredictor over that model; keeps only the latest, closes it at the end."""
    held: dict[tuple[str, int], PooledPredictor] = {}

    def get(name: str, size: int) -> PooledPredictor:
        if (name, size) not in held:
            for pool in held.values():
                pool.close()
            held.clear()
            gc.collect()
            data, _ = reference(name, size)
            held[name, size] = PooledPredictor(Config(model_bytes=[data], num_threads=2))
        return held[name, size]

    yield get
    for pool in held.values():
        pool.close()


@pytest.mark.parametrize("name,size,batch", CASES)
def test_matches_onnxruntime(name, size, batch, pools):
    _, sess = reference(name, size)
    x = cnn.sample_input(name, batch, seed=batch, input_size=size)
    expected = dict(zip(("prob", "logits"), sess.run(["prob", "logits"], {"data": x})))
    got = pools(name, size).forward({"data": x}).result()
    for out, ref in expected.items():
        assert got[out].shape == ref.shape and got[out].dtype == np.float32, (out, got[out].shape, got[out].dtype)
        err = float(np.max(np.abs(got[out].astype(np.float64) - ref)))
        scale = float(np.max(np.abs(ref)))
        print(f"{name} {size} b{batch} {out}: max abs err {err:.3g}, relative {err / scale:.3g}")  # pytest -rP
        assert err <= REL_TOL * scale, (
            f"{name} {size}x{size} batch {batch}, {out!r}: max |ours - onnxruntime| = {err:.3g}, "
            f"allowed {REL_TOL:g} x max|ref| = {REL_TOL * scale:.3g} (relative {err / scale:.3g})")


# ---- at 16 lanes (NCHW16c, compiled/isa.py): the AVX-512 layout, its bits checked on any machine -------------
# The nets whose chains block at 16 channels (GoogLeNet, ResNet-50, MobileNetV2, SqueezeNet 1.1) at their
# test_size, batch 4: the 16-lane kernels compile once per session (LLVM splits <16 x float> on AVX2).
CASES16 = [pytest.param(name, id=f"{name}-16lanes") for name in ("googlenet", "resnet50", "mobilenet_v2",
                                                                  "squeezenet1_1")]


@pytest.mark.parametrize("name", CASES16)
def test_matches_onnxruntime_at_16_lanes(name):
    from pooled_predictor.ops.cpu.compiled import isa

    size, batch = cnn.ZOO[name].test_size, 4
    data, sess = reference(name, size)
    x = cnn.sample_input(name, batch, seed=batch, input_size=size)
    expected = dict(zip(("prob", "logits"), sess.run(["prob", "logits"], {"data": x})))
    with isa.use_lanes(16):
        pool = PooledPredictor(Config(model_bytes=[data], num_threads=2))
    with pool:
        assert pool.predictor(0).new_net().lanes == 16  # its workers' Nets too, whatever the thread
        got = pool.forward({"data": x}).result()
    net = pool.predictor(0).canonical_net
    if net.layout is not None:
        assert {o.split("@", 1)[1] for node in net.layout.run_nodes for o in node.outputs if "@" in o} == {"NCHW16c"}
    for out, ref in expected.items():
        err = float(np.max(np.abs(got[out].astype(np.float64) - ref)))
        scale = float(np.max(np.abs(ref)))
        assert got[out].shape == ref.shape and err <= REL_TOL * scale, (name, out, err / scale)
