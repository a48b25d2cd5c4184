"""The onnx.backend interface: run ONNX's own conformance tests (and any onnx.backend user) on a Net.

    rep = PooledPredictorBackend.prepare(model, "CPU")
    outputs = rep.run([x, w])                # graph outputs, in graph order

`prepare` imports the model (importers.load_onnx), compiles it for the device
(Program) and binds one Net; `BackendRep.run` feeds the inputs (a list in graph
input order, a dict by name, or one array) and returns copies of the outputs as
a tuple that can also be indexed by output name (onnx's namedtupledict).

Devices: "CPU" always; "CUDA" (or "CUDA:i") only when cupy imports and sees a
GPU. Source: onnx/backend/base.py (the Backend and BackendRep interfaces) and
docs/ImplementingAnOnnxBackend.md.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep, Device, DeviceType, namedtupledict

from ..errors import InputError, UnsupportedOpError
from ..importers import load_onnx
from ..engine.device import cuda_available
from ..engine.net import Net
from ..engine.program import Program


def device_name(device: str) -> str:
    """onnx's device string ("CPU", "CUDA", "CUDA:1") -> ours ("cpu", "cuda").

    Raises:
        ValueError: an unknown device type.
    """
    try:
        kind = Device(device).type
    except (AttributeError, ValueError):
        raise ValueError(f"unknown device {device!r}; expected 'CPU' or 'CUDA[:i]'") from None
    return "cuda" if kind == DeviceType.CUDA else "cpu"


class PooledPredictorRep(BackendRep):
    """A prepared model: one Net (over the Program's shared weights) that run() feeds.

    Attributes:
        program: the compiled Program.
        net: the Net that runs it (one thread at a time, like every Net).
    """

    def __init__(self, program: Program):
        self.program = program
        self.net = Net(program)

    @property
    def input_names(self) -> list[str]:
        return self.program.input_names

    @property
    def output_names(self) -> list[str]:
        return self.program.output_names

    def run(self, inputs: Any, **kwargs: Any) -> tuple:
        """Run the model once.

        Args:
            inputs: a list or tuple in graph input order (initializers excluded),
                a dict name -> array, or one array for a one-input model.
        Returns:
            The graph outputs in graph order (numpy copies), as a tuple that is
            also indexable by output name.
        Raises:
            InputError: inputs that do not fit the model; ShapeInferenceError,
            KernelError: the model rejects them.
        """
        if isinstance(inputs, (list, tuple)):
            inputs = [np.asarray(a) for a in inputs]
        self.net.forward(inputs)
        names = self.output_names
        values = [self.net.device.copy_out(self.net.blob_by_name(n)) for n in names]
        return namedtupledict("Outputs", names)(*values)


class PooledPredictorBackend(Backend):
    """onnx.backend.base.Backend over pooled_predictor's importer, Program and Net."""

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        """True when every node of the model has a kernel on the device (Program finds those
        that have none; the importer does not look at kernels)."""
        if not cls.supports_device(device):
            return False
        dev = device_name(device)
        try:
            Program(load_onnx(model, device=dev), dev, fold_constants=False)
        except UnsupportedOpError:
            return False
        return True

    @classmethod
    def prepare(cls, model: onnx.ModelProto | bytes | str, device: str = "CPU",
                **kwargs: Any) -> PooledPredictorRep:
        """Import, compile and bind a model.

        Args:
            model: a ModelProto, its serialized bytes, or a path.
            device: "CPU" or "CUDA[:i]".
        Raises:
            ValueError: the device is unknown or not available here.
            ModelLoadError, UnsupportedOpError: as load_onnx and Program raise.
        """
        if not cls.supports_device(device):
            raise ValueError(f"device {device!r} is not available (CUDA needs cupy and a GPU)")
        dev = device_name(device)
        return PooledPredictorRep(Program(load_onnx(model, device=dev), dev))

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Any, device: str = "CPU",
                 outputs_info: Sequence[tuple[np.dtype, tuple[int, ...]]] | None = None,
                 **kwargs: Any) -> tuple:
        """Run one node on the given inputs (a one-node model at `opset_version`, default the newest).

        Args:
            node: the NodeProto.
            inputs: arrays for the node's present inputs, in order (or a dict by name).
            device: "CPU" or "CUDA[:i]".
            outputs_info: optional (dtype, shape) per output, declared on the model.
        Returns:
            The node's present outputs, in order.
        """
        super().run_node(node, inputs, device=device, outputs_info=outputs_info, **kwargs)
        present = [i for i in node.input if i]
        if isinstance(inputs, dict):
            arrays = [np.asarray(inputs[n]) for n in present]
        else:
            arrays = [np.asarray(a) for a in inputs]
        if len(arrays) != len(present):
            raise InputError(f"node {node.name!r} ({node.op_type}) has {len(present)} present "
                             f"input(s) {present}, got {len(arrays)} array(s)")
        graph_inputs = [onnx.helper.make_tensor_value_info(
            n, onnx.helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in zip(present, arrays)]
        outs = [o for o in node.output if o]
        if outputs_info:
            elem = onnx.helper.np_dtype_to_tensor_dtype
            graph_outputs = [onnx.helper.make_tensor_value_info(o, elem(np.dtype(t)), s)
                             for o, (t, s) in zip(outs, outputs_info)]
        else:
            graph_outputs = [onnx.helper.make_empty_tensor_value_info(o) for o in outs]
        opset = int(kwargs.get("opset_version", onnx.defs.onnx_opset_version()))
        domain = node.domain or ""
        opsets = [onnx.helper.make_opsetid("", opset if domain in ("", "ai.onnx") else
                                           onnx.defs.onnx_opset_version())]
        if domain not in ("", "ai.onnx"):
            opsets.append(onnx.helper.make_opsetid(domain, opset))
        graph = onnx.helper.make_graph([node], f"{node.op_type}_run_node", graph_inputs, graph_outputs)
        model = onnx.helper.make_model(graph, opset_imports=opsets)
        return cls.prepare(model, device).run(arrays)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        """CPU always; CUDA when cupy and a GPU are present."""
        try:
            dev = device_name(device)
        except ValueError:
            return False
        return dev == "cpu" or cuda_available()


prepare = PooledPredictorBackend.prepare
run_node = PooledPredictorBackend.run_node
run_model = PooledPredictorBackend.run_model
supports_device = PooledPredictorBackend.supports_device
