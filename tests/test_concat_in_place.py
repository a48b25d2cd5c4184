"""Concat inputs stored in the Concat's output under Optimization.MEMORY (engine/arena.py: concats_in_place).

Where each input is one contiguous range of the output (batch 1, a channel Concat, in NCHW or
NCHW8c with whole blocks), its producer writes there and the Concat runs nothing. Checked: the
same bits as NONE (every blob its own array) and onnxruntime's values, which Concats qualify,
the plan still valid and at its lower bound, and the hazards (an input read after the Concat, an
in-place node reading the output and one of its parts, nested Concats, inputs that must stay apart).
"""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from pooled_predictor.engine import arena
from pooled_predictor.engine import layout as layout_module
from pooled_predictor.importers import load_onnx
from pooled_predictor.engine.net import Net, Optimization
from pooled_predictor.passes import optimize
from pooled_predictor.engine.program import Program
from tests.onnx_helpers import run_ort

pytestmark = pytest.mark.usefixtures("lanes8")  # NCHW8c structures (the 16-lane ones: test_nchwc16.py)

RNG = np.random.default_rng(11)


def _model(nodes, inits, outputs=("y",), opset=13):
    g = helper.make_graph(nodes, "cat", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
                          [numpy_helper.from_array(a, n) for n, a in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _convs_then_concat(c_in, outs, extra=(), outputs=("y",)):
    """x -> one 1x1 Conv (then Relu) per entry of `outs` (its output channels) -> Concat on channels -> y."""
    nodes, inits, names = [], {}, []
    for j, m in enumerate(outs):
        inits[f"w{j}"] = (RNG.standard_normal((m, c_in, 1, 1)) * 0.3).astype(np.float32)
        nodes.append(helper.make_node("Conv", ["x", f"w{j}"], [f"c{j}"]))
        nodes.append(helper.make_node("Relu", [f"c{j}"], [f"a{j}"]))
        names.append(f"a{j}")
    nodes.append(helper.make_node("Concat", names, ["cat"], axis=1))
    nodes.append(helper.make_node("Sigmoid", ["cat"], ["y"]))
    nodes += list(extra)
    return _model(nodes, inits, outputs)


def _nets(model, monkeypatch, passes=True):
    graph = load_onnx(model)
    if passes:
        graph = optimize(graph, "all")[0]
    program = Program(graph)
    return Net(program, optimization=Optimization.NONE), Net(program, optimization=Optimization.MEMORY)


def _concats_run(net) -> int:
    return sum(node.op_type == "Concat" for node in net.layout.run_nodes)


def _check(model, x, monkeypatch, in_place: bool, passes=True):
    none, mem = _nets(model, monkeypatch, passes)
    none.forward([x])
    mem.forward([x])
    for o in mem.output_names:
        np.testing.assert_array_equal(mem.blob_by_name(o), none.blob_by_name(o))
    ref = run_ort(model, {"x": x})
    for o, r in zip(mem.output_names, ref):
        np.testing.assert_allclose(mem.blob_by_name(o), r, rtol=1e-5, atol=1e-5)
    assert (_concats_run(mem) == 0) == in_place and _concats_run(none) > 0
    plan = mem.memory_plan
    plan.validate()
    assert plan.arena_bytes <= 1.01 * plan.lower_bound_bytes + 64
    return mem


@pytest.mark.parametrize("channels", [(8, 16), (16, 8, 24)], ids=["two", "three"])
@pytest.mark.parametrize("blocked", [True, False], ids=["nchw8c", "nchw"])
def test_channel_concat_at_batch_1_is_written_in_place(channels, blocked, monkeypatch):
    from pooled_predictor.ops.cpu import conv_nchwc

    monkeypatch.setattr(conv_nchwc, "ENABLED", blocked)
    model = _convs_then_concat(8, channels)
    mem = _check(model, RNG.standard_normal((1, 8, 9, 11)).astype(np.float32), monkeypatch, in_place=True)
    assert any("@NCHW8c" in n for n in mem.layout.blobs) == blocked
    # the Concat's arrays: each input a view of its slice of the output
    cat = next(n for n in mem.layout.blobs if n.startswith("cat"))
    parts = [b for n, b in mem.layout.blobs.items() if n.split("@")[0] in ("a0", "a1", "a2")]
    assert parts and all(np.shares_memory(p, mem.layout.blobs[cat]) for p in parts)


def test_batch_2_copies(monkeypatch):
    _check(_convs_then_concat(8, (8, 16)), RNG.standard_normal((2, 8, 5, 5)).astype(np.float32), monkeypatch,
           in_place=False)


def test_which_concats_qualify():
    """concats_in_place on hand-made steps: contiguous ranges only, whole blocks in NCHW8c."""
    from types import SimpleNamespace as NS

    def steps(shapes, layout=None, concat_shape=None):
        ins = [f"i{j}" for j in range(len(shapes))]
        planned = [(NS(node=NS(op_type="Relu", domain="", inputs=["x"], outputs=[i])), None, []) for i in ins]
        planned.append((NS(node=NS(op_type="Concat", domain="", inputs=ins, outputs=["out"])), None, []))
        shape = dict(zip(ins, shapes), out=concat_shape)
        lay = {n: layout for n in shape} if layout else {}
        physical = {n: (s if not layout else (s[0], -(-s[1] // 8)) + tuple(s[2:]) + (8,)) for n, s in shape.items()}
        dtype = {n: np.dtype(np.float32) for n in shape}
        return arena.concats_in_place(planned, shape, physical, dtype, lay, {}, {"x"})

    parts, cats = steps([(1, 8, 4, 4), (1, 16, 4, 4)], concat_shape=(1, 24, 4, 4))
    assert cats == {2} and parts == {"i0": ("out", 0), "i1": ("out", 8 * 16 * 4)}
    assert steps([(2, 8, 4, 4), (2, 16, 4, 4)], concat_shape=(2, 24, 4, 4)) == ({}, set())  # batch 2
    assert steps([(1, 8, 4, 4), (1, 16, 4, 4)], "NCHW8c", (1, 24, 4, 4))[1] == {2}
    assert steps([(1, 12, 4, 4), (1, 4, 4, 4)], "NCHW8c", (1, 16, 4, 4))[1] == set()  # padding lanes inside
    assert steps([(1, 8, 4, 4), (1, 4, 4, 4)], "NCHW8c", (1, 12, 4, 4))[1] == set()  # a partial last block
    assert steps([(1, 8, 4, 4), (1, 8, 2, 4)], concat_shape=(1, 16, 4, 4))[1] == set()  # two axes differ
    assert steps([(1, 2, 4, 3), (1, 2, 4, 5)], concat_shape=(1, 2, 4, 8))[1] == set()  # axis 3: rows interleave
    assert steps([(1, 1, 1, 3), (1, 1, 1, 5)], concat_shape=(1, 1, 1, 8))[1] == {2}  # ... unless leading dims are 1


def test_an_input_read_after_the_concat_keeps_its_values(monkeypatch):
    """a0 is read again after the Concat (a residual-like Add): it lives on inside the output's buffer."""
    extra = [helper.make_node("Add", ["a0", "a0"], ["z"])]
    model = _convs_then_concat(8, (8, 8), extra=extra, outputs=("y", "z"))
    _check(model, RNG.standard_normal((1, 8, 7, 7)).astype(np.float32), monkeypatch, in_place=True)


def test_inputs_that_must_stay_apart_copy(monkeypatch):
    """A graph output as input, or one value twice: the Concat runs."""
    model = _convs_then_concat(8, (8, 8), outputs=("y", "a1"))
    _check(model, RNG.standard_normal((1, 8, 5, 5)).astype(np.float32), monkeypatch, in_place=False)
    inits = {"w": (RNG.standard_normal((8, 8, 1, 1)) * 0.3).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Concat", ["c", "c"], ["cat"], axis=1),
             helper.make_node("Sigmoid", ["cat"], ["y"])]
    _check(_model(nodes, inits), RNG.standard_normal((1, 8, 5, 5)).astype(np.float32), monkeypatch, in_place=False)


def test_nested_concats_one_in_place(monkeypatch):
    """Concat(Concat(a, b), c): one of the two is stored in place, never both; the values are right."""
    inits = {f"w{j}": (RNG.standard_normal((8, 8, 1, 1)) * 0.3).astype(np.float32) for j in range(3)}
    nodes = [helper.make_node("Conv", ["x", f"w{j}"], [f"c{j}"]) for j in range(3)]
    nodes += [helper.make_node("Concat", ["c0", "c1"], ["inner"], axis=1),
              helper.make_node("Concat", ["inner", "c2"], ["outer"], axis=1),
              helper.make_node("Sigmoid", ["outer"], ["y"])]
    model = _model(nodes, inits)
    x = RNG.standard_normal((1, 8, 5, 5)).astype(np.float32)
    none, mem = _nets(model, monkeypatch, passes=False)
    none.forward([x])
    mem.forward([x])
    np.testing.assert_array_equal(mem.blob_by_name("y"), none.blob_by_name("y"))
    assert _concats_run(mem) == 1


def test_in_place_node_reading_the_output_and_a_part(monkeypatch):
    """Concat on the batch axis, then Add(cat, a0): an element-wise node may not overwrite the
    output's buffer in place while it also reads a0, a slice of that same buffer."""
    inits = {f"w{j}": (RNG.standard_normal((4, 4, 1, 1)) * 0.3).astype(np.float32) for j in range(2)}
    nodes = [helper.make_node("Conv", ["x", f"w{j}"], [f"a{j}"]) for j in range(2)]
    nodes += [helper.make_node("Concat", ["a0", "a1"], ["cat"], axis=0),
              helper.make_node("Add", ["cat", "a0"], ["s"]), helper.make_node("Sigmoid", ["s"], ["y"])]
    mem = _check(_model(nodes, inits), RNG.standard_normal((1, 4, 3, 3)).astype(np.float32), monkeypatch,
                 in_place=True, passes=False)
    blobs = mem.layout.blobs
    assert not np.shares_memory(blobs["s"], blobs["cat"])  # (numpy's Add would survive it; a compiled one need not)


def test_switch_off(monkeypatch):
    monkeypatch.setattr(layout_module, "CONCAT_IN_PLACE", False)
    _check(_convs_then_concat(8, (8, 16)), RNG.standard_normal((1, 8, 5, 5)).astype(np.float32), monkeypatch,
           in_place=False)
