"""The kernel registry: versions come from onnx's schemas; every opset 11..newest is accepted."""

import onnx
import pytest

from pooled_predictor.ops.registry import find, kernel, registered_ops, schema_version

NEWEST = onnx.defs.onnx_opset_version()
ISSUE_OPS = """Conv ConvTranspose MaxPool AveragePool GlobalAveragePool Resize Concat Add Sub Mul Div Relu
Sigmoid HardSigmoid Erf ReduceMean BatchNormalization MatMul Softmax Transpose Squeeze Unsqueeze Cast Identity
Gemm Flatten Reshape LRN Dropout Clip Pad Shape Size Gather Slice Split Constant ConstantOfShape Expand Tile
Range Where Equal Less Greater Not Neg Abs Sqrt Pow Exp Log Tanh Reciprocal Floor Ceil Max Min Sum Mean
ReduceMax ReduceMin ReduceSum ReduceProd ArgMax LeakyRelu PRelu Elu HardSwish Gelu Softplus
LayerNormalization InstanceNormalization GlobalMaxPool Einsum TopK""".split()


def onnx_ops():
    return sorted({k.op_type for k in registered_ops("cpu") if k.domain == ""})


def test_every_op_of_the_issues_is_registered():
    missing = sorted(set(ISSUE_OPS) - set(onnx_ops()))
    assert not missing, missing


@pytest.mark.parametrize("op", onnx_ops())
def test_every_opset_from_11_to_newest_is_accepted(op):
    for opset in range(11, NEWEST + 1):
        version = schema_version(op, "", opset)
        if version is None:
            continue  # the op does not exist yet at this opset (e.g. Gelu before 20)
        k = find(op, "", opset, "cpu")
        assert k is not None, f"{op} at opset {opset} (schema version {version}) has no kernel"
        assert k.since <= version


def test_registering_a_key_twice_is_an_error():
    @kernel("TwiceTestOp", since=1, domain="test.registry")
    def first(x, *, out):
        pass

    with pytest.raises(ValueError, match="registered twice"):
        @kernel("TwiceTestOp", since=1, domain="test.registry")
        def second(x, *, out):
            pass


def test_unknown_device_is_an_error():
    with pytest.raises(ValueError, match="unknown device"):
        kernel("Relu", since=14, device="tpu")


def _signature_params(impl) -> frozenset:
    """What the registry's fast path must agree with: inspect.signature's keyword-only names."""
    import inspect

    fn = impl.__init__ if inspect.isclass(impl) else impl
    names = {p.name for p in inspect.signature(fn).parameters.values() if p.kind == p.KEYWORD_ONLY}
    if any(p.kind == p.VAR_KEYWORD for p in inspect.signature(fn).parameters.values()):
        names.add("**")
    return frozenset(names - {"out"})


def test_attribute_names_read_from_code_objects_match_inspect():
    """The registry reads a kernel's attribute names from its code object (issue 31: inspect.signature
    was 60 ms of the import); for every registered kernel, and for the shapes the fast path must get right
    (positional-only, *args, **kwargs, a wrapped function, a class), they are inspect.signature's."""
    import functools

    from pooled_predictor.ops.registry import _params

    for k in registered_ops():
        assert k.params == _signature_params(k.impl), k

    def plain(x, y=None, /, z=None, *args, out, alpha=1.0, beta, **kw):
        inner = 1
        return inner

    def no_kwargs(x, *, out, axis=0):
        pass

    @functools.wraps(no_kwargs)
    def wrapped(*a, **kw):
        return no_kwargs(*a, **kw)

    class Cls:
        def __init__(self, ctx, *, mode="constant"):
            self.local = mode

    for fn in (plain, no_kwargs, wrapped, Cls):
        assert _params(fn) == _signature_params(fn), fn
    assert _params(plain) == {"alpha", "beta", "**"}
    assert _params(wrapped) == {"axis"}
