"""compiled/qgemm.py with DOT = "emulated": the template's source run again (compiled/dots.py)."""

from ..dots import instantiate

instantiate(globals(), "qgemm", "emulated")
