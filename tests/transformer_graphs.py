"""onnx.helper builders of a BERT-style encoder and a ViT in the patterns torch.onnx.export writes for
benchmarks/export_transformers.py's two models (Hugging Face BERT's layer with the padding mask computed
from input_ids; torchvision's ViT, whose attention scales Q and K before the product), at any size:
small in the CPU tests (tests/test_cuda_transformer_placement.py), BERT-base / ViT-B/16 sized in
benchmarks/gpu_check.py where the exports are not on the device machine. Seeded random weights
(N(0, 0.05)); no torch needed.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper


class _Builder:
    """Nodes and initializers of one graph, named in order; d model width, heads attention heads."""

    def __init__(self, d: int, heads: int, seed: int = 0):
        self.nodes, self.inits, self.n = [], [], 0
        self.d, self.h = d, heads
        self.rng = np.random.default_rng(seed)

    def w(self, *shape, scale=0.05, value=None):
        self.n += 1
        name = f"w{self.n}"
        a = np.asarray(value) if value is not None else (self.rng.standard_normal(shape) * scale).astype(np.float32)
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
        d = self.d
        return self.op("LayerNormalization", [x, self.w(value=1 + 0.1 * self.rng.standard_normal(d).astype(np.float32)),
                                              self.w(d)], axis=-1, epsilon=1e-12)

    def heads(self, x, seq):  # (B, seq, D) -> (B, H, seq, D/H)
        r = self.op("Reshape", [x, self.w(value=np.array([-1, seq, self.h, self.d // self.h], np.int64))])
        return self.op("Transpose", [r], perm=[0, 2, 1, 3])

    def merge(self, x, seq):
        t = self.op("Transpose", [x], perm=[0, 2, 1, 3])
        return self.op("Reshape", [t, self.w(value=np.array([-1, seq, self.d], np.int64))])

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


def bert_model(seq=8, vocab=50, d=32, heads=4, ffn=64, layers=2, seed=0):
    """Embeddings (word + position + token type) and LayerNorm; the additive padding mask from
    input_ids != 0 ((1 - mask) * finfo.min); LAYERS post-LN layers: Q, K, V, Q K^T / sqrt(d) + mask,
    Softmax, @ V, output projection, residual, LayerNorm, FFN with the erf GELU, residual, LayerNorm."""
    b = _Builder(d, heads, seed)
    D, HEADS, FFN, LAYERS = d, heads, ffn, layers
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


def vit_model(image=32, patch=8, classes=10, d=32, heads=4, ffn=64, layers=2, seed=0):
    """Patch embedding (a strided Conv), flatten, class token, position embedding; LAYERS pre-LN layers
    whose attention scales Q and K by d^-1/4 each (torch's scaled_dot_product_attention exported), the
    erf GELU MLP; the class token's LayerNorm and a Gemm head."""
    b = _Builder(d, heads, seed)
    D, HEADS, FFN, LAYERS = d, heads, ffn, layers
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


def bert_base(seq: int = 128):
    """BERT-base sized: 12 layers, d 768, 12 heads, FFN 3072, vocabulary 30522, input_ids (batch, seq)."""
    return bert_model(seq=seq, vocab=30522, d=768, heads=12, ffn=3072, layers=12)


def vit_b_16():
    """ViT-B/16 sized: 224x224, patches of 16, 12 layers, d 768, 12 heads, MLP 3072, 1000 classes."""
    return vit_model(image=224, patch=16, classes=1000, d=768, heads=12, ffn=3072, layers=12)
