"""onnx.helper builders of a BERT-style encoder, a ViT and a Swin Transformer in the patterns torch.onnx.export
writes for benchmarks/export_transformers.py's three models (Hugging Face BERT's layer with the padding mask computed
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


def _shift_mask(size: int, window: int, shift: int) -> np.ndarray:
    """torchvision's shifted-window attention mask, (windows, window^2, window^2): -100 between tokens of
    different regions of the rolled image, 0 within one (Liu et al. 2021, section 3.2)."""
    img = np.zeros((size, size), np.float32)
    cuts = ((0, size - window), (size - window, size - shift), (size - shift, size))
    region = 0
    for h0, h1 in cuts:
        for w0, w1 in cuts:
            img[h0:h1, w0:w1] = region
            region += 1
    n = size // window
    wins = img.reshape(n, window, n, window).transpose(0, 2, 1, 3).reshape(n * n, window * window)
    return np.where(wins[:, None, :] != wins[:, :, None], np.float32(-100.0), np.float32(0.0))


def swin_model(image=56, patch=4, classes=10, d=16, depths=(2, 2), heads=(2, 4), window=7, seed=0):
    """A Swin Transformer (Liu et al. 2021) in the patterns torch.onnx.export writes for torchvision's swin_t
    (TorchScript exporter, opset 17, constants folded): the patch embedding (a strided Conv, NHWC from there
    on) and LayerNorm; per block pre-LN shifted-window attention -- the roll as Slice + Concat, the window
    partition and its reverse as Reshape/Transpose, Q K V from one Linear gathered apart, Q scaled, the
    relative position bias and, in shifted blocks, the region mask (-100) added before Softmax -- and the
    erf GELU MLP, each with its residual; patch merging (four strided Slices, Concat, LayerNorm, a Linear
    without bias) between stages; the last LayerNorm, the mean over positions and a Gemm head. Blocks
    alternate shift 0 and window // 2, except where the window covers the whole map (no shift)."""
    b = _Builder(d, heads[0], seed)
    x = b.op("Conv", ["data", b.w(d, 3, patch, patch), b.w(d)], kernel_shape=[patch, patch], strides=[patch, patch])
    x = b.op("Transpose", [x], perm=[0, 2, 3, 1])  # (B, H, W, C)
    size, c = image // patch, d

    def norm(x, c):
        return b.op("LayerNormalization", [x, b.w(value=1 + 0.1 * b.rng.standard_normal(c).astype(np.float32)),
                                           b.w(c)], axis=-1, epsilon=1e-5)

    def i64(*v):
        return b.w(value=np.array(v, np.int64))

    def roll(x, s):  # torch.roll(x, (s, s), dims=(1, 2)) as the exporter writes it: Slice + Concat per axis
        for axis in (1, 2):
            k = s % size
            tail = b.op("Slice", [x, i64(size - k), i64(size), i64(axis)])
            head = b.op("Slice", [x, i64(0), i64(size - k), i64(axis)])
            x = b.op("Concat", [tail, head], axis=axis)
        return x

    for stage, (depth, h) in enumerate(zip(depths, heads)):
        if stage:  # patch merging: (B, H, W, C) -> (B, H/2, W/2, 2C)
            parts = [b.op("Slice", [x, i64(r, q), i64(size, size), i64(1, 2), i64(2, 2)])
                     for r, q in ((0, 0), (1, 0), (0, 1), (1, 1))]
            x = b.op("MatMul", [norm(b.op("Concat", parts, axis=-1), 4 * c), b.w(4 * c, 2 * c)])
            size, c = size // 2, 2 * c
        win = min(window, size)
        n, t, dh = size // win, win * win, c // h
        for blk in range(depth):
            shift = win // 2 if blk % 2 and win < size else 0
            y = norm(x, c)
            if shift:
                y = roll(y, -shift)
            y = b.op("Reshape", [y, i64(-1, n, win, n, win, c)])
            y = b.op("Reshape", [b.op("Transpose", [y], perm=[0, 1, 3, 2, 4, 5]), i64(-1, t, c)])
            qkv = b.op("Add", [b.w(3 * c), b.op("MatMul", [y, b.w(c, 3 * c)])])
            qkv = b.op("Transpose", [b.op("Reshape", [qkv, i64(-1, t, 3, h, dh)])], perm=[2, 0, 3, 1, 4])
            q, k, v = (b.op("Gather", [qkv, b.w(value=np.array(j, np.int64))], axis=0) for j in range(3))
            q = b.op("Mul", [q, b.w(value=np.float32(dh ** -0.5))])
            a = b.op("MatMul", [q, b.op("Transpose", [k], perm=[0, 1, 3, 2])])
            table = b.rng.standard_normal(((2 * win - 1) ** 2, h)).astype(np.float32) * 0.02
            coords = np.stack(np.meshgrid(np.arange(win), np.arange(win), indexing="ij")).reshape(2, -1)
            rel = (coords[:, :, None] - coords[:, None, :]).transpose(1, 2, 0) + (win - 1)
            bias = table[rel[..., 0] * (2 * win - 1) + rel[..., 1]].transpose(2, 0, 1)[None]  # (1, h, t, t)
            a = b.op("Add", [a, b.w(value=np.ascontiguousarray(bias))])
            if shift:
                a = b.op("Reshape", [a, i64(-1, n * n, h, t, t)])
                a = b.op("Add", [a, b.w(value=_shift_mask(size, win, shift)[None, :, None])])
                a = b.op("Reshape", [a, i64(-1, h, t, t)])
            a = b.op("MatMul", [b.op("Softmax", [a], axis=-1), v])
            a = b.op("Reshape", [b.op("Transpose", [a], perm=[0, 2, 1, 3]), i64(-1, t, c)])
            a = b.op("Add", [b.w(c), b.op("MatMul", [a, b.w(c, c)])])
            a = b.op("Reshape", [a, i64(-1, n, n, win, win, c)])
            a = b.op("Reshape", [b.op("Transpose", [a], perm=[0, 1, 3, 2, 4, 5]), i64(-1, size, size, c)])
            if shift:
                a = roll(a, shift)
            x = b.op("Add", [x, a])
            m = b.op("Add", [b.w(4 * c), b.op("MatMul", [norm(x, c), b.w(c, 4 * c)])])
            x = b.op("Add", [x, b.op("Add", [b.w(c), b.op("MatMul", [b.gelu_erf(m), b.w(4 * c, c)])])])
    x = b.op("ReduceMean", [norm(x, c)], axes=[1, 2], keepdims=0)
    y = b.op("Gemm", [x, b.w(classes, c), b.w(classes)], transB=1)
    return b.model([helper.make_tensor_value_info("data", TensorProto.FLOAT, ("batch", 3, image, image))], y)


def swin_t():
    """Swin-T sized (torchvision's swin_t): 224x224, patches of 4, C = 96, depths (2, 2, 6, 2), heads (3, 6, 12,
    24), window 7, MLP ratio 4, 1000 classes; 28.3 M parameters."""
    return swin_model(image=224, patch=4, classes=1000, d=96, depths=(2, 2, 6, 2), heads=(3, 6, 12, 24))
