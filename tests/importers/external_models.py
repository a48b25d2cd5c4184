"""Models whose weights live in external data files, for the importer's path checks and the fuzz suite.

A model directory `model/` holds `m.onnx` and `w.bin`; beside it, a bait
directory `bait/` holds `secret.bin`, a file no load may ever read.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
from onnx import TensorProto, helper

WEIGHT = np.arange(4, dtype=np.float32) + 1


def external_tensor(name: str, location: str, offset=None, length=None, dims=(4,)) -> TensorProto:
    """A float32 TensorProto whose data is in an external file (ONNX IR "External Tensor Data")."""
    t = TensorProto()
    t.name = name
    t.data_type = TensorProto.FLOAT
    t.dims.extend(dims)
    t.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        if value is not None:
            entry = t.external_data.add()
            entry.key, entry.value = key, str(value)
    return t


def add_model(location: str, offset=None, length=None, typed_output: bool = True) -> onnx.ModelProto:
    """y = x + w, with w (4,) float32 in the external file `location`."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = (helper.make_tensor_value_info("y", TensorProto.FLOAT, [4]) if typed_output
         else helper.make_empty_tensor_value_info("y"))
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"], name="add")], "g", [x], [y],
                              [external_tensor("w", location, offset, length)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def make_dirs(root: str) -> tuple[str, str]:
    """root/model (with w.bin) and root/bait (with secret.bin); returns (model_dir, bait_file)."""
    model_dir, bait_dir = os.path.join(root, "model"), os.path.join(root, "bait")
    os.makedirs(model_dir, exist_ok=True)
    os.makedirs(bait_dir, exist_ok=True)
    with open(os.path.join(model_dir, "w.bin"), "wb") as f:
        f.write(WEIGHT.tobytes())
    bait = os.path.join(bait_dir, "secret.bin")
    with open(bait, "wb") as f:
        f.write((WEIGHT * 100).tobytes())
    return model_dir, bait


def escaping_locations(model_dir: str, bait: str) -> dict[str, str]:
    """The ways out of the model's directory (issue 14's 8 variants), creating the links they need."""
    rel = os.path.relpath(bait, model_dir)
    os.makedirs(os.path.join(model_dir, "sub"), exist_ok=True)
    links = {"link.bin": bait, "dirlink": os.path.dirname(bait), "sub/uplink.bin": os.path.join("..", rel)}
    for name, target in links.items():
        path = os.path.join(model_dir, name)
        if not os.path.lexists(path):
            os.symlink(target, path)
    return {
        "dotdot": rel,                                         # ../bait/secret.bin
        "dotdot_inside_first": os.path.join("sub", "..", rel),  # sub/../../bait/secret.bin
        "dot_dotdot": os.path.join(".", rel),
        "absolute": bait,
        "absolute_inside": os.path.join(model_dir, "w.bin"),    # absolute paths are refused, even inside
        "symlink_file": "link.bin",
        "symlink_dir": os.path.join("dirlink", os.path.basename(bait)),
        "relative_symlink": "sub/uplink.bin",
    }
