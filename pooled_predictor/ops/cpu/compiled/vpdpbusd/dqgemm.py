"""compiled/dqgemm.py with DOT = "vpdpbusd": the template's source run again (compiled/dots.py)."""

from ..dots import instantiate

instantiate(globals(), "dqgemm", "vpdpbusd")
