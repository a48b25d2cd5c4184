"""External data (ONNX IR "External Tensor Data"), read only from inside the model's directory.

A TensorProto whose data_location is EXTERNAL names a file (`location`, relative
to the model's directory), an `offset` and a `length` in bytes. A model file is
untrusted input: a location such as ``../x/secret.bin``, ``/etc/passwd`` or a
symlink leading out of the directory must not make us read that file. So, for
every external tensor (initializers, sparse initializers, Constant and other
tensor attributes, subgraphs included):

* the location is relative, and once joined to the base directory and every
  symlink resolved (os.path.realpath) it still lies inside that directory;
* it is a regular file (not a FIFO or a device, which could block or never end),
  opened without following a last-moment symlink and checked to be the same
  file as the one resolved;
* offset and length are non-negative integers and lie within the file, the
  length equals the bytes the tensor's dims and data type declare, and those
  bytes fit the memory budget, all before a byte is read.

onnx.load(..., load_external_data=False) parses the model without touching
external files; resolve_external_data() then reads them by these rules.
Models given as bytes or a ModelProto have no directory: they need an explicit
`external_data_dir` (onnx's `base_dir`; onnxruntime's
"session.model_external_initializers_file_folder_path").

Raises ModelLoadError naming the tensor and the location for every refusal.
"""

from __future__ import annotations

import os
import stat
from typing import Iterator

import onnx
from onnx import TensorProto

from .. import budget
from ..errors import ModelLoadError

_KEYS = ("location", "offset", "length", "checksum", "basepath")


def iter_tensors(graph: onnx.GraphProto) -> Iterator[TensorProto]:
    """Every TensorProto of a graph: initializers, sparse ones, attribute tensors, subgraphs."""
    stack = [graph]
    while stack:
        g = stack.pop()
        yield from g.initializer
        for sp in g.sparse_initializer:
            yield sp.values
            yield sp.indices
        for node in g.node:
            for a in node.attribute:
                if a.HasField("t"):
                    yield a.t
                yield from a.tensors
                if a.HasField("sparse_tensor"):
                    yield a.sparse_tensor.values
                    yield a.sparse_tensor.indices
                for sp in a.sparse_tensors:
                    yield sp.values
                    yield sp.indices
                if a.HasField("g"):
                    stack.append(a.g)
                stack.extend(a.graphs)


def external_tensors(model: onnx.ModelProto) -> list[TensorProto]:
    """The tensors of `model` whose data lives in external files."""
    return [t for t in iter_tensors(model.graph) if t.data_location == TensorProto.EXTERNAL]


def declared_nbytes(t: TensorProto) -> int | None:
    """Bytes the dims and data_type of a tensor declare (None: strings, unknown type or bad dims)."""
    if t.data_type in (TensorProto.STRING, TensorProto.UNDEFINED) or any(d < 0 for d in t.dims):
        return None
    try:
        dtype = onnx.helper.tensor_dtype_to_np_dtype(t.data_type)
    except Exception:
        return None
    count = 1
    for d in t.dims:
        count *= int(d)
    bits = _PACKED_BITS.get(TensorProto.DataType.Name(t.data_type))
    if bits:  # sub-byte types are packed (ONNX IR: INT4, UINT4, FLOAT4E2M1)
        return (count * bits + 7) // 8
    return count * dtype.itemsize


_PACKED_BITS = {"INT4": 4, "UINT4": 4, "FLOAT4E2M1": 4, "INT2": 2, "UINT2": 2}


