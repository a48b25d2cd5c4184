"""Kernel registry: one implementation per (op_type, since_version, device, layout, precision).

A kernel is registered with the ONNX schema versions it implements:

    @kernel("HardSigmoid", since=6, device="cpu")
    def hard_sigmoid(x, *, out, alpha=0.2, beta=0.5): ...

* A function kernel is called as ``fn(*inputs, out=out, **attrs)``: inputs
  positional (None for an absent optional input), the node's ONNX attributes as
  keywords (the function's defaults are the spec's), ``out`` the preallocated
  output (a tuple of outputs, None for absent ones, when the op's schema has
  more than one output).
* A kernel registered with ``dynamic_output=True`` computes an output whose
  shape depends on input values (NonZero, Unique, NonMaxSuppression): it is
  called without ``out`` and returns its outputs (one array, or a tuple in
  the schema's order), which it allocates; the Net runs it, and what reads
  its outputs, per forward (engine/layout.py: Layout.run_dynamic).
* A class kernel is built once per reshape as ``cls(ctx, **attrs)`` (ctx: an
  OpContext with shapes, dtypes, static values and scratch allocation) and then
  called as ``obj(*inputs, out=out)``; use it when a kernel precomputes from
  shapes (index arrays, padded buffers, GEMM views).
* Either may offer ``prepare_run(*inputs, out=out)`` (a function kernel: as an
  attribute of the function, called with the node's attributes as keywords
  too): the Net calls it once when it binds its arrays and runs the zero-argument
  callable it returns on every forward instead, or the kernel as above where it
  returns None (Paddle-Lite's PrepareForRun before Run). It must do exactly what
  the call does for those arrays, its per-call Python work -- views, argument
  lists, numba's type dispatch (ops/cpu/compiled: bound, prepared) -- done ahead
  (engine/layout.py: _prepared; tests/test_prepared.py checks the bits).

A kernel has a kernel type (Paddle-Lite's TypeSystem): its device, its precision
(PRECISIONS: "any", the default -- it computes in whatever types ONNX gives its
inputs, Paddle-Lite's kAny -- or "int8" for the kernels that compute in 8-bit
integers with int32 sums, int8 and uint8 alike, Paddle-Lite's kInt8; later "fp16",
"bf16") and its layout (ops/layouts.py: "NCHW" -- ONNX's own layout, channels second, any
rank -- the default, "NHWC", or a blocked "NCHW8c"...). It may declare a
layout per input and output (None: that input is read as ONNX gives it, e.g. a
weight). Lookup by (op, version, device) returns the default-layout kernel;
`candidates()` lists every layout's, for the kernel-type assignment pass
(passes/assign.py), which picks one per node and inserts the transforms.

A node attribute the kernel's signature does not name is an error, never
silently ignored. Versions are resolved with onnx's own schemas: the kernel
for a model at opset N is the one registered with the greatest
``since <= since_version(op, N)``; registering a key twice is an error.

The registry imports no kernels: a kernel module registers its kernels when it
is imported, and the ops package (ops/__init__.py) imports every device's
kernel modules, so whatever imports the registry finds them registered.
"""

from __future__ import annotations

import functools
import inspect
import types
from dataclasses import dataclass, field
from typing import Callable, Iterable

import onnx

from ..contrib_schemas import ensure_registered
from ..errors import UnsupportedOpError

DEVICES = ("cpu", "cuda")
DEFAULT_LAYOUT = "NCHW"
PRECISIONS = ("any", "float32", "int8", "fp16", "bf16")
DEFAULT_PRECISION = "any"


@dataclass(frozen=True)
class KernelDef:
    """A registered kernel.

    Attributes:
        op_type, domain: the ONNX operator.
        since: the ONNX schema since_version this implementation starts at.
        device: "cpu" or "cuda".
        impl: the function or class.
        inplace: input indices whose storage output 0 may take when that input
            dies at this node with the same size and dtype (for memory_opt).
        multi_output: `out` is a tuple (the schema has several outputs), padded
            with None up to `num_outputs` for omitted trailing outputs (from the
            schema when first asked: not at registration, which runs at import).
        num_outputs: outputs the schema names (0 when the last is variadic).
        check: optional ``check(attrs, version) -> str | None``: a reason the
            attribute values are unsupported, found at compile time.
        dynamic_output: the kernel allocates and returns its outputs (their
            shapes depend on input values); called without `out`.
        layout: the kernel type's layout (ops/layouts.py); "NCHW" is ONNX's own.
        input_layouts / output_layouts: per input/output layout (None: inputs
            0 and outputs in `layout`, other inputs as stored).
        preference: lower is preferred by the assignment pass (default 0).
        supports: optional ``supports(ctx) -> bool``: the kernel can run this
            node at these shapes (a non-default layout kernel must say).
        precision: the kernel type's precision (PRECISIONS; "any": its inputs' ONNX types).
    """

    op_type: str
    domain: str
    since: int
    device: str
    impl: Callable
    inplace: tuple = ()
    check: Callable | None = None
    params: frozenset = field(default_factory=frozenset)
    dynamic_output: bool = False
    layout: str = "NCHW"
    input_layouts: tuple | None = None
    output_layouts: tuple | None = None
    preference: int = 0
    supports: Callable | None = None
    precision: str = DEFAULT_PRECISION

    @property
    def multi_output(self) -> bool:
        return _schema_outputs(self.op_type, self.domain, self.since)[0]

    @property
    def num_outputs(self) -> int:
        return _schema_outputs(self.op_type, self.domain, self.since)[1]

    def input_layout(self, i: int) -> str | None:
        """The layout input i must arrive in (None: as stored, no transform; e.g. weights)."""
        if self.input_layouts is None:
            return self.layout if i == 0 or self.layout == DEFAULT_LAYOUT else None
        return self.input_layouts[i] if i < len(self.input_layouts) else None

    def output_layout(self, i: int) -> str:
        if self.output_layouts is None:
            return self.layout
        return self.output_layouts[i] if i < len(self.output_layouts) else self.layout

    @property
    def is_class(self) -> bool:
        return inspect.isclass(self.impl)

    def unknown_attrs(self, attrs: dict) -> list[str]:
        if "**" in self.params:
            return []
        return sorted(a for a in attrs if a not in self.params)


