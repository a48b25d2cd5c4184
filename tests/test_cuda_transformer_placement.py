"""A BERT-style encoder and a ViT run with every node on the GPU: the placement stage (engine/placement.py,
through the CUDA registry's kernel_for) gives every node that runs a CUDA kernel, with no GPU here.

CI has no torch, so the graphs are built here with onnx.helper in the patterns torch.onnx.export
writes for benchmarks/export_transformers.py's two models (Hugging Face BERT's layer with the padding
mask computed from input_ids; torchvision's ViT-B/16, whose attention scales Q and K before the
product), small. The graph passes run as Predictor runs them (attention fused into
ScaledDotProductAttention, the erf GELU into Gelu, MatMul + Add into MatMulAdd); the exported
models themselves are checked too where they are in the cache (benchmarks/export_transformers.py).

The device asks the real registry what it would run on the GPU and records it, then answers "the
host" so that the layout builds on the CPU: no CUDA kernel is set up and no numerics are faked.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from pooled_predictor.engine.device import DeviceWithHost
from pooled_predictor.engine.net import Net, Optimization
from pooled_predictor.engine.program import Program
from pooled_predictor.importers import load_model, load_onnx
from pooled_predictor.passes import optimize
from tests.cuda_stand_in import HostMemoryDevice

RNG = np.random.default_rng(3)
D, HEADS, FFN, LAYERS = 32, 4, 64, 2


class PlacementRecorder(HostMemoryDevice):
    """The CUDA registry's decision for every node placement asks about (node name -> (op_type, placed));
    every node then runs on the host."""

    def __init__(self):
        super().__init__(())
        self.placed: dict[str, tuple[str, bool]] = {}

    def kernel_for(self, step, ctx):
        k = DeviceWithHost.kernel_for(self, step, ctx)
        self.placed[step.node.name] = (step.node.op_type, k is not None and k.device == "cuda")
        return None


class _Builder:
    def __init__(self):
        self.nodes, self.inits, self.n = [], [], 0

    def w(self, *shape, scale=0.05, value=None):
        self.n += 1
        name = f"w{self.n}"
        a = np.asarray(value) if value is not None else (RNG.standard_normal(shape) * scale).astype(np.float32)
        self.inits.append(numpy_helper.from_array(a, name))
        return name

    def op(self, op_type, inputs, **attrs):
        self.n += 1
        out = f"{op_type.lower()}{self.n}"
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], name=f"{op_type}_{self.n}", **attrs))
        return out

    def linear(self, x, n_in, n_out):  # torch's nn.Linear as exported: MatMul, then Add(bias, y)
        return self.op("Add", [self.w(n_out), self.op("MatMul", [x, self.w(n_in, n_out)])])

    def layer_norm(self, x):
        return self.op("LayerNormalization", [x, self.w(D, value=1 + 0.1 * RNG.standard_normal(D).astype(np.float32)),
                                              self.w(D)], axis=-1, epsilon=1e-12)

    def heads(self, x, seq):  # (B, seq, D) -> (B, H, seq, D/H)
        r = self.op("Reshape", [x, self.w(value=np.array([-1, seq, HEADS, D // HEADS], np.int64))])
        return self.op("Transpose", [r], perm=[0, 2, 1, 3])

    def merge(self, x, seq):
        t = self.op("Transpose", [x], perm=[0, 2, 1, 3])
        return self.op("Reshape", [t, self.w(value=np.array([-1, seq, D], np.int64))])

    def gelu_erf(self, x):  # 0.5 x (1 + erf(x / sqrt 2)), as torch exports nn.GELU()
        e = self.op("Erf", [self.op("Div", [x, self.w(value=np.float32(2 ** 0.5))])])
        return self.op("Mul", [self.op("Mul", [x, self.op("Add", [e, self.w(value=np.float32(1))])]),
                               self.w(value=np.float32(0.5))])

    def model(self, inputs, output):
        graph = helper.make_graph(self.nodes, "encoder", inputs, [helper.make_tensor_value_info(output, TensorProto.FLOAT,
                                                                                                None)], self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 9
        return m


def bert_model(seq=8, vocab=50):
    """Embeddings (word + position + token type) and LayerNorm; the additive padding mask from
    input_ids != 0 ((1 - mask) * finfo.min); LAYERS post-LN layers: Q, K, V, Q K^T / sqrt(d) + mask,
    Softmax, @ V, output projection, residual, LayerNorm, FFN with the erf GELU, residual, LayerNorm."""
    b = _Builder()
    ids = "input_ids"
    pos = b.w(value=np.arange(seq, dtype=np.int64).reshape(1, seq))
    x = b.op("Add", [b.op("Gather", [b.w(vocab, D), ids]), b.op("Gather", [b.w(seq, D), pos])])
    x = b.layer_norm(b.op("Add", [x, b.op("Gather", [b.w(2, D), b.w(value=np.zeros((1, seq), np.int64))])]))
    keep = b.op("Cast", [b.op("Not", [b.op("Equal", [ids, b.w(value=np.array(0, np.int64))])])], to=TensorProto.FLOAT)
    keep = b.op("Unsqueeze", [b.op("Unsqueeze", [keep, b.w(value=np.array([1], np.int64))]),
                              b.w(value=np.array([2], np.int64))])
    mask = b.op("Mul", [b.op("Sub", [b.w(value=np.float32(1)), keep]),
                        b.w(value=np.float32(np.finfo(np.float32).min))])
    for _ in range(LAYERS):
        q = b.heads(b.linear(x, D, D), seq)
        k = b.op("Transpose", [b.heads(b.linear(x, D, D), seq)], perm=[0, 1, 3, 2])
        v = b.heads(b.linear(x, D, D), seq)
        s = b.op("Div", [b.op("MatMul", [q, k]), b.w(value=np.float32((D // HEADS) ** 0.5))])
        p = b.op("Softmax", [b.op("Add", [s, mask])], axis=-1)
        a = b.linear(b.merge(b.op("MatMul", [p, v]), seq), D, D)
        x = b.layer_norm(b.op("Add", [a, x]))
        f = b.linear(b.gelu_erf(b.linear(x, D, FFN)), FFN, D)
        x = b.layer_norm(b.op("Add", [f, x]))
    return b.model([helper.make_tensor_value_info(ids, TensorProto.INT64, ("batch", seq))], x)


def vit_model(image=32, patch=8, classes=10):
    """Patch embedding (a strided Conv), flatten, class token, position embedding; LAYERS pre-LN layers
    whose attention scales Q and K by d^-1/4 each (torch's scaled_dot_product_attention exported), the
    erf GELU MLP; the class token's LayerNorm and a Gemm head."""
    b = _Builder()
    tokens = (image // patch) ** 2 + 1
    x = b.op("Conv", ["data", b.w(D, 3, patch, patch), b.w(D)], kernel_shape=[patch, patch], strides=[patch, patch])
    x = b.op("Transpose", [b.op("Reshape", [x, b.w(value=np.array([-1, D, tokens - 1], np.int64))])], perm=[0, 2, 1])
    batch = b.op("Unsqueeze", [b.op("Gather", [b.op("Shape", ["data"]), b.w(value=np.array(0, np.int64))], axis=0),
                               b.w(value=np.array([0], np.int64))])  # the class token expanded to the batch
    cls = b.op("Expand", [b.w(1, 1, D), b.op("Concat", [batch, b.w(value=np.array([1, D], np.int64))], axis=0)])
    x = b.op("Add", [b.op("Concat", [cls, x], axis=1), b.w(1, tokens, D)])
    quarter = np.float32((D // HEADS) ** -0.25)
    for _ in range(LAYERS):
        h = b.layer_norm(x)
        q = b.op("Mul", [b.heads(b.linear(h, D, D), tokens), b.w(value=quarter)])
        k = b.op("Mul", [b.op("Transpose", [b.heads(b.linear(h, D, D), tokens)], perm=[0, 1, 3, 2]),
                         b.w(value=quarter)])
        v = b.heads(b.linear(h, D, D), tokens)
        p = b.op("Softmax", [b.op("MatMul", [q, k])], axis=-1)
        x = b.op("Add", [x, b.linear(b.merge(b.op("MatMul", [p, v]), tokens), D, D)])
        x = b.op("Add", [x, b.linear(b.gelu_erf(b.linear(b.layer_norm(x), D, FFN)), FFN, D)])
    first = b.op("Gather", [b.layer_norm(x), b.w(value=np.array(0, np.int64))], axis=1)
    y = b.op("Gemm", [first, b.w(classes, D), b.w(classes)], transB=1)
    return b.model([helper.make_tensor_value_info("data", TensorProto.FLOAT, ("batch", 3, image, image))], y)


def placement(graph, shapes=None):
    """(Net on the recorder, the recorder) after the Predictor's passes and one layout."""
    graph, _ = optimize(graph, "all")
    dev = PlacementRecorder()
    net = Net(Program(graph, "cuda"), device=dev, optimization=Optimization.MEMORY)
    net.reshape(shapes)
    return net, dev


def assert_all_on_the_gpu(net, dev, expected_ops):
    assert not net.layout.dynamic, [s.node.op_type for s in net.layout.dynamic]
    ran = {n.name for n in net.layout.run_nodes}
    asked = set(dev.placed)
    assert ran <= asked, f"nodes placement never saw: {sorted(ran - asked)}"
    host = sorted(f"{name} ({op})" for name, (op, on_gpu) in dev.placed.items() if not on_gpu)
    assert not host, f"nodes the CUDA kernels do not take: {host}"
    ops = {op for op, _ in dev.placed.values()}
    assert expected_ops <= ops, f"the passes did not make {sorted(expected_ops - ops)}"


def test_a_bert_style_encoder_runs_every_node_on_the_gpu():
    net, dev = placement(load_onnx(bert_model()), {"input_ids": (2, 8)})
    assert_all_on_the_gpu(net, dev, {"ScaledDotProductAttention", "Gelu", "MatMulAdd", "LayerNormalization",
                                     "Gather", "Equal", "Not", "Cast"})


def test_a_vit_runs_every_node_on_the_gpu():
    net, dev = placement(load_onnx(vit_model()), {"data": (2, 3, 32, 32)})
    assert_all_on_the_gpu(net, dev, {"ScaledDotProductAttention", "Gelu", "MatMulAdd", "LayerNormalization",
                                     "Conv", "Concat", "Gather"})


def test_without_the_attention_kernel_the_node_would_run_on_the_host(monkeypatch):
    """The check can fail: a node whose CUDA kernel refuses it is reported."""
    from pooled_predictor.ops.cuda import attention

    monkeypatch.setattr(attention, "attention_plan", lambda *a: None)
    net, dev = placement(load_onnx(vit_model()), {"data": (1, 3, 32, 32)})
    with pytest.raises(AssertionError, match="ScaledDotProductAttention"):
        assert_all_on_the_gpu(net, dev, set())


def test_the_cli_lists_the_transformer_kernels():
    proc = subprocess.run([sys.executable, "-m", "pooled_predictor", "ops", "--device", "cuda"], capture_output=True,
                          text=True, timeout=120, cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 0, proc.stderr
    rows = {line.split()[0] for line in proc.stdout.splitlines() if line.strip()}
    for op in ("pooled_predictor.ScaledDotProductAttention", "pooled_predictor.Gelu", "pooled_predictor.MatMulAdd",
               "LayerNormalization", "Erf", "Gelu", "Equal", "Not", "Cast", "Where", "Gather"):
        assert op in rows, f"{op} is not listed by `pooled-predictor ops --device cuda`"


def _exported(name: str) -> Path:
    root = os.environ.get("POOLED_PREDICTOR_CACHE")
    base = Path(root) if root else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pooled-predictor"
    return base / "exported" / name


@pytest.mark.parametrize("name, shapes", [("bert_base.onnx", {"input_ids": (1, 128)}),
                                          ("vit_b_16.onnx", {"data": (1, 3, 224, 224)})])
def test_the_exported_models_run_every_node_on_the_gpu(name, shapes):
    path = _exported(name)
    if not path.exists():
        pytest.skip(f"{path} is absent (benchmarks/export_transformers.py makes it; needs torch)")
    net, dev = placement(load_model(str(path), device="cuda"), shapes)
    assert_all_on_the_gpu(net, dev, {"ScaledDotProductAttention", "Gelu", "MatMulAdd"})
