"""compiled/nchwc_depthwise.py at 16 lanes (NCHW16c): the template's source run with LANES = 16 (compiled/widths.py)."""

from ..widths import instantiate

instantiate(globals(), "nchwc_depthwise", 16)