# (domain, op_type, device, layout, precision) -> since_version -> KernelDef
_KERNELS: dict[tuple[str, str, str, str, str], dict[int, KernelDef]] = {}
# (domain, op_type, device) -> layouts registered for it
_LAYOUTS: dict[tuple[str, str, str], set] = {}
# (domain, op_type, device, layout) -> precisions registered for it, in registration order
_PRECISIONS: dict[tuple[str, str, str, str], list] = {}


@functools.lru_cache(maxsize=None)
def _schema_outputs(op_type: str, domain: str, since: int) -> tuple[bool, int]:
    """(several outputs?, how many the schema names; 0 when the last is variadic)."""
    ensure_registered(domain)
    try:
        s = onnx.defs.get_schema(op_type, since, domain)
    except Exception:
        return False, 1
    outs = s.outputs
    variadic = bool(outs) and outs[-1].option == onnx.defs.OpSchema.FormalParameterOption.Variadic
    return len(outs) > 1 or variadic, 0 if variadic else len(outs)


def _params(impl) -> frozenset:
    """The keyword-only parameter names of a function kernel (of a class kernel's __init__), "**" for
    a **kwargs, without "out"."""
    fn = impl.__init__ if inspect.isclass(impl) else impl
    code = getattr(fn, "__code__", None)
    if type(fn) is types.FunctionType and code is not None and not hasattr(fn, "__wrapped__") \
            and not hasattr(fn, "__signature__"):
        # a plain function: its code object names them (inspect.signature took 0.15 ms a kernel,
        # 60 ms of the package's import for its ~400 kernels; issue 31)
        start = code.co_argcount
        names = set(code.co_varnames[start:start + code.co_kwonlyargcount])
        if code.co_flags & inspect.CO_VARKEYWORDS:
            names.add("**")
        names.discard("out")
        return frozenset(names)
    names = set()
    for p in inspect.signature(fn).parameters.values():
        if p.kind == p.VAR_KEYWORD:
            names.add("**")
        elif p.kind == p.KEYWORD_ONLY:
            names.add(p.name)
    names.discard("out")
    return frozenset(names)


def kernel(op_type: str, *, since: int | Iterable[int], device: str = "cpu", domain: str = "",
           inplace: Iterable[int] = (), check: Callable | None = None, dynamic_output: bool = False,
           layout: str = DEFAULT_LAYOUT, input_layouts: Iterable | None = None,
           output_layouts: Iterable | None = None, preference: int = 0, supports: Callable | None = None,
           precision: str = DEFAULT_PRECISION):
    """Register a kernel for `op_type` at the given schema version(s) and device.

    Args:
        op_type: ONNX operator name.
        since: schema since_version(s) implemented (an int, or several when one
            implementation covers versions whose semantics it handles).
        device: "cpu" or "cuda".
        domain: operator domain ('' for ONNX).
        inplace: input indices output 0 may overwrite (element-wise ops).
        check: ``check(attrs, version) -> reason | None`` for attribute values
            the kernel does not implement (e.g. training mode).
        dynamic_output: the output shapes depend on input values: the kernel
            takes no `out` and returns its (allocated) outputs.
        layout, input_layouts, output_layouts, preference, supports, precision: the
            kernel type (see KernelDef); the defaults make an ONNX-layout kernel of any precision.
    Raises:
        ValueError: the key (domain, op_type, since, device, layout, precision) is registered
            already, `device` or `precision` is unknown, or a non-default layout has no `supports`.
    """
    if device not in DEVICES:
        raise ValueError(f"unknown device {device!r}; expected one of {DEVICES}")
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; expected one of {PRECISIONS}")
    versions = (since,) if isinstance(since, int) else tuple(since)
    if layout != DEFAULT_LAYOUT and supports is None:
        raise ValueError(f"kernel {op_type} in layout {layout}: give supports(ctx) -> bool")
    ins = None if input_layouts is None else tuple(input_layouts)
    outs = None if output_layouts is None else tuple(output_layouts)

    def register(impl):
        table = _KERNELS.setdefault((domain, op_type, device, layout, precision), {})
        _LAYOUTS.setdefault((domain, op_type, device), set()).add(layout)
        kinds = _PRECISIONS.setdefault((domain, op_type, device, layout), [])
        if precision not in kinds:
            kinds.append(precision)
        params = _params(impl)
        for v in versions:
            if v in table:
                raise ValueError(f"kernel {op_type} since {v} on {device} ({layout}, {precision}) registered twice "
                                 f"({table[v].impl.__qualname__} and {impl.__qualname__})")
            table[v] = KernelDef(op_type, domain, v, device, impl, tuple(inplace), check, params,
                                 dynamic_output, layout, ins, outs, int(preference), supports, precision)
        return impl

    return register


