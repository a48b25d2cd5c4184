"""Precision in the kernel type: the registry keys kernels by (op, version, device, layout, precision)."""

import pytest

from pooled_predictor.ops import registry
from pooled_predictor.ops.registry import candidates, find, kernel, registered_ops

DOMAIN = "test.precision"


def test_one_op_in_two_precisions():
    @kernel("TwoPrecisions", since=1, domain=DOMAIN)
    def any_precision(x, *, out):
        out[...] = x

    @kernel("TwoPrecisions", since=1, domain=DOMAIN, precision="int8")
    def integer(x, *, out):
        out[...] = x

    assert find("TwoPrecisions", DOMAIN, 1, "cpu").impl is any_precision  # the first registered: the default
    assert find("TwoPrecisions", DOMAIN, 1, "cpu", precision="int8").impl is integer
    assert find("TwoPrecisions", DOMAIN, 1, "cpu", precision="fp16") is None
    assert [k.precision for k in candidates("TwoPrecisions", DOMAIN, 1, "cpu")] == ["any", "int8"]
    with pytest.raises(ValueError, match="registered twice"):
        kernel("TwoPrecisions", since=1, domain=DOMAIN, precision="int8")(integer)
    with pytest.raises(ValueError, match="unknown precision"):
        kernel("TwoPrecisions", since=2, domain=DOMAIN, precision="int7")(integer)


def test_integer_kernels_are_typed_int8():
    typed = {k.op_type for k in registered_ops("cpu") if k.precision == "int8"}
    assert {"QLinearConv", "QLinearMatMul", "MatMulInteger", "ConvInteger"} <= typed
    assert registry.find("Conv", "", 17, "cpu").precision == "any"
