"""External data is read only from inside the model's directory (issue 14: files read outside)."""

import os
import sys

import numpy as np
import onnx
import pytest

from pooled_predictor import ModelLoadError, Predictor, ResourceExhaustedError
from tests.importers.external_models import WEIGHT, add_model, escaping_locations, make_dirs

X = np.zeros(4, np.float32)
_opened: list[str] = []


def _audit(event, args):  # records every open of a bait file in this process
    if event == "open" and args and isinstance(args[0], (str, bytes)) and "bait" in os.fsdecode(args[0]):
        _opened.append(os.fsdecode(args[0]))


sys.addaudithook(_audit)


@pytest.fixture
def dirs(tmp_path):
    model_dir, bait = make_dirs(str(tmp_path))
    _opened.clear()
    yield model_dir, bait
    assert not [p for p in _opened if p.endswith("secret.bin")], f"the bait was opened: {_opened}"


def save(model, model_dir) -> str:
    path = os.path.join(model_dir, "m.onnx")
    onnx.save(model, path)
    return path


def test_external_data_inside_the_directory_loads(dirs):
    model_dir, _ = dirs
    p = Predictor(save(add_model("w.bin"), model_dir))
    np.testing.assert_array_equal(p.forward([X], ["y"])[0], WEIGHT)


@pytest.mark.parametrize("variant", ["dotdot", "dotdot_inside_first", "dot_dotdot", "absolute", "absolute_inside",
                                     "symlink_file", "symlink_dir", "relative_symlink"])
@pytest.mark.parametrize("typed_output", [True, False])
def test_external_data_outside_the_directory_refused(dirs, variant, typed_output):
    model_dir, bait = dirs
    location = escaping_locations(model_dir, bait)[variant]
    with pytest.raises(ModelLoadError) as info:
        Predictor(save(add_model(location, typed_output=typed_output), model_dir))
    assert "'w'" in str(info.value) and location in str(info.value)


@pytest.mark.parametrize("as_bytes", [True, False])
def test_bytes_or_proto_need_external_data_dir(dirs, monkeypatch, as_bytes):
    model_dir, _ = dirs
    model = add_model("w.bin")
    src = model.SerializeToString() if as_bytes else model
    monkeypatch.chdir(model_dir)  # the current directory holds w.bin: it must not be used
    with pytest.raises(ModelLoadError, match="external_data_dir"):
        Predictor(src)
    p = Predictor(src, external_data_dir=model_dir)
    np.testing.assert_array_equal(p.forward([X], ["y"])[0], WEIGHT)
    if not as_bytes:  # the caller's ModelProto is not modified
        assert model.graph.initializer[0].data_location == onnx.TensorProto.EXTERNAL


def test_external_data_dir_also_confines_bytes(dirs):
    model_dir, bait = dirs
    with pytest.raises(ModelLoadError, match="outside"):
        Predictor(add_model(os.path.relpath(bait, model_dir)).SerializeToString(), external_data_dir=model_dir)


@pytest.mark.parametrize("offset,length,match", [
    (20, None, "end of the file"), (0, 32, "end of the file"), (8, 8, "declare 16"), ("-4", None, "non-negative"),
    ("1e3", None, "non-negative"), (None, 12, "declare 16"), (4, None, "declare 16")])
def test_external_data_offsets_and_lengths_checked(dirs, offset, length, match):
    model_dir, _ = dirs
    with pytest.raises(ModelLoadError, match=match):
        Predictor(save(add_model("w.bin", offset, length), model_dir))


def test_external_data_must_be_a_regular_file(dirs):
    model_dir, _ = dirs
    os.mkfifo(os.path.join(model_dir, "fifo.bin"))  # opening it for reading would block forever
    os.makedirs(os.path.join(model_dir, "adir"))
    for location in ("fifo.bin", "adir", "missing.bin", ""):
        with pytest.raises(ModelLoadError, match="'w'"):
            Predictor(save(add_model(location), model_dir))


def test_external_data_over_the_memory_budget(dirs):
    model_dir, _ = dirs
    with pytest.raises(ResourceExhaustedError):
        Predictor(save(add_model("w.bin"), model_dir), memory_limit_bytes=8)
