"""Export the transformer benchmark models to ONNX with seeded weights (needs torch; torch is never
a dependency of pooled_predictor: run this with an environment that has it).

    /path/to/torch-env/bin/python benchmarks/export_transformers.py [--models bert vit swin] [--force]
    python benchmarks/export_transformers.py --graphs [--models ...]   # without torch: tests/transformer_graphs.py

Writes, under the cache folder (~/.cache/pooled-predictor/exported/, or
$POOLED_PREDICTOR_CACHE/exported/; the folder benchmarks/vs_onnxruntime.py reads):
* bert_base.onnx -- a BERT-base-sized encoder (Devlin et al. 2019; the layer of Hugging Face's
  BertModel written out): word + position + token-type embeddings and LayerNorm, 12 layers of
  d=768, 12 heads, FFN 3072 (Q/K/V/O projections, scaled dot-product attention with the
  additive padding mask (1 - mask) * finfo.min, exact-erf GELU, post-LayerNorm), input
  input_ids int64 (batch, 128), the padding mask computed from input_ids != 0 in the graph,
  output the last hidden state (batch, 128, 768).
* vit_b_16.onnx -- torchvision's vit_b_16 (224x224, 1000 classes), input (batch, 3, 224, 224).
* swin_t.onnx -- torchvision's swin_t (224x224, 1000 classes), input (batch, 3, 224, 224).
Weights: torch.manual_seed(0) then the modules' own initialisation (BERT's: N(0, 0.02) weights,
and here random biases and LayerNorm affine too; ViT's zero classifier made N(0, 0.02), else
every output is 0). Batch is a dynamic axis.
Exported with torch.onnx.export (the TorchScript exporter, opset 17: LayerNormalization as
one op, attention and GELU decomposed into MatMul/Softmax/Erf as exporters emit them).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

MODELS = ("bert", "vit", "swin")
FILES = {"bert": "bert_base.onnx", "vit": "vit_b_16.onnx", "swin": "swin_t.onnx"}
OPSET = 17
SEQ = 128


def exported_dir() -> Path:
    """~/.cache/pooled-predictor/exported (or under $POOLED_PREDICTOR_CACHE / $XDG_CACHE_HOME)."""
    root = os.environ.get("POOLED_PREDICTOR_CACHE")
    if root:
        base = Path(root)
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pooled-predictor"
    return base / "exported"


def _torchvision():
    """import torchvision even when its compiled ops (_C.so) were built for another torch: the two
    models use none of them, but torchvision's __init__ registers fake kernels for them."""
    import torch

    try:
        import torchvision
    except RuntimeError:
        for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
            del sys.modules[name]
        real = torch.library.register_fake
        torch.library.register_fake = lambda *a, **k: (lambda f: f)
        try:
            import torchvision
        finally:
            torch.library.register_fake = real
    return torchvision


def bert_module():
    """A BERT-base-sized encoder as torch modules (Hugging Face BertModel's layer, eager attention)."""
    import torch
    from torch import nn

    d, heads, ffn, layers, vocab, positions = 768, 12, 3072, 12, 30522, 512

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.query, self.key, self.value = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
            self.out = nn.Linear(d, d)
            self.ln1 = nn.LayerNorm(d, eps=1e-12)
            self.up, self.down = nn.Linear(d, ffn), nn.Linear(ffn, d)
            self.ln2 = nn.LayerNorm(d, eps=1e-12)

        def split(self, x):  # (B, S, d) -> (B, heads, S, d / heads)
            b, s, _ = x.shape
            return x.view(b, s, heads, d // heads).permute(0, 2, 1, 3)

        def forward(self, x, mask):
            q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d // heads) + mask
            ctx = torch.matmul(torch.softmax(scores, dim=-1), v)
            b, _, s, _ = ctx.shape
            ctx = ctx.permute(0, 2, 1, 3).reshape(b, s, d)
            x = self.ln1(self.out(ctx) + x)
            return self.ln2(self.down(nn.functional.gelu(self.up(x))) + x)

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.word = nn.Embedding(vocab, d)
            self.position = nn.Embedding(positions, d)
            self.token_type = nn.Embedding(2, d)
            self.ln = nn.LayerNorm(d, eps=1e-12)
            self.layers = nn.ModuleList(Layer() for _ in range(layers))
            for m in self.modules():  # BertPreTrainedModel._init_weights' scale; biases and LayerNorm's
                if isinstance(m, (nn.Linear, nn.Embedding)):  # affine random too (a trained model's are not
                    nn.init.normal_(m.weight, std=0.02)  # 0 and 1, and equal initializers would be shared)
                if isinstance(m, nn.Linear):
                    nn.init.normal_(m.bias, std=0.02)
                if isinstance(m, nn.LayerNorm):
                    nn.init.normal_(m.weight, 1.0, 0.05)
                    nn.init.normal_(m.bias, std=0.02)

        def forward(self, input_ids):
            s = input_ids.shape[1]
            pos = torch.arange(s, device=input_ids.device).unsqueeze(0)
            x = self.word(input_ids) + self.position(pos) + self.token_type(torch.zeros_like(input_ids))
            x = self.ln(x)
            keep = (input_ids != 0).to(x.dtype)[:, None, None, :]  # (B, 1, 1, S)
            mask = (1.0 - keep) * torch.finfo(x.dtype).min
            for layer in self.layers:
                x = layer(x, mask)
            return x

    return Encoder().eval()


def export(name: str, path: Path) -> None:
    import torch

    torch.manual_seed(0)
    if name == "bert":
        model = bert_module()
        x = torch.randint(1, 30522, (1, SEQ), dtype=torch.int64)
        x[:, SEQ - 16:] = 0  # padding: the mask is live
        in_name = "input_ids"
    else:
        tv = _torchvision()
        model = (tv.models.vit_b_16() if name == "vit" else tv.models.swin_t()).eval()
        if name == "vit":  # torchvision initialises the classifier to zeros: every output would be 0
            torch.nn.init.normal_(model.heads.head.weight, std=0.02)
        x = torch.randn(1, 3, 224, 224)
        in_name = "data"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    # Traced with autograd on: under no_grad nn.MultiheadAttention (ViT) takes its fused fast path,
    # aten::_native_multi_head_attention, which the exporter has no ONNX function for.
    torch.onnx.export(model, (x,), str(tmp), input_names=[in_name], output_names=["output"],
                      dynamic_axes={in_name: {0: "batch"}, "output": {0: "batch"}},
                      opset_version=OPSET, dynamo=False, do_constant_folding=True)
    import onnx

    onnx.checker.check_model(str(tmp))
    tmp.replace(path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    ap.add_argument("--force", action="store_true", help="export again over an existing file")
    ap.add_argument("--graphs", action="store_true",
                    help="no torch: write tests/transformer_graphs.py's graphs of the same sizes in the same export "
                         "patterns (seeded N(0, 0.05) weights) instead of the torch exports")
    args = ap.parse_args(argv)
    for name in args.models:
        path = exported_dir() / FILES[name]
        if path.exists() and not args.force:
            print(f"{name}: {path} exists (--force to export again)")
            continue
        if args.graphs:
            sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
            import onnx  # noqa: PLC0415

            from tests.transformer_graphs import bert_base, swin_t, vit_b_16  # noqa: PLC0415

            path.parent.mkdir(parents=True, exist_ok=True)
            onnx.save({"bert": bert_base, "vit": vit_b_16, "swin": swin_t}[name](), str(path))
        else:
            export(name, path)
        print(f"{name}: wrote {path} ({path.stat().st_size / 1e6:.1f} MB)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
