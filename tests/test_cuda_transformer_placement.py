"""A BERT-style encoder and a ViT run with every node on the GPU: the placement stage (engine/placement.py,
through the CUDA registry's kernel_for) gives every node that runs a CUDA kernel, with no GPU here.

CI has no torch, so the graphs are built with onnx.helper in the patterns torch.onnx.export writes
for benchmarks/export_transformers.py's two models, small (tests/transformer_graphs.py). The graph passes run as Predictor runs them (attention fused into
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

import pytest

from pooled_predictor.engine.device import DeviceWithHost
from pooled_predictor.engine.net import Net, Optimization
from pooled_predictor.engine.program import Program
from pooled_predictor.importers import load_model, load_onnx
from pooled_predictor.passes import optimize
from tests.cuda_stand_in import HostMemoryDevice
from tests.transformer_graphs import bert_model, swin_model, vit_model



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


def test_a_swin_transformer_runs_every_node_on_the_gpu():
    """Shifted windows: the roll's Slices and Concats, the window partition's Reshape/Transpose, the relative
    position bias and region mask added before Softmax, patch merging's strided Slices."""
    net, dev = placement(load_onnx(swin_model()), {"data": (2, 3, 56, 56)})
    assert_all_on_the_gpu(net, dev, {"Gelu", "LayerNormalization", "Conv", "Concat", "Slice", "Softmax", "Gemm"})


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