@functools.lru_cache(maxsize=None)
def schema_version(op_type: str, domain: str, opset: int) -> int | None:
    """since_version of the schema of `op_type` in effect at `opset` (None if none)."""
    ensure_registered(domain)
    try:
        return onnx.defs.get_schema(op_type, max_inclusive_version=opset, domain=domain).since_version
    except Exception:
        return None


def versions(op_type: str, domain: str = "", device: str = "cpu", layout: str = DEFAULT_LAYOUT,
             precision: str | None = None) -> dict[int, KernelDef]:
    """since_version -> KernelDef of an op's kernels registered so far in one layout (and precision;
    None: the first registered) (a copy: for modules that register another layout's kernel of each
    version at import)."""
    kinds = _PRECISIONS.get((domain, op_type, device, layout), [DEFAULT_PRECISION])
    return dict(_KERNELS.get((domain, op_type, device, layout, precision or kinds[0]), {}))


def find(op_type: str, domain: str, opset: int, device: str, layout: str = DEFAULT_LAYOUT,
         precision: str | None = None) -> KernelDef | None:
    """The kernel for an op at a model opset on a device (in a layout; in a precision, None: the
    first registered for that layout -- an op's kernels of one precision are its default), or None."""
    kinds = _PRECISIONS.get((domain, op_type, device, layout))
    if not kinds:
        return None
    table = _KERNELS.get((domain, op_type, device, layout, precision or kinds[0]))
    if not table:
        return None
    version = schema_version(op_type, domain, opset)
    if version is None:
        if domain in ("", "ai.onnx") or opset <= 0:
            return None
        version = opset  # a custom domain without onnx schemas: the model's opset of it
    eligible = [v for v in table if v <= version]
    return table[max(eligible)] if eligible else None


def candidates(op_type: str, domain: str, opset: int, device: str) -> list[KernelDef]:
    """Every (layout, precision)'s kernel for an op at a model opset on a device (the default layout's
    first precision first)."""
    layouts = sorted(_LAYOUTS.get((domain, op_type, device), ()), key=lambda lay: (lay != DEFAULT_LAYOUT, lay))
    found = [find(op_type, domain, opset, device, lay, p) for lay in layouts
             for p in _PRECISIONS.get((domain, op_type, device, lay), ())]
    return [k for k in found if k is not None]


def lookup(op_type: str, domain: str, opset: int, device: str, node_name: str = "") -> KernelDef:
    """Like find(), raising UnsupportedOpError naming the node when there is none."""
    k = find(op_type, domain, opset, device)
    if k is None:
        raise UnsupportedOpError(
            f"node {node_name!r}: op {op_type!r}{' (' + domain + ')' if domain else ''} (opset {opset}) "
            f"has no {device} kernel; this build supports {len(registered_ops(device))} ops, "
            f"see `pooled-predictor ops`", [(op_type, domain, opset)])
    return k


def missing_kernels(ops: Iterable[tuple[str, str]], opset: dict[str, int], device: str) -> list[tuple[str, str, int]]:
    """Every distinct (op_type, domain, opset) among `ops` without a kernel on `device`."""
    missing = {}
    for op_type, domain in ops:
        domain = "" if domain in ("", "ai.onnx") else domain
        v = opset.get(domain, 0)
        if (op_type, domain, v) not in missing and find(op_type, domain, v, device) is None:
            missing[(op_type, domain, v)] = None
    return list(missing)


def registered_ops(device: str | None = None) -> list[KernelDef]:
    """All kernel definitions, sorted by (domain, op_type, device, since)."""
    defs = [k for (dom, op, dev, lay, _), t in _KERNELS.items() for k in t.values()
            if device is None or dev == device]
    return sorted(defs, key=lambda k: (k.domain, k.op_type, k.device, k.since, k.layout != DEFAULT_LAYOUT,
                                       k.layout, k.precision))