def resolve_external_data(model: onnx.ModelProto, base_dir: str | os.PathLike | None, where: str,
                          memory_limit: int | None = None) -> None:
    """Read every external tensor of `model` into its raw_data, by the rules of this module.

    Args:
        model: parsed with load_external_data=False; modified in place.
        base_dir: the model's directory (None: the model came as bytes or a
            ModelProto without external_data_dir).
        where: the model's description, for messages.
        memory_limit: budget in bytes for all external tensors together.
    Raises:
        ModelLoadError: a location outside base_dir, absolute, not a regular
            file, offsets or lengths outside the file or not matching the dims,
            no base_dir, or the data over the memory budget (ResourceExhaustedError).
    """
    tensors = external_tensors(model)
    if not tensors:
        return
    if base_dir is None:
        t = tensors[0]
        raise ModelLoadError(
            f"model {where!r}: tensor {t.name!r} stores its data in the external file "
            f"{_info(t).get('location', '')!r}, and a model given as bytes or a ModelProto has no "
            f"directory: pass external_data_dir= (the directory holding its external data files)")
    root = os.path.realpath(os.fspath(base_dir))
    if not os.path.isdir(root):
        raise ModelLoadError(f"model {where!r}: external data directory {os.fspath(base_dir)!r} is not a directory")
    total = 0
    for t in tensors:
        info = _info(t)
        location = info.get("location", "")
        path, offset, length = _check_location(t, info, root, where)
        declared = declared_nbytes(t)
        if length is None:
            length = os.stat(path).st_size - offset
        if declared is not None and length != declared:
            raise ModelLoadError(
                f"model {where!r}: tensor {t.name!r}: external data {location!r} has length {length} bytes, "
                f"its dims {list(t.dims)} and type declare {declared}")
        total += length
        budget.check(total, memory_limit, f"model {where!r}: external data up to tensor {t.name!r}")
        t.raw_data = _read(path, offset, length, t, location, where)
        t.data_location = TensorProto.DEFAULT
        del t.external_data[:]


def _info(t: TensorProto) -> dict[str, str]:
    return {e.key: e.value for e in t.external_data if e.key in _KEYS}


def _check_location(t: TensorProto, info: dict, root: str, where: str) -> tuple[str, int, int | None]:
    location = info.get("location", "")

    def refuse(why: str) -> ModelLoadError:
        return ModelLoadError(f"model {where!r}: tensor {t.name!r}: external data location {location!r} {why}")

    if not location or "\x00" in location:
        raise refuse("is empty or not a file name")
    if os.path.isabs(location) or os.path.splitdrive(location)[0] or location.startswith(("/", "\\")):
        raise refuse("is an absolute path; only files inside the model's directory are read")
    path = os.path.realpath(os.path.join(root, location))
    if os.path.commonpath([root, path]) != root or path == root:
        raise refuse(f"resolves to {path!r}, outside the model's directory {root!r} "
                     "(.. or a symlink); only files inside it are read")
    try:
        st = os.stat(path)
    except OSError as exc:
        raise refuse(f"cannot be read: {exc.strerror}") from exc
    if not stat.S_ISREG(st.st_mode):
        raise refuse("is not a regular file")
    offset = _int_field(info, "offset", 0, refuse)
    length = _int_field(info, "length", None, refuse)
    if offset > st.st_size or (length is not None and offset + length > st.st_size):
        raise refuse(f"offset {offset} and length {length} pass the end of the file ({st.st_size} bytes)")
    return path, offset, length


def _int_field(info: dict, key: str, default, refuse) -> int | None:
    if key not in info:
        return default
    text = info[key].strip()
    if not text.isdigit():
        raise refuse(f"has {key} {info[key]!r}: it must be a non-negative integer")
    return int(text)


def _read(path: str, offset: int, length: int, t: TensorProto, location: str, where: str) -> bytes:
    """Read length bytes at offset; the file opened must be the regular file resolved."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise ModelLoadError(f"model {where!r}: tensor {t.name!r}: external data {location!r} "
                             f"cannot be opened: {exc.strerror}") from exc
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ModelLoadError(f"model {where!r}: tensor {t.name!r}: external data {location!r} "
                                 "is not a regular file")
        data = os.pread(fd, length, offset) if length else b""
    finally:
        os.close(fd)
    if len(data) != length:
        raise ModelLoadError(f"model {where!r}: tensor {t.name!r}: external data {location!r} "
                             f"ended after {len(data)} of {length} bytes")
    return data
