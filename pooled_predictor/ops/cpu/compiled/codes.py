"""The activation codes the compiled epilogues take (epilogue.py's activate_range / activate_inplace),
in a module without numba: kernel builders read them at import (ops/cpu/fused.py, conv_nchwc.py)
while the kernel modules, and numba, are imported on first use (compiled/__init__.py)."""

NONE, RELU, CLIP, HARD_SIGMOID, HARD_SWISH, LEAKY_RELU = range(6)
CODES = {"Relu": RELU, "Clip": CLIP, "HardSigmoid": HARD_SIGMOID, "HardSwish": HARD_SWISH,
         "LeakyRelu": LEAKY_RELU}
"""ONNX activation op -> its code in the compiled epilogues (Identity is NONE)."""
