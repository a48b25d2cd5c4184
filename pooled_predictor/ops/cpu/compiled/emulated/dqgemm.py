"""compiled/dqgemm.py with DOT = "emulated": the template's source run again (compiled/dots.py)."""

from ..dots import instantiate

instantiate(globals(), "dqgemm", "emulated")
