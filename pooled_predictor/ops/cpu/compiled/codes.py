"""The activation codes the compiled epilogues take (epilogue.py's activate_range / activate_inplace),
in a module without numba: kernel builders read them at import (ops/cpu/fused.py, conv_nchwc.py)
while the kernel modules, and numba, are imported on first use (compiled/__init__.py)."""

NONE, RELU, CLIP, HARD_SIGMOID, HARD_SWISH, LEAKY_RELU, GELU = range(7)
CODES = {"Relu": RELU, "Clip": CLIP, "HardSigmoid": HARD_SIGMOID, "HardSwish": HARD_SWISH,
         "LeakyRelu": LEAKY_RELU}
"""ONNX activation op -> its code in the compiled epilogues (Identity is NONE): every kernel applies these,
in registers or over a stored block."""
RANGE_CODES = {**CODES, "Gelu": GELU}
"""CODES and the activations only epilogue.activate_range applies, over a block of Y already stored (not
in registers: nchwc_depthwise's IR epilogue has no erf): GELU (p0 = sqrt(2) in float32), our domain's Gelu
(ops/cpu/fused.py: the exporters' X / sqrt(2), erf, + 1, * X, * 0.5). Kernels whose epilogue is
activate_range (the GEMMs, Winograd, the NCHW depthwise kernel) take them."""
