"""Optimization.MEMORY gives bit-identical outputs to NONE on every zoo model.

Batch 2 at each entry's test size (64x64 for the nets with a global pool, full
size for AlexNet and VGG-16, whose fully-connected heads fix it).
"""

import numpy as np
import pytest

from pooled_predictor import Net, Optimization, Program
from pooled_predictor.importers import load_onnx
from pooled_predictor.zoo import cnn


@pytest.mark.parametrize("name", list(cnn.ZOO))
def test_memory_is_bit_identical_to_none(name):
    size = cnn.ZOO[name].test_size
    program = Program(load_onnx(cnn.build(name, input_size=size, outputs=("prob", "logits"))))
    x = cnn.sample_input(name, 2, input_size=size)
    none, mem = Net(program, optimization=Optimization.NONE), Net(program, optimization=Optimization.MEMORY)
    none.forward({"data": x})
    mem.forward({"data": x})
    for out in ("prob", "logits"):
        np.testing.assert_array_equal(none.blob_by_name(out), mem.blob_by_name(out))
    plan = mem.memory_plan
    plan.validate()
    assert plan.arena_bytes <= 1.01 * plan.lower_bound_bytes + 64
    assert mem.arena_bytes < none.arena_bytes
