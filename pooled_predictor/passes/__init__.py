"""Graph passes: Graph -> Graph rewrites between import and compile.

    from pooled_predictor.passes import optimize, inspect, PASSES

    graph, report = optimize(load_onnx(path), level="all")    # a new Graph; the input is untouched
    print(report)                  # one line per pass: what it changed
    print(report.table())          # node counts per op type after each pass
    print(inspect(path, "all"))    # the same table, for `pooled-predictor inspect MODEL`

Modules, one per rewrite family:

    manager.py          PASSES (the pipeline, in order, with levels), optimize, inspect, PassReport
    pattern.py          the pattern matcher (Pat/Var/Const/Opt), Rule (pattern -> replacement), apply_rules
    analysis.py         shapes, ranks and static values (our CPU kernels and shape rules)
    cleanup.py          eliminate_identity (Identity, inference Dropout), eliminate_dead_nodes
    fold.py             constant_folding, shape_folding
    conv_bn.py          fold_conv_bn, fold_conv_add, fold_conv_mul
    fc_fuse.py          fuse_matmul_add (MatMul + Add -> Gemm, or MatMulAdd when batched)
    gelu.py             fuse_gelu (erf form -> Gelu)
    attention.py        fuse_attention (MatMul, scale, mask, Softmax, MatMul -> ScaledDotProductAttention)
    hard_swish.py       fuse_hard_swish (x * HardSigmoid(x) -> HardSwish)
    fuse_activation.py  fuse_conv_activation, fuse_gemm_activation (-> FusedConv, FusedGemm)
    conv_sum.py         fuse_conv_sum (Conv + same-shape Add [+ activation] -> FusedConv with a sum input)
    pointwise_depthwise.py  fuse_pointwise_depthwise (1x1 Conv + depthwise Conv -> FusedConvDepthwise)
    transpose.py        compose_transposes
    squeeze.py          sink_squeezes (BatchNormalization / activations below a Squeeze; Unsqueeze(Squeeze) -> x)
    subgraphs.py        optimize_bodies (Loop/Scan bodies: captured weights baked in, the pipeline run inside)

Layering: passes work on the IR (ir.py); analysis.py alone also uses the
kernels and shape rules (program.Step) so that folding computes exactly what
the compiled graph would. Ops the passes emit outside ONNX live in the domain
"pooled_predictor", opset 1 (kernels: ops/cpu/fused.py; shape rules and the
activation table: ops/shapes/fused.py, whose DOMAIN the fusing passes import).
A graph using them imports that domain (graph.opset["pooled_predictor"] = 1).
"""

from .base import LEVELS, Pass, PassContext
from .manager import PASSES, PassReport, PassResult, inspect, op_counts, optimize, parse_input_shapes, select
from .pattern import Const, Match, Opt, Pat, Replacement, Rule, Var, apply_rules

__all__ = ["LEVELS", "PASSES", "Const", "Match", "Opt", "Pass", "PassContext", "PassReport", "PassResult",
           "Pat", "Replacement", "Rule", "Var", "apply_rules", "inspect", "op_counts", "optimize", "parse_input_shapes", "select"]
