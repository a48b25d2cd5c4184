"""The on-disk model cache (pooled_predictor/serving/model_cache.py): found again only for the same model bytes,
code, CPU and options; a corrupted, truncated, crafted or mismatched entry is rebuilt, never used."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import struct
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pooled_predictor import Predictor
from pooled_predictor.serving import model_cache
from pooled_predictor.ir import Graph, Node, Subgraph, Value

from conftest import make_mlp

X = np.random.default_rng(1).standard_normal((3, 16)).astype(np.float32)


def _entries(d):
    return sorted(p for p in d.glob("*.ppc"))


def _build(path, cache, **kw):
    p = Predictor(str(path), cache_dir=cache, **kw)
    model_cache.wait_for_writes()
    return p


@pytest.fixture
def setup(tmp_path):
    model = tmp_path / "mlp.onnx"
    onnx.save(make_mlp(seed=3), model)
    past = time.time() - 10  # written well before it is hashed: its stat may be trusted
    os.utime(model, (past, past))
    cache = tmp_path / "cache"
    first = _build(model, cache)
    assert not first.cached and len(_entries(cache)) == 1
    return model, cache, first.forward({"x": X})["y"]


def _rewrite(entry, fn):
    raw = bytearray(entry.read_bytes())
    fn(raw)
    entry.write_bytes(bytes(raw))


def _header(entry):
    raw = entry.read_bytes()
    magic, n, _ = struct.unpack_from("<8sQ32s", raw)
    return raw, json.loads(raw[48:48 + n]), n


def _write_crafted(entry, header, raw, old_offset, deep=False):
    """The entry with `header` in place of its own and its checksum right (a crafted, not a damaged, file);
    with `deep`, the "@@" in it becomes JSON nested 100000 deep."""
    def encode():
        new = json.dumps(header, separators=(",", ":")).encode()
        return new.replace(b'"@@"', b"[" * 100000 + b"]" * 100000) if deep else new

    header["data_offset"] = -(-(48 + len(encode()) + 64) // 64) * 64  # room for the offset's own digits
    new = encode()
    assert 48 + len(new) <= header["data_offset"]
    entry.write_bytes(struct.pack("<8sQ32s", model_cache.MAGIC, len(new), hashlib.sha256(new).digest()) + new
                      + b"\0" * (header["data_offset"] - 48 - len(new)) + raw[old_offset:])


def test_a_second_predictor_of_the_file_reads_the_entry_and_computes_the_same(setup):
    model, cache, y = setup
    again = _build(model, cache)
    assert again.cached
    np.testing.assert_array_equal(again.forward({"x": X})["y"], y)
    assert again.graph.op_counts() == Predictor(str(model), cache_dir=False).graph.op_counts()
    assert all(not w.flags.writeable for w in again.graph.weights.values())
    assert again.optimization_report.summary() == Predictor(str(model), cache_dir=False).optimization_report.summary()
    assert again.imported_graph.op_counts()["MatMul"] == 2  # imported again on demand


def test_a_touch_or_a_copy_of_the_model_finds_the_entry(setup, tmp_path):
    model, cache, y = setup
    os.utime(model, None)  # a new mtime, the same bytes: hashed again, then found
    assert _build(model, cache).cached
    model.write_bytes(model.read_bytes())  # rewritten, the same bytes
    assert _build(model, cache).cached
    copy = tmp_path / "copy.onnx"  # a path never seen: built at once, hashed in the background ...
    copy.write_bytes(model.read_bytes())
    assert not _build(copy, cache).cached
    assert _build(copy, cache).cached  # ... and found from then on, in the one entry
    assert len(_entries(cache)) == 1


def test_a_changed_model_is_never_served_from_the_old_entry(setup):
    model, cache, y = setup
    # the same size, new weights, written now (within the timestamps' granularity of a hash): not trusted
    onnx.save(make_mlp(seed=4), model)
    p = _build(model, cache)
    expected = Predictor(onnx.load(model), cache_dir=False).forward({"x": X})["y"]
    np.testing.assert_array_equal(p.forward({"x": X})["y"], expected)
    assert not np.array_equal(expected, y)
    assert len(_entries(cache)) == 2


def test_options_code_and_cpu_are_part_of_the_key(setup, monkeypatch):
    model, cache, _ = setup
    assert not _build(model, cache, graph_optimization_level="basic").cached
    assert _build(model, cache, graph_optimization_level="basic").cached
    monkeypatch.setattr(model_cache, "_code_digest", "0" * 64)
    assert not _build(model, cache).cached
    monkeypatch.setattr(model_cache, "cpu_id", lambda: "another cpu")
    assert not _build(model, cache).cached


@pytest.mark.parametrize("damage", ["flip a header byte", "flip a weight byte", "truncate", "append", "empty",
                                    "not a cache file"])
def test_a_damaged_entry_is_rebuilt_not_used(setup, damage, caplog):
    model, cache, y = setup
    (entry,) = _entries(cache)
    raw, header, n = _header(entry)
    if damage == "flip a header byte":
        _rewrite(entry, lambda b: b.__setitem__(60, b[60] ^ 0x20))
    elif damage == "flip a weight byte":
        _rewrite(entry, lambda b: b.__setitem__(header["data_offset"] + 5, b[header["data_offset"] + 5] ^ 0x01))
    elif damage == "truncate":
        entry.write_bytes(raw[:len(raw) - 100])
    elif damage == "append":
        entry.write_bytes(raw + b"\0" * 64)
    elif damage == "empty":
        entry.write_bytes(b"")
    else:
        entry.write_bytes(b"PK\x03\x04" + raw[4:])
    with caplog.at_level(logging.WARNING, "pooled_predictor.model_cache"):
        p = _build(model, cache)
    assert not p.cached and "not a usable entry" in caplog.text
    np.testing.assert_array_equal(p.forward({"x": X})["y"], y)
    assert _build(model, cache).cached  # written again, whole


def test_the_weight_block_is_checked_part_by_part(tmp_path, monkeypatch, caplog):
    """Format 3: one XXH3-128 per part of the weight block (hashed on several threads); a flipped byte in
    any part, or a header with a hash missing, makes the entry rebuilt."""
    monkeypatch.setattr(model_cache, "_PART_BYTES", 256)
    model = tmp_path / "mlp.onnx"
    onnx.save(make_mlp(seed=3), model)
    past = time.time() - 10
    os.utime(model, (past, past))
    cache = tmp_path / "cache"
    y = _build(model, cache).forward({"x": X})["y"]
    (entry,) = _entries(cache)
    raw, header, _ = _header(entry)
    parts = header["xxh3_128_parts"]
    assert len(parts) == -(-header["data_bytes"] // 256) >= 3
    assert _build(model, cache).cached
    for where in (5, header["data_bytes"] - 3):  # the first part, the last
        _rewrite(entry, lambda b: b.__setitem__(header["data_offset"] + where, b[header["data_offset"] + where] ^ 1))
        with caplog.at_level(logging.WARNING, "pooled_predictor.model_cache"):
            p = _build(model, cache)
        assert not p.cached and "XXH3-128 hashes" in caplog.text
        np.testing.assert_array_equal(p.forward({"x": X})["y"], y)
        assert _build(model, cache).cached
        caplog.clear()
    raw, header, _ = _header(entry)
    header["xxh3_128_parts"] = header["xxh3_128_parts"][:-1]
    _write_crafted(entry, header, raw, header["data_offset"])
    with caplog.at_level(logging.WARNING, "pooled_predictor.model_cache"):
        assert not _build(model, cache).cached
    assert "no XXH3-128 hash for each part" in caplog.text


@pytest.mark.parametrize("nbytes", [0, 1, 255, 256, 257, 1000, 1024])
def test_part_digests_match_the_streamed_hashes(monkeypatch, nbytes):
    """The reader's parallel part hashes equal the writer's, fed in pieces that straddle the parts."""
    monkeypatch.setattr(model_cache, "_PART_BYTES", 256)
    data = np.random.default_rng(nbytes).integers(0, 256, nbytes, dtype=np.uint8)
    h = model_cache._PartHasher()
    cut = 0
    for step in (1, 100, 300, 7, 10 ** 6):
        h.update(data[cut:cut + step])
        cut += step
    assert h.hexdigests() == model_cache.part_digests(data)
    assert len(h.hexdigests()) == max(1, -(-nbytes // 256))


def test_an_entry_of_another_model_under_this_key_is_rebuilt(setup, tmp_path):
    model, cache, y = setup
    other = tmp_path / "other.onnx"
    onnx.save(make_mlp(seed=9), other)
    past = time.time() - 10
    os.utime(other, (past, past))
    _build(other, cache)
    mine, theirs = _entries(cache)
    if _header(mine)[1]["graph"]["source"] != str(model):
        mine, theirs = theirs, mine
    mine.write_bytes(theirs.read_bytes())  # a whole, valid entry, but of another key
    p = _build(model, cache)
    assert not p.cached
    np.testing.assert_array_equal(p.forward({"x": X})["y"], y)


@pytest.mark.parametrize("craft", ["offset past the block", "huge shape", "object dtype", "unknown tag",
                                   "array index out of range", "nested too deep", "negative offset"])
def test_a_crafted_entry_with_a_valid_checksum_is_rebuilt(setup, craft, caplog):
    model, cache, y = setup
    (entry,) = _entries(cache)
    raw, header, n = _header(entry)
    if craft == "offset past the block":
        header["arrays"][0][2] = header["data_bytes"] + 64 * 1000
    elif craft == "huge shape":
        header["arrays"][0][1] = [1 << 40, 1 << 40]
    elif craft == "object dtype":
        header["arrays"][0][0] = "|O"
    elif craft == "negative offset":
        header["arrays"][0][2] = -64
    elif craft == "array index out of range":
        header["graph"]["weights"][0][1] = 10 ** 6
    elif craft == "unknown tag":
        header["graph"]["nodes"][0][3] = {"$": "pickle", "v": "cos\nsystem\n(S'echo hi'\ntR."}
    else:  # JSON nested past any recursion limit, in place of the first node's attributes
        header["graph"]["nodes"][0][3] = "@@"
    _write_crafted(entry, header, raw, header["data_offset"], deep=craft == "nested too deep")
    with caplog.at_level(logging.WARNING, "pooled_predictor.model_cache"):
        p = _build(model, cache)
    assert not p.cached
    why = {"offset past the block": "outside the", "huge shape": "outside the", "negative offset": "outside the",
           "object dtype": "an array of dtype '|O'", "array index out of range": "array index",
           "unknown tag": "tagged 'pickle'", "nested too deep": "RecursionError"}[craft]
    assert why in caplog.text
    np.testing.assert_array_equal(p.forward({"x": X})["y"], y)


def test_a_crafted_memo_cannot_point_the_model_at_another_entry(setup, tmp_path):
    model, cache, y = setup
    other = tmp_path / "other.onnx"
    onnx.save(make_mlp(seed=9), other)
    _build(other, cache)
    (memo,) = [m for m in (cache / "files").glob("*.json") if json.loads(m.read_text())["path"] == str(model)]
    data = json.loads(memo.read_text())
    data["path"] = "/etc/passwd"  # a memo of another path is not this file's
    memo.write_text(json.dumps(data))
    p = _build(model, cache)
    np.testing.assert_array_equal(p.forward({"x": X})["y"], y)


def test_entry_names_come_from_the_key_only(tmp_path):
    c = model_cache.ModelCache(tmp_path)
    with pytest.raises(ValueError):
        c.entry_path("../../etc/passwd")
    assert c.entry_path("a" * 64).parent == tmp_path


def test_off_by_option_or_environment(tmp_path, monkeypatch):
    model = tmp_path / "mlp.onnx"
    onnx.save(make_mlp(), model)
    cache = tmp_path / "cache"
    _build(model, False)
    monkeypatch.setenv("POOLED_PREDICTOR_CACHE_DIR", str(cache))
    assert model_cache.resolve_dir() == cache
    monkeypatch.setenv("POOLED_PREDICTOR_CACHE_DIR", "off")
    assert model_cache.resolve_dir() is None
    _build(model, None)
    assert not cache.exists()
    monkeypatch.delenv("POOLED_PREDICTOR_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert model_cache.resolve_dir() == tmp_path / "xdg" / "pooled-predictor" / "models"


@pytest.mark.parametrize("bad", [123, b"cache", 1.5, ["dir"]])
def test_a_cache_dir_that_is_not_a_path_is_an_input_error(tmp_path, bad):
    from pooled_predictor.errors import InputError

    model = tmp_path / "mlp.onnx"
    onnx.save(make_mlp(), model)
    with pytest.raises(InputError, match="cache_dir"):
        Predictor(str(model), cache_dir=bad)


def test_a_model_with_external_data_is_not_cached(tmp_path):
    m = make_mlp()
    onnx.save(m, tmp_path / "ext.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
              location="ext.bin", size_threshold=0)
    cache = tmp_path / "cache"
    p = _build(tmp_path / "ext.onnx", cache)
    assert not p.cached and not _entries(cache)


def test_graphs_with_bodies_and_every_attribute_kind_round_trip(tmp_path):
    body = Subgraph(nodes=[Node("Identity", ["a"], ["b"], {}, "", "id")],
                    inputs=[Value("a", np.dtype("float32"), (2,))],
                    outputs=[Value("b", np.dtype("float32"), (2,))], weights={"k": np.arange(3, dtype=np.int64)},
                    name="body")
    body.captures = ("outer",)
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    attrs = {"i": 3, "f": 0.5, "s": "text", "ints": [1, 2], "floats": [1.0, 2.5], "t": (1, "a"), "d": {"k": [1]},
             "arr": np.ones((2, 2), np.float16), "scalar": np.float32(1.5), "np_int": np.int64(7),
             "dtype": np.dtype("int8"), "nan": float("nan"), "none": None, "flag": True, "then_branch": body,
             "empty": np.zeros((0, 4), np.float32), "zero_d": np.array(2.0)}
    g = Graph(nodes=[Node("If", ["c", "outer"], ["y"], attrs, "", "if")],
              inputs=[Value("c", np.dtype("bool"), ()), Value("n", None, ("N", None))],
              outputs=[Value("y", np.dtype("float32"), None)], weights={"w": w, "w_again": w},
              value_info={"v": Value("v", np.dtype("int64"), (1, "M"))}, opset={"": 17, "com.microsoft": 1},
              metadata={"author": "me"}, name="g", source="model.onnx")
    c = model_cache.ModelCache(tmp_path)
    key = "b" * 64
    c.store(key, g, None)
    got, report = c.load(key)
    assert report is None
    a = got.nodes[0].attrs
    for k in ("i", "f", "s", "ints", "floats", "t", "d", "none", "flag"):
        assert a[k] == attrs[k] and type(a[k]) is type(attrs[k]), k
    assert np.isnan(a["nan"]) and a["dtype"] == np.dtype("int8")
    assert a["scalar"] == np.float32(1.5) and a["scalar"].dtype == np.float32 and a["np_int"] == 7
    for k in ("arr", "empty", "zero_d"):
        np.testing.assert_array_equal(a[k], attrs[k])
        assert a[k].dtype == attrs[k].dtype and a[k].shape == attrs[k].shape
    sub = a["then_branch"]
    assert type(sub) is Subgraph and sub.captures == ("outer",) and sub.nodes[0].op_type == "Identity"
    np.testing.assert_array_equal(sub.weights["k"], [0, 1, 2])
    np.testing.assert_array_equal(got.weights["w"], w)
    assert got.weights["w"] is got.weights["w_again"] and not got.weights["w"].flags.writeable
    assert got.weights["w"].ctypes.data % 64 == 0
    assert got.inputs[1].shape == ("N", None) and got.inputs[0].shape == () and got.outputs[0].shape is None
    assert got.value_info["v"].shape == (1, "M") and got.opset == g.opset and got.metadata == g.metadata


def test_a_graph_the_format_does_not_hold_is_left_uncached(tmp_path):
    g = Graph(nodes=[Node("Custom", ["x"], ["y"], {"fn": print}, "", "n")], inputs=[Value("x")],
              outputs=[Value("y")])
    assert model_cache.ModelCache(tmp_path).store("c" * 64, g, None) is None
    assert not list(tmp_path.iterdir())


def test_an_unpicklable_string_tensor_model_still_builds(tmp_path):
    """A model whose graph keeps a string weight is built, only not cached."""
    t = numpy_helper.from_array(np.array(["a", "b"], dtype=object), "labels")
    g = helper.make_graph([helper.make_node("Identity", ["labels"], ["y"])], "g", [],
                          [helper.make_tensor_value_info("y", TensorProto.STRING, [2])], [t])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(m, tmp_path / "s.onnx")
    p = _build(tmp_path / "s.onnx", tmp_path / "cache")
    assert not p.cached and not _entries(tmp_path / "cache")
    assert any(w.dtype == object for w in p.graph.weights.values())


def test_the_entries_used_longest_ago_go_first_past_the_size_limit(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    paths = []
    for seed in range(3):
        path = tmp_path / f"m{seed}.onnx"
        onnx.save(make_mlp(seed=seed), path)
        paths.append(path)
        _build(path, cache)
    sizes = {p: p.stat().st_size for p in _entries(cache)}
    assert len(sizes) == 3
    old = time.time() - 100
    for i, p in enumerate(sorted(sizes, key=lambda p: p.stat().st_mtime_ns)):
        os.utime(p, (old + i, old + i))  # written in order m0, m1, m2
    assert _build(paths[0], cache).cached  # m0 used now: the newest
    # room for two entries, not three; the slack covers an entry a few bytes longer than the others
    # (its pass report holds each pass's seconds as JSON text), which had evicted m0 too in one CI run
    limit = 2 * max(sizes.values()) + min(sizes.values()) // 4
    assert limit < 3 * min(sizes.values())
    monkeypatch.setenv("POOLED_PREDICTOR_CACHE_MAX_BYTES", str(limit))
    onnx.save(make_mlp(seed=7), tmp_path / "m7.onnx")
    _build(tmp_path / "m7.onnx", cache)  # a fourth entry: the two used longest ago (m1, m2) go
    assert len(_entries(cache)) == 2
    assert _build(paths[0], cache).cached and not _build(paths[1], cache).cached


def test_the_code_digest_is_remembered_by_the_sources_stat(tmp_path, monkeypatch):
    """Issue 31: a start stats the package's sources instead of hashing them, while the remembered stats
    all match and none was changed near the hashing; any other memo is ignored and the sources hashed."""
    monkeypatch.setattr(model_cache, "_code_digest", None)
    true = model_cache.code_digest()  # hashed, no memo
    memo_path = tmp_path / "code.json"

    def fresh(memo=None):
        if memo is not None:
            memo_path.write_text(json.dumps(memo))
        monkeypatch.setattr(model_cache, "_code_digest", None)
        return model_cache.code_digest(tmp_path)

    assert fresh() == true and memo_path.exists()  # hashed, then remembered
    memo = json.loads(memo_path.read_text())
    assert memo["sha256"] == true and len(memo["stats"]) > 100
    planted = dict(memo, sha256="f" * 64)
    assert fresh(planted) == "f" * 64  # trusted: every stat unchanged, hashed well after the last change
    size_changed = json.loads(json.dumps(planted))
    size_changed["stats"][0][1] += 1
    assert fresh(size_changed) == true  # a file of another size: hashed again
    assert fresh(dict(planted, versions="another numpy")) == true
    assert fresh(dict(planted, root="/elsewhere")) == true
    newest = max(max(s[2], s[3]) for s in planted["stats"])
    assert fresh(dict(planted, hashed_at_ns=newest + 1000)) == true  # racy: changed within the granularity
    memo_path.write_text("not json")
    assert fresh() == true
    assert json.loads(memo_path.read_text())["sha256"] == true  # rewritten


def test_one_writer_thread_and_a_bounded_queue():
    """Found by tests/fuzz: a process building thousands of Predictors started a writer thread for each
    entry, faster than the low-priority threads finished, until "can't start new thread" failed a load; then,
    with one thread, thousands of queued entries (each holding its model's bytes and Graph) kept the
    interpreter at exit. Now one writer thread and at most PENDING_WRITES entries waiting: the others are not
    stored, and nothing fails."""
    import threading

    model_cache.wait_for_writes(30)
    gate, ran = threading.Event(), []

    def slow(i):
        gate.wait(10)
        ran.append(i)

    for i in range(3 * model_cache.PENDING_WRITES):
        model_cache.store_later(lambda i=i: slow(i))
    writers = [t for t in threading.enumerate() if t.name == "pooled-predictor-model-cache"]
    assert len(writers) == 1
    gate.set()
    model_cache.wait_for_writes(30)
    assert ran == sorted(ran) and ran[0] == 0
    assert len(ran) <= model_cache.PENDING_WRITES + 1
