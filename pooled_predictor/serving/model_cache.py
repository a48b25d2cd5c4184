"""The on-disk model cache: an ONNX file's optimized Graph and weights, ready to run (issue 31).

A Predictor of an ONNX file reads the file, parses the protobuf, runs onnx.checker and our
checks, copies every weight out of the protobuf and runs the graph passes (folding
BatchNormalization into Conv, ...): 0.1 s for PP-OCR det, 0.5 s for ResNet-50, 0.9 s for
AlexNet, 2.8 s for VGG16 on a 2-core machine, most of a warm first result. This cache keeps
what they produce, the optimized Graph and its PassReport, in one file per model; the next
Predictor of the same model reads that file instead: the graph as JSON, the weights as one
block mapped into memory (read-only numpy views of it). It is onnxruntime's optimized model
file (SessionOptions.optimized_model_filepath) and OpenVINO's CACHE_DIR, kept automatically.

Where: `Predictor(cache_dir=...)`; by default the directory named by the environment
variable POOLED_PREDICTOR_CACHE_DIR, else $XDG_CACHE_HOME/pooled-predictor/models
(~/.cache/pooled-predictor/models). `cache_dir=False`, or POOLED_PREDICTOR_CACHE_DIR set to
"" or "off", turns it off. Delete the directory to empty it; nothing else is kept there. The
entries used longest ago are removed when a new one would bring the total past
POOLED_PREDICTOR_CACHE_MAX_BYTES (default 4 GiB); a hit marks its entry used (its mtime).

Key: an entry is found by the SHA-256 of the model file's bytes, the code (the SHA-256 of
this package's sources, the versions of Python, numpy and onnx), the CPU (machine, the
detected and chosen ISA, the vector width) and the Predictor options that change the
optimized graph (graph_optimization_level, disabled_passes, keep, device, an explicit
memory_limit_bytes). So an entry is never used for another model, code or CPU, and is
never invalidated by anything else: a `touch` of the model, or a new copy of it at a path
the cache has seen, finds it again. To avoid hashing a large file on every start, the cache
remembers, per path, the file's hash with its size, mtime, ctime, inode and device (git's
index does the same), and trusts it only while they are unchanged and the file was last
changed well before it was hashed (a write within the file system's timestamp granularity
would not change them); otherwise the file is hashed again and looked up by its bytes. A
path never seen is built at once (its bytes are hashed in the background, for the entry). The
code's digest is remembered the same way, by its source files' stat (code.json; code_digest()).

Safety: an entry is one file `<key>.ppc`, its name made of the key only, so nothing outside
the directory is read; it holds a magic string, the length and SHA-256 of a JSON header,
the header, then the weight bytes. The header is decoded by a fixed schema (JSON, no
pickle: no code runs from a cache file), names its own key, the exact size of the weight
block and, per array, a dtype from a fixed list, a shape and an offset checked to lie in
the block; the block's XXH3-128 hashes (the xxhash package), one per 64 MiB part, are
checked when it is mapped, the parts on up to 4 threads (xxhash releases the GIL): 0.017 s
for VGG16's 553 MB on 2 cores, 0.03 s as one hash (format 2), where zlib's CRC-32
(format 1) took 0.16-0.3 s of its warm first result. A missing, truncated, corrupted, crafted or mismatched entry is logged
and rebuilt from the model, never used.
Entries are written by one background thread at the lowest priority after the Predictor is built (to a temporary
file, then renamed: readers see a whole entry or none); the interpreter waits for it at
exit. Models with external data files (ONNX "External Tensor Data") and models given as
bytes, a ModelProto or a Caffe pair are not cached.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import logging
import mmap
import os
import platform
import queue
import struct
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from ..errors import InputError
from ..ir import Graph, Node, Subgraph, Value, readonly
from ..ops.cpu.compiled import isa
from ..passes.manager import PassReport, PassResult

__all__ = ["ModelCache", "resolve_dir", "code_digest", "FORMAT"]

log = logging.getLogger("pooled_predictor.model_cache")

FORMAT = 3  # 2: the weight block's XXH3-128 in place of its CRC-32; 3: one XXH3-128 per 64 MiB part
DEFAULT_MAX_BYTES = 4 << 30  # the entries kept, in bytes (POOLED_PREDICTOR_CACHE_MAX_BYTES)
MAGIC = b"PPMODEL\x01"
_ALIGN = 64
_PREFIX = struct.Struct("<8sQ32s")  # magic, header length, SHA-256 of the header
_RACY_NS = 100_000_000  # a file modified this close to its hashing is hashed again (timestamp granularity)
_COARSE_RACY_NS = 2_000_000_000  # ... on file systems with whole-second timestamps
_PART_BYTES = 64 << 20  # the weight block is hashed in parts of this size, checked on up to _HASH_THREADS threads
_HASH_THREADS = 4
_DTYPES = ("bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16", "float32",
           "float64", "complex64", "complex128")
_ML_DTYPES = ("bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "int4", "uint4",
              "float4_e2m1fn")


def _part_count(nbytes: int) -> int:
    return max(1, -(-nbytes // _PART_BYTES))


def part_digests(data: np.ndarray) -> list[str]:
    """The XXH3-128 hex digests of `data` (a 1-D uint8 array) in consecutive parts of _PART_BYTES (one part,
    empty, for no bytes), the parts hashed on up to _HASH_THREADS threads."""
    parts = [data[i * _PART_BYTES:(i + 1) * _PART_BYTES] for i in range(_part_count(data.nbytes))]
    out = [None] * len(parts)
    workers = min(len(parts), _HASH_THREADS, os.cpu_count() or 1)

    def run(k):
        for i in range(k, len(parts), workers):
            out[i] = xxhash.xxh3_128_hexdigest(parts[i])

    threads = [threading.Thread(target=run, args=(k,), daemon=True) for k in range(1, workers)]
    for t in threads:
        t.start()
    run(0)
    for t in threads:
        t.join()
    return out


class _PartHasher:
    """XXH3-128 of a byte stream in parts of _PART_BYTES, fed piece by piece: the digests part_digests()
    gives for the whole stream."""

    def __init__(self):
        self._hash, self._filled, self._done = xxhash.xxh3_128(), 0, []

    def update(self, raw) -> None:
        raw = memoryview(raw).cast("B")
        while len(raw):
            take = min(len(raw), _PART_BYTES - self._filled)
            self._hash.update(raw[:take])
            self._filled += take
            raw = raw[take:]
            if self._filled == _PART_BYTES:
                self._done.append(self._hash.hexdigest())
                self._hash, self._filled = xxhash.xxh3_128(), 0

    def hexdigests(self) -> list[str]:
        return self._done + [self._hash.hexdigest()] if self._filled or not self._done else list(self._done)


class Unsupported(Exception):
    """The graph holds something the cache format does not store: the model is simply not cached."""


class BadEntry(Exception):
    """A cache file that is not a whole, matching entry: it is rebuilt."""


def resolve_dir(option=None) -> Path | None:
    """The cache directory for a Predictor's `cache_dir` option (None: the default, see the module docstring).

    Returns:
        the directory, or None when the cache is off.
    Raises:
        InputError: an option that is not None, True, False, a str or an os.PathLike naming a str path.
    """
    if option is False:
        return None
    if option is not None and option is not True:
        if not isinstance(option, (str, os.PathLike)) or not isinstance(os.fspath(option), str):
            raise InputError(f"cache_dir must be a directory path (str or os.PathLike), None, True or False, "
                             f"not {type(option).__name__}")
        return Path(os.fspath(option))
    env = os.environ.get("POOLED_PREDICTOR_CACHE_DIR")
    if env is not None:
        return None if env.strip().lower() in ("", "0", "off", "false", "none") else Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pooled-predictor" / "models"


_code_digest: str | None = None


def code_digest(memo_dir: Path | None = None) -> str:
    """SHA-256 of this package's Python sources and of the Python, numpy and onnx versions (computed once
    a process).

    With `memo_dir` (the cache directory), the digest is remembered in `memo_dir/code.json` with every
    source file's stat (size, mtime, ctime, inode) and trusted while they are all unchanged and were
    last changed well before the hashing (the rule of the model files' digests, above): a start then
    stats the 200-odd files (1-2 ms) instead of reading and hashing them (10 ms CPU, 30 ms on a busy
    machine; issue 31). An edited, touched or replaced file, or other versions, hash the sources again,
    which give the same digest when the bytes are the same: the entries are found again.
    """
    global _code_digest
    if _code_digest is None:
        import onnx

        versions = f"{sys.version}|{np.__version__}|{onnx.__version__}|{FORMAT}"
        root = str(Path(__file__).resolve().parents[1])  # the package
        sources = []  # (path relative to root, path); os.path, not pathlib: 3x less time
        for dirpath, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            rel = os.path.relpath(dirpath, root)
            sources += [(name if rel == "." else os.path.join(rel, name), os.path.join(dirpath, name))
                        for name in sorted(files) if name.endswith(".py")]
        memo_path = None if memo_dir is None else Path(memo_dir) / "code.json"
        try:
            stats = [[rel] + ModelCache._stat(os.stat(path)) for rel, path in sources]
        except OSError:  # a file gone while listed: no memo
            stats, memo_path = None, None
        digest = _remembered_code_digest(memo_path, root, versions, stats)
        if digest is None:
            hashed_at = time.time_ns()
            h = hashlib.sha256(versions.encode())
            for rel, path in sources:
                h.update(rel.encode() + b"\0")
                with open(path, "rb") as f:
                    h.update(f.read())
            digest = h.hexdigest()
            if memo_path is not None:
                memo = {"root": str(root), "versions": versions, "stats": stats, "sha256": digest,
                        "hashed_at_ns": hashed_at}
                try:
                    ModelCache(memo_path.parent)._write_atomic(memo_path, json.dumps(memo).encode())
                except OSError as exc:
                    log.info("model cache: the code digest is not remembered (%s)", exc)
        _code_digest = digest
    return _code_digest


def _remembered_code_digest(memo_path: Path | None, root: str, versions: str, stats) -> str | None:
    """The digest remembered in `memo_path` for these sources, when every stat matches and none was racy."""
    if memo_path is None:
        return None
    try:
        memo = json.loads(memo_path.read_text())
    except (OSError, ValueError):
        return None
    if type(memo) is not dict or memo.get("root") != root or memo.get("versions") != versions \
            or memo.get("stats") != stats:
        return None
    digest, hashed_at = memo.get("sha256"), memo.get("hashed_at_ns")
    if type(digest) is not str or len(digest) != 64 or type(hashed_at) is not int:
        return None
    for _, _, mtime, ctime, _, _ in stats:
        racy = _COARSE_RACY_NS if mtime % 1_000_000_000 == 0 else _RACY_NS
        if mtime + racy > hashed_at or ctime + racy > hashed_at:
            return None  # changed within the timestamps' granularity of the hashing: no proof of the bytes
    return digest


def cpu_id() -> str:
    return f"{platform.machine()}|{isa.DETECTED}|{isa.ISA}|{isa.lanes()}"


# ---- the Graph as JSON plus one block of array bytes --------------------------------------------
class _Encoder:
    def __init__(self):
        self.arrays: list[np.ndarray] = []
        self._index: dict[int, int] = {}

    def array(self, a: np.ndarray) -> int:
        i = self._index.get(id(a))
        if i is None:
            if a.dtype.name not in _DTYPES + _ML_DTYPES or a.dtype.hasobject or not a.dtype.isnative:
                raise Unsupported(f"an array of dtype {a.dtype}")
            i = self._index[id(a)] = len(self.arrays)
            self.arrays.append(a)
        return i

    def value(self, v: Value) -> list:
        if type(v) is not Value:
            raise Unsupported(f"a value of type {type(v).__name__}")
        dtype = None if v.dtype is None else self.dtype(np.dtype(v.dtype))
        shape = None if v.shape is None else [self.dim(d) for d in v.shape]
        return [v.name, dtype, shape]

    @staticmethod
    def dtype(d: np.dtype) -> str:
        if d.name not in _DTYPES + _ML_DTYPES and d.name != "str" and d.kind not in "OSU":
            raise Unsupported(f"dtype {d}")
        return d.name if d.name in _DTYPES + _ML_DTYPES else d.str

    @staticmethod
    def dim(d):
        if d is None or isinstance(d, str) or (isinstance(d, int) and not isinstance(d, bool)):
            return d
        if isinstance(d, np.integer):
            return int(d)
        raise Unsupported(f"a dimension {d!r}")

    def attr(self, v) -> Any:
        if v is None or isinstance(v, (bool, str)):
            return v
        if isinstance(v, int):
            return v if type(v) is int else {"$": "int", "v": int(v)}
        if isinstance(v, float):
            return v if type(v) is float else {"$": "float", "v": float(v)}
        if isinstance(v, list) and type(v) is list:
            return [self.attr(x) for x in v]
        if type(v) is tuple:
            return {"$": "tuple", "v": [self.attr(x) for x in v]}
        if type(v) is dict:
            if not all(isinstance(k, str) for k in v):
                raise Unsupported("a dict attribute with keys other than str")
            return {"$": "dict", "v": [[k, self.attr(x)] for k, x in v.items()]}
        if isinstance(v, np.ndarray) and type(v) is np.ndarray:
            return {"$": "array", "i": self.array(v)}
        if isinstance(v, np.generic) and not isinstance(v, (np.object_, np.void)):
            return {"$": "scalar", "d": self.dtype(v.dtype), "i": self.array(np.asarray(v).reshape(1))}
        if isinstance(v, np.dtype):
            return {"$": "dtype", "d": self.dtype(v)}
        if type(v) is Subgraph:
            return {"$": "graph", "g": self.graph(v)}
        raise Unsupported(f"an attribute of type {type(v).__name__}")

    def graph(self, g: Graph) -> dict:
        expected = set(Graph.__dataclass_fields__) | ({"captures"} if type(g) is Subgraph else set())
        extra = set(vars(g)) - expected - {"_programs"}
        if extra:
            raise Unsupported(f"graph attributes {sorted(extra)}")
        nodes = []
        for n in g.nodes:
            if type(n) is not Node or set(vars(n)) != set(Node.__dataclass_fields__):
                raise Unsupported(f"a node of type {type(n).__name__}")
            nodes.append([n.op_type, list(n.inputs), list(n.outputs), self.attr(dict(n.attrs)), n.domain, n.name])
        out = {"nodes": nodes, "inputs": [self.value(v) for v in g.inputs],
               "outputs": [self.value(v) for v in g.outputs],
               "weights": [[k, self.array(a)] for k, a in g.weights.items()],
               "value_info": [[k, self.value(v)] for k, v in g.value_info.items()],
               "opset": [[k, int(v)] for k, v in g.opset.items()],
               "metadata": [[str(k), str(v)] for k, v in g.metadata.items()],
               "name": str(g.name), "source": str(g.source)}
        if type(g) is Subgraph:
            out["captures"] = list(g.captures)
        return out


class _Decoder:
    """Rebuilds what _Encoder wrote, checking every field's type; anything else raises BadEntry."""

    def __init__(self, arrays: list[np.ndarray]):
        self.arrays = arrays

    def array(self, i) -> np.ndarray:
        if type(i) is not int or not 0 <= i < len(self.arrays):
            raise BadEntry(f"array index {i!r}")
        return self.arrays[i]

    @staticmethod
    def _str(s, what="a name") -> str:
        if type(s) is not str:
            raise BadEntry(f"{what} that is not a string")
        return s

    def _strs(self, xs) -> list[str]:
        if type(xs) is not list:
            raise BadEntry("a list of names that is not a list")
        return [self._str(x) for x in xs]

    def _pairs(self, xs) -> list:
        if type(xs) is not list or not all(type(p) is list and len(p) == 2 for p in xs):
            raise BadEntry("a table that is not a list of pairs")
        return xs

    @staticmethod
    def dtype(name) -> np.dtype:
        if name in _DTYPES:
            return np.dtype(name)
        if name in _ML_DTYPES:
            import ml_dtypes

            return np.dtype(getattr(ml_dtypes, name))
        if type(name) is str and len(name) < 16 and name[:1] in "<>|=" and name[1:2] in "OSU":
            try:
                return np.dtype(name)
            except TypeError as exc:
                raise BadEntry(f"dtype {name!r}") from exc
        raise BadEntry(f"dtype {name!r}")

    def value(self, v) -> Value:
        if type(v) is not list or len(v) != 3:
            raise BadEntry("a value that is not [name, dtype, shape]")
        name, dtype, shape = v
        if shape is not None:
            if type(shape) is not list or not all(d is None or type(d) in (int, str) for d in shape):
                raise BadEntry(f"value {name!r}: a shape {shape!r}")
            shape = tuple(shape)
        return Value(self._str(name), None if dtype is None else self.dtype(dtype), shape)

    def attr(self, v) -> Any:
        if v is None or type(v) in (bool, int, float, str):
            return v
        if type(v) is list:
            return [self.attr(x) for x in v]
        if type(v) is not dict:
            raise BadEntry(f"an attribute of JSON type {type(v).__name__}")
        tag = v.get("$")
        if tag == "int" and type(v.get("v")) is int:
            return v["v"]
        if tag == "float" and type(v.get("v")) in (int, float):
            return float(v["v"])
        if tag == "tuple" and type(v.get("v")) is list:
            return tuple(self.attr(x) for x in v["v"])
        if tag == "dict":
            return {self._str(k, "a key"): self.attr(x) for k, x in self._pairs(v.get("v"))}
        if tag == "array":
            return self.array(v.get("i"))
        if tag == "scalar":
            a = self.array(v.get("i"))
            if a.shape != (1,) or a.dtype != self.dtype(v.get("d")):
                raise BadEntry("a scalar attribute whose array does not match")
            return a[0]
        if tag == "dtype":
            return self.dtype(v.get("d"))
        if tag == "graph":
            return self.graph(v.get("g"), Subgraph)
        raise BadEntry(f"an attribute tagged {tag!r}")

    def graph(self, d, cls=Graph) -> Graph:
        if type(d) is not dict:
            raise BadEntry("a graph that is not an object")
        try:
            nodes = []
            for n in d["nodes"]:
                if type(n) is not list or len(n) != 6:
                    raise BadEntry("a node that is not [op_type, inputs, outputs, attrs, domain, name]")
                attrs = self.attr(n[3])
                if type(attrs) is not dict:
                    raise BadEntry("node attributes that are not a dict")
                nodes.append(Node(self._str(n[0]), self._strs(n[1]), self._strs(n[2]), attrs, self._str(n[4]),
                                  self._str(n[5])))
            opset = {}
            for k, v in self._pairs(d["opset"]):
                if type(v) is not int:
                    raise BadEntry("an opset version that is not an int")
                opset[self._str(k)] = v
            g = cls(nodes=nodes, inputs=[self.value(v) for v in d["inputs"]],
                    outputs=[self.value(v) for v in d["outputs"]],
                    weights={self._str(k): self.array(i) for k, i in self._pairs(d["weights"])},
                    value_info={self._str(k): self.value(v) for k, v in self._pairs(d["value_info"])},
                    opset=opset, metadata={self._str(k): self._str(v) for k, v in self._pairs(d["metadata"])},
                    name=self._str(d["name"]), source=self._str(d["source"]))
            if cls is Subgraph:
                g.captures = tuple(self._strs(d["captures"]))
        except (KeyError, TypeError) as exc:
            raise BadEntry(f"a graph without its fields: {exc}") from exc
        return g


def _report_to_json(report) -> Any:
    if report is None:
        return None
    return {"level": report.level, "before": dict(report.before), "after": dict(report.after),
            "passes": [[p.name, p.level, dict(p.before), dict(p.after), dict(p.changes), list(p.notes), p.seconds]
                       for p in report.passes]}


def _report_from_json(d):
    if d is None:
        return None

    def counts(c) -> Counter:
        if type(c) is not dict or not all(type(v) is int for v in c.values()):
            raise BadEntry("op counts that are not {op: int}")
        return Counter(c)

    try:
        passes = []
        for name, level, before, after, changes, notes, seconds in d["passes"]:
            if not (type(name) is str and type(level) is str and type(changes) is dict and type(notes) is list
                    and all(type(x) is str for x in notes) and type(seconds) in (int, float)):
                raise BadEntry("a pass result of the wrong types")
            passes.append(PassResult(name, level, counts(before), counts(after), dict(counts(changes)),
                                     list(notes), float(seconds)))
        if type(d["level"]) is not str:
            raise BadEntry("a report level that is not a string")
        return PassReport(d["level"], passes, counts(d["before"]), counts(d["after"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise BadEntry(f"a pass report without its fields: {exc}") from exc


# ---- the cache ----------------------------------------------------------------------------------
class ModelCache:
    """The entries in one directory (see the module docstring).

    Args:
        directory: where the entries live (created when the first is written).
    """

    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(os.fspath(directory))

    # -- the model file's hash, remembered by its stat ----------------------------------------------
    def _memo_path(self, path: str) -> Path:
        return self.directory / "files" / (hashlib.sha256(os.fsencode(path)).hexdigest()[:40] + ".json")

    @staticmethod
    def _stat(st: os.stat_result) -> list[int]:
        return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]

    def remembered_digest(self, path: str, st: os.stat_result) -> tuple[str | None, bool]:
        """(the SHA-256 remembered for this file while its stat is unchanged and was not racy, else None;
        whether the cache has seen a file at this path before)."""
        try:
            memo = json.loads(self._memo_path(path).read_text())
        except (OSError, ValueError):
            return None, False
        if type(memo) is not dict or memo.get("path") != path:
            return None, False
        digest, hashed_at = memo.get("sha256"), memo.get("hashed_at_ns")
        if memo.get("stat") != self._stat(st) or type(digest) is not str or len(digest) != 64 \
                or type(hashed_at) is not int:
            return None, True
        racy = _COARSE_RACY_NS if st.st_mtime_ns % 1_000_000_000 == 0 else _RACY_NS
        if st.st_mtime_ns + racy > hashed_at or st.st_ctime_ns + racy > hashed_at:
            return None, True  # changed within the timestamps' granularity of its hashing: no proof of the bytes
        return digest, True

    def remember_digest(self, path: str, st: os.stat_result, digest: str, hashed_at_ns: int) -> None:
        """Record `digest` for the file whose stat before its bytes were read was `st`."""
        memo = {"path": path, "stat": self._stat(st), "sha256": digest, "hashed_at_ns": hashed_at_ns}
        self._write_atomic(self._memo_path(path), json.dumps(memo).encode())

    # -- keys and entries ------------------------------------------------------------------------------
    @staticmethod
    def key(model_sha256: str, options: dict) -> str:
        """The entry's key: model bytes, code, CPU and the options (JSON-able) that shape the graph."""
        text = json.dumps({"model": model_sha256, "code": code_digest(), "cpu": cpu_id(), "options": options,
                           "format": FORMAT}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()

    def entry_path(self, key: str) -> Path:
        if len(key) != 64 or any(c not in "0123456789abcdef" for c in key):
            raise ValueError(f"not a cache key: {key!r}")
        return self.directory / f"{key}.ppc"

    def load(self, key: str):
        """(Graph, PassReport or None) of the entry `key`; None when there is none or it is bad (then removed)."""
        path = self.entry_path(key)
        try:
            f = open(path, "rb")
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("model cache: cannot open %s (%s): building the model", path, exc)
            return None
        try:
            with f:
                hit = self._read(f, key)
            try:
                os.utime(path)  # last used now: the eviction keeps the entries used last
            except OSError:
                pass
            return hit
        except (BadEntry, OSError, ValueError, UnicodeDecodeError, RecursionError, MemoryError) as exc:
            log.warning("model cache: %s is not a usable entry (%s: %s): building the model again",
                        path, type(exc).__name__, exc)
            try:
                path.unlink()
            except OSError:
                pass
            return None

    def _read(self, f, key: str):
        size = os.fstat(f.fileno()).st_size
        prefix = f.read(_PREFIX.size)
        if len(prefix) != _PREFIX.size:
            raise BadEntry("shorter than its prefix")
        magic, header_len, header_sha = _PREFIX.unpack(prefix)
        if magic != MAGIC:
            raise BadEntry("not a model cache file of this format")
        if header_len > size - _PREFIX.size:
            raise BadEntry("a header longer than the file")
        raw = f.read(header_len)
        if len(raw) != header_len or hashlib.sha256(raw).digest() != header_sha:
            raise BadEntry("a header that does not match its checksum")
        header = json.loads(raw)
        if type(header) is not dict or header.get("key") != key or header.get("format") != FORMAT:
            raise BadEntry("an entry of another key or format")
        data_offset, data_bytes, digest = header.get("data_offset"), header.get("data_bytes"), header.get("xxh3_128_parts")
        if not (type(data_offset) is int and type(data_bytes) is int
                and data_offset >= _PREFIX.size + header_len and data_offset % _ALIGN == 0
                and data_offset + data_bytes == size):
            raise BadEntry(f"a weight block that does not fill the file ({size} bytes)")
        if not (type(digest) is list and len(digest) == _part_count(data_bytes)
                and all(type(d) is str for d in digest)):
            raise BadEntry("no XXH3-128 hash for each part of the weight block")
        # The weights stay in the page cache and are mapped, not copied (reading 100 MB into fresh memory
        # took 50-500 ms here, mapping it 4 ms). Entries are replaced by rename, never truncated in place.
        if hasattr(mmap, "MAP_POPULATE"):
            mapped = mmap.mmap(f.fileno(), 0, flags=mmap.MAP_SHARED | mmap.MAP_POPULATE, prot=mmap.PROT_READ)
        else:
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        if len(mapped) != size:
            raise BadEntry("a file that changed size while it was opened")
        data = np.frombuffer(mapped, np.uint8, count=data_bytes, offset=data_offset) if data_bytes else \
            readonly(np.empty(0, np.uint8))
        if part_digests(data) != digest:
            raise BadEntry("a weight block that does not match its XXH3-128 hashes")
        arrays = []
        table = header.get("arrays")
        if type(table) is not list:
            raise BadEntry("no array table")
        for entry in table:
            if type(entry) is not list or len(entry) != 3:
                raise BadEntry("an array entry that is not [dtype, shape, offset]")
            if entry[0] not in _DTYPES + _ML_DTYPES:
                raise BadEntry(f"an array of dtype {entry[0]!r}")
            dtype, shape, offset = _Decoder.dtype(entry[0]), entry[1], entry[2]
            if type(shape) is not list or not all(type(d) is int and d >= 0 for d in shape) or type(offset) is not int:
                raise BadEntry(f"an array of shape {shape!r} at {offset!r}")
            nbytes = int(np.prod(shape, dtype=object)) * dtype.itemsize if shape else dtype.itemsize
            if dtype.hasobject or offset < 0 or offset % _ALIGN or offset + nbytes > data_bytes:
                raise BadEntry(f"an array of {nbytes} bytes at {offset} outside the {data_bytes}-byte block")
            arrays.append(readonly(data[offset:offset + nbytes].view(dtype).reshape(shape)))
        decoder = _Decoder(arrays)
        graph = decoder.graph(header.get("graph"))
        report = _report_from_json(header.get("report"))
        return graph, report

    def store(self, key: str, graph: Graph, report) -> Path | None:
        """Write the entry `key` (temporary file, then renamed). Returns its path; None when the graph holds
        something the format does not store."""
        enc = _Encoder()
        try:
            graph_json = enc.graph(graph)
        except Unsupported as exc:
            log.info("model cache: %s not cached: it holds %s", graph.source, exc)
            return None
        table, offset = [], 0
        for a in enc.arrays:
            table.append([_Encoder.dtype(a.dtype), [int(d) for d in a.shape], offset])
            offset += -(-max(a.nbytes, a.dtype.itemsize) // _ALIGN) * _ALIGN
        data_bytes = offset
        block_hash = _PartHasher()
        pieces = []
        for a, (_, _, off) in zip(enc.arrays, table):
            raw = np.ascontiguousarray(a).reshape(-1).view(np.uint8) if a.size else np.zeros(a.dtype.itemsize, np.uint8)
            pad = -(-raw.nbytes // _ALIGN) * _ALIGN - raw.nbytes
            pieces.append((raw, pad))
            block_hash.update(raw)
            if pad:
                block_hash.update(bytes(pad))
        header = {"format": FORMAT, "key": key, "graph": graph_json, "report": _report_to_json(report),
                  "arrays": table, "data_bytes": data_bytes, "xxh3_128_parts": block_hash.hexdigests(), "data_offset": 0,
                  "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        # the header names the weight block's offset, which depends on the header's own length
        for _ in range(3):
            raw_header = json.dumps(header, separators=(",", ":")).encode()
            offset = -(-(_PREFIX.size + len(raw_header)) // _ALIGN) * _ALIGN
            if header["data_offset"] == offset:
                break
            header["data_offset"] = offset
        raw_header = json.dumps(header, separators=(",", ":")).encode()
        data_offset = header["data_offset"]
        if -(-(_PREFIX.size + len(raw_header)) // _ALIGN) * _ALIGN > data_offset:
            raise RuntimeError("model cache: the header's length did not settle")
        path = self.entry_path(key)

        def write(f):
            f.write(_PREFIX.pack(MAGIC, len(raw_header), hashlib.sha256(raw_header).digest()))
            f.write(raw_header)
            f.write(bytes(data_offset - _PREFIX.size - len(raw_header)))
            for raw, pad in pieces:
                f.write(memoryview(raw))
                if pad:
                    f.write(bytes(pad))

        self._write_atomic(path, write)
        self._remove_stale_temporaries()
        self.evict(keep=path)
        return path

    def evict(self, max_bytes: int | None = None, keep: Path | None = None) -> list[Path]:
        """Remove the entries used longest ago until the rest take at most `max_bytes` (default
        POOLED_PREDICTOR_CACHE_MAX_BYTES, else 4 GiB); `keep` stays whatever its size. Returns the removed."""
        if max_bytes is None:
            try:
                max_bytes = int(os.environ.get("POOLED_PREDICTOR_CACHE_MAX_BYTES", DEFAULT_MAX_BYTES))
            except ValueError:
                max_bytes = DEFAULT_MAX_BYTES
        entries = []
        for p in self.directory.glob("*.ppc"):
            try:
                st = p.stat()
            except OSError:
                continue
            entries.append((p != keep, -st.st_mtime_ns, st.st_size, p))
        removed, total = [], 0
        for _, _, size, p in sorted(entries):
            total += size
            if total > max_bytes and p != keep:
                try:
                    p.unlink()
                    removed.append(p)
                    total -= size
                except OSError:
                    pass
        return removed

    def _remove_stale_temporaries(self, age_s: float = 3600.0) -> None:
        """Remove the temporary files of writers that died over an hour ago (killed mid-write)."""
        now = time.time()
        try:
            for p in self.directory.glob(".*.tmp"):
                try:
                    if now - p.stat().st_mtime > age_s:
                        p.unlink()
                except OSError:
                    pass
        except OSError:
            pass

    def _write_atomic(self, path: Path, content) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            with open(tmp, "wb") as f:
                if callable(content):
                    content(f)
                else:
                    f.write(content)
            os.replace(tmp, path)
        except BaseException:
            try:
                tmp.unlink()
            except OSError:
                pass
            raise


# ---- one Predictor's use of the cache -------------------------------------------------------------
class Pending:
    """A model that was not in the cache: its bytes as read, to build from and then to store."""

    def __init__(self, cache: ModelCache, path: str, stat: os.stat_result, read_at_ns: int, data: bytes,
                 options: dict):
        self.cache, self.path, self.stat, self.read_at_ns, self.data, self.options = \
            cache, path, stat, read_at_ns, data, options
        self.facts: dict = {}
        self.digest: str | None = None

    def store_later(self, graph: Graph, report) -> None:
        """Hash the bytes the model was built from and write its entry, in the background (not for a
        model with external data: its other files are not part of the key)."""
        if self.facts.get("external_data", True):
            self.data = None
            return

        def run():
            data, self.data = self.data, None
            digest = self.digest or hashlib.sha256(data).hexdigest()
            del data
            key = self.cache.key(digest, self.options)
            if not self.cache.entry_path(key).exists():
                self.cache.store(key, graph, report)
            self.cache.remember_digest(self.path, self.stat, digest, self.read_at_ns)

        store_later(run)


def lookup(model, directory: Path | None, options: dict):
    """The cache's answer for a Predictor's `model`: ((Graph, PassReport), None) on a hit, (None, Pending)
    on a miss (build from Pending.data, then Pending.store_later), (None, None) when the cache does not apply
    (off, not a path to a file, unreadable: the importer then reports the error)."""
    if directory is None or not isinstance(model, (str, os.PathLike)):
        return None, None
    path = os.path.abspath(os.fspath(model))
    try:
        st = os.stat(path)
        if not os.path.isfile(path):
            return None, None
    except OSError:
        return None, None
    cache = ModelCache(directory)
    code_digest(cache.directory)  # once a process; remembered there by the sources' stat
    digest, seen = cache.remembered_digest(path, st)
    if digest is not None:
        hit = cache.load(cache.key(digest, options))
        if hit is not None:
            return hit, None
    try:
        read_at = time.time_ns()
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None, None
    pending = Pending(cache, path, st, read_at, data, options)
    if digest is None and seen:
        # a file this path held before, changed or touched since (or hashed too soon after a write):
        # hashed now, and found again when its bytes are those of an entry
        pending.digest = hashlib.sha256(data).hexdigest()
        hit = cache.load(cache.key(pending.digest, options))
        if hit is not None:
            pending.data = None
            cache.remember_digest(path, st, pending.digest, read_at)
            return hit, None
    return None, pending


# ---- writing in the background ------------------------------------------------------------------
PENDING_WRITES = 16
"""Entries queued for the writer at most; a Predictor built while that many wait is not stored (each waiting
entry holds its model's bytes and Graph, and the interpreter waits for them at exit)."""
_queue: queue.Queue = queue.Queue(maxsize=PENDING_WRITES)
_writer: threading.Thread | None = None
_writer_lock = threading.Lock()


def store_later(fn) -> None:
    """Run fn() (an entry's hashing and writing) on the one writer thread, a daemon the interpreter waits for
    at exit, started on first use at the lowest priority. One thread for every entry: a process that loads
    models faster than a low-priority thread writes them queues the writes, not threads (the fuzz suite's
    children, loading thousands of models, ran out of threads with one each: "can't start new thread"). Where
    no thread can be started, or PENDING_WRITES entries wait already, the entry is not written (a cache that
    cannot be written is only slower)."""
    global _writer
    with _writer_lock:
        if _writer is None or not _writer.is_alive():
            t = threading.Thread(target=_write_entries, name="pooled-predictor-model-cache", daemon=True)
            try:
                t.start()
            except RuntimeError as exc:
                log.warning("model cache: an entry was not written: no writer thread: %s", exc)
                return
            _writer = t
        try:
            _queue.put_nowait(fn)
        except queue.Full:
            log.info("model cache: an entry was not written: %d entries wait to be written", PENDING_WRITES)


def _write_entries() -> None:
    try:  # Linux: this thread's own priority; the first forwards beside it keep the cores
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (AttributeError, OSError):
        pass
    while True:
        fn = _queue.get()
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 -- a cache that cannot be written is only slower
            log.warning("model cache: an entry was not written: %s: %s", type(exc).__name__, exc)
        finally:
            del fn
            _queue.task_done()


def wait_for_writes(timeout: float | None = None) -> None:
    """Wait for the entries queued to be written (at exit; tests), at most `timeout` seconds."""
    end = None if timeout is None else time.monotonic() + timeout
    with _queue.all_tasks_done:
        while _queue.unfinished_tasks:
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                return
            _queue.all_tasks_done.wait(left)


atexit.register(wait_for_writes, 120.0)
