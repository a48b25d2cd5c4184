"""Tiered execution (engine/tiering.py) and compile-on-first-use (ops/cpu/compiled/jit.py), issue 31.

The end-to-end cases run in fresh processes with an empty numba cache (NUMBA_CACHE_DIR in a
temporary directory), as a new machine would: the first forward runs the numpy reference
kernels, a background process compiles the layout's kernels, and the Net switches over;
a second process finds them in the cache.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from numba import types

from pooled_predictor.ops.cpu import compiled
from pooled_predictor.ops.cpu.compiled import jit

from tests.conftest import make_mlp, mlp_reference

ROOT = Path(__file__).resolve().parents[1]


# ---- compile on first use ------------------------------------------------------------

def _twice(x):
    return x * 2.0


def test_explicit_signatures_compile_on_first_call_only():
    fn = jit.njit(types.float64(types.float64), cache=False)(_twice)
    assert jit.pending() >= 1 and fn.signatures == []  # nothing compiled at definition
    assert fn(1.5) == 3.0
    assert fn.signatures == [(types.float64,)]  # exactly the explicit signature
    with pytest.raises(TypeError):  # compiling is disabled afterwards, as numba's eager form
        fn("a")


def test_a_caller_compiles_the_callee_at_its_explicit_signature():
    inner = jit.njit(types.float64(types.float64), cache=False)(_twice)
    outer = jit.njit(cache=False)(lambda x: inner(x) + 1.0)
    assert outer(1.0) == 3.0
    assert inner.signatures == [(types.float64,)]


def test_callees_are_read_from_the_source_without_compiling():
    """jit.callees: the explicit-signature functions a compile compiles first, through an inlined helper
    and a closure too; none compiled by asking; a compiled one is no longer listed."""
    f64 = types.float64(types.float64)
    leaf = jit.njit(f64, cache=False)(_twice)
    deeper = jit.njit(f64, cache=False)(lambda x: x + 3.0)
    helper = jit.njit(inline="always", cache=False)(lambda x: deeper(x) * 2.0)

    def make():
        via_closure = leaf

        def top(x):
            return via_closure(x) + helper(x)
        return top

    top = jit.njit(f64, cache=False)(make())
    found = jit.callees(top)
    assert sorted(map(id, found)) == sorted(map(id, [leaf, deeper]))
    assert leaf.signatures == [] and deeper.signatures == [] and top.signatures == []
    assert top(1.0) == 2.0 + 8.0
    assert jit.callees(top) == []  # compiled with it: nothing pending


def test_compile_worker_orders_callees_first():
    from pooled_predictor.engine import compile_worker
    from pooled_predictor.ops.cpu.compiled import nchwc_chain

    name = jit.name_of(nchwc_chain.pointwise_depthwise_nchwc)
    order = compile_worker.with_callees([name])
    assert order[-1] == name and len(order) == len(set(order))
    assert set(order[:-1]) == {jit.name_of(c) for c in jit.callees(nchwc_chain.pointwise_depthwise_nchwc)}


def test_bound_compiles_before_it_resolves():
    fn = jit.njit(types.float64(types.float64), cache=False)(_twice)
    call = compiled.bound(fn, 2.0)
    assert call() == 4.0 and fn.signatures == [(types.float64,)]


def test_a_failed_cache_save_keeps_the_compiled_function(monkeypatch, caplog):
    """numba adds a specialization before it writes it to its disk cache; a write that fails after a good
    compile ("no compiled object yet for <Library ...>", a full disk) must not fail the call."""
    from numba.core.caching import Cache

    def fail(self, sig, data):
        raise RuntimeError("no compiled object yet for <Library 'x'>")

    monkeypatch.setattr(Cache, "save_overload", fail)
    fn = jit.njit(types.float64(types.float64), cache=True)(_twice)
    with caplog.at_level("WARNING", logger=jit.__name__):
        assert fn(4.0) == 8.0
        assert compiled.bound(fn, 1.0)() == 2.0
    assert fn.signatures == [(types.float64,)]
    assert sum("could not save" in r.getMessage() for r in caplog.records) == 1


def test_a_failed_compile_still_raises(monkeypatch):
    """Only a failed save is forgiven: a compile that fails raises numba's error, as before."""
    fn = jit.njit(types.float64(types.float64), cache=False)(lambda x: undefined_name(x))  # noqa: F821
    with pytest.raises(Exception, match="undefined_name"):
        fn(1.0)


def test_cache_only_mode_refuses_to_compile():
    fn = jit.njit(types.float64(types.float64), cache=False)(_twice)
    with compiled.cache_only(), pytest.raises(compiled.NotCached, match="_twice"):
        fn(1.0)
    assert fn(1.0) == 2.0  # outside it, compiled as usual


def test_modes_are_per_thread_and_nest():
    import threading

    seen = {}
    with compiled.reference_kernels():
        assert not compiled.active()
        t = threading.Thread(target=lambda: seen.setdefault("other", compiled.active()))
        t.start()
        t.join()
    assert compiled.active() == compiled.ENABLED and seen["other"] == compiled.ENABLED
    with compiled.compile_inline():
        assert not compiled.tiered()


def test_a_graph_with_bodies_pickles_without_its_programs():
    """The compile process gets the Program's Graph: If/Loop bodies carry compiled Programs, not sent."""
    from onnx import TensorProto, helper

    from pooled_predictor import Predictor

    then = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2])])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2])])
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)], "g",
        [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    p = Predictor(model.SerializeToString())
    x = np.array([-1.0, 2.0], np.float32)
    assert p.forward({"c": np.array(True), "x": x})["y"].tolist() == [0.0, 2.0]
    copy = pickle.loads(pickle.dumps(p.program.graph))
    assert [n.op_type for n in copy.nodes] == ["If"]


# ---- tiers, end to end in fresh processes -------------------------------------------------

CHILD = textwrap.dedent(r"""
    import json, sys
    import numpy as np
    from pooled_predictor import Config, PooledPredictor, Predictor
    from pooled_predictor.engine.tiering import COMPILER

    # importing the package imports no kernel module, so not numba (issue 31: ~0.5 s of a warm start)
    at_import = sorted(m for m in sys.modules if m == "numba" or m.startswith("pooled_predictor.ops.cpu.compiled."))
    data = open(sys.argv[1], "rb").read()
    x = np.load(sys.argv[2])
    p = Predictor(data)
    report = {"first": p.forward({"x": x})["y"].tolist(), "first_tier": p.net().layout.tier, "at_import": at_import}
    report["finished"] = COMPILER.wait(300)
    report["compile_errors"] = [e for _, _, e in COMPILER.log if e]
    report["compiles"] = COMPILER.compiles
    report["after"] = p.forward({"x": x})["y"].tolist()
    report["after_tier"] = p.net().layout.tier
    with PooledPredictor(Config(model_bytes=[data], num_threads=2)) as pool:
        futures = [pool.forward({"x": x}) for _ in range(8)]
        report["pool"] = [f.result(timeout=60)["y"].tolist() for f in futures]
    print(json.dumps(report))
""")


def _child(tmp_path, cache: Path, model: bytes, x: np.ndarray, **env_extra) -> dict:
    (tmp_path / "m.onnx").write_bytes(model)
    np.save(tmp_path / "x.npy", x)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache), POOLED_PREDICTOR_TIERED="1",
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), **env_extra)
    done = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "m.onnx"), str(tmp_path / "x.npy")],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_cold_cache_serves_reference_kernels_then_switches_to_compiled(tmp_path):
    model = make_mlp(batch="N", features=64, hidden=128, classes=32)
    x = np.random.default_rng(1).standard_normal((16, 64)).astype(np.float32)
    ref = mlp_reference(model, x)
    cache = tmp_path / "numba-cache"
    cache.mkdir()

    log = tmp_path / "compile.jsonl"
    cold = _child(tmp_path, cache, model.SerializeToString(), x, POOLED_PREDICTOR_COMPILE_JOBS="2",
                  POOLED_PREDICTOR_COMPILE_LOG=str(log))
    assert cold["first_tier"] == "reference"  # nothing compiled before the first result
    assert cold["at_import"] == [f"pooled_predictor.ops.cpu.compiled.{m}" for m in ("codes", "isa", "tiers", "widths")]
    assert cold["finished"] and cold["compile_errors"] == [] and cold["compiles"] == 1
    assert cold["after_tier"] == "compiled"
    for key in ("first", "after"):
        np.testing.assert_allclose(np.array(cold[key], np.float32), ref, rtol=1e-5, atol=1e-6)
    for out in cold["pool"]:
        np.testing.assert_allclose(np.array(out, np.float32), ref, rtol=1e-5, atol=1e-6)
    assert any(cache.rglob("*.nbi"))  # the compile process filled the shared cache
    # its timing lines (engine/compile_worker.py): the job's phases in the process that ran it, and every
    # discovered function compiled by one process only (the helper, started before the discovery, takes turns)
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    phases = [x for x in lines if x["name"].startswith("<")]
    assert [x["name"] for x in phases] == ["<discover>", "<helpers>", "<run>"]
    assert len({x["pid"] for x in phases}) == 1
    compiled_names = [x["name"] for x in lines if not x["name"].startswith("<")]
    assert compiled_names and len(compiled_names) == len(set(compiled_names))
    assert all(x["end"] >= x["start"] and x["cpu"] >= 0 for x in lines)

    warm = _child(tmp_path, cache, model.SerializeToString(), x)
    # the kernels load from the cache the first process filled (in the background: the first
    # forward does not wait for the disk either); no compile process this time
    assert warm["finished"] and warm["compile_errors"] == [] and warm["compiles"] == 0
    assert warm["after_tier"] == "compiled"
    np.testing.assert_allclose(np.array(warm["first"], np.float32), ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.array(warm["after"], np.float32), ref, rtol=1e-5, atol=1e-6)


def test_an_unwritable_compile_log_does_not_stop_the_compile(tmp_path):
    """POOLED_PREDICTOR_COMPILE_LOG naming a path that cannot be written: the background compile still finishes
    and the Net switches to the compiled kernels (before, the compile process died on the log's open and the Net
    kept the reference kernels for good); the log is said to be off on stderr."""
    model = make_mlp(batch="N")
    x = np.random.default_rng(2).standard_normal((3, 16)).astype(np.float32)
    cache = tmp_path / "numba-cache"
    cache.mkdir()
    got = _child(tmp_path, cache, model.SerializeToString(), x,
                 POOLED_PREDICTOR_COMPILE_LOG=str(tmp_path / "no-such-dir" / "compile.jsonl"))
    assert got["finished"] and got["compile_errors"] == [] and got["after_tier"] == "compiled"
    np.testing.assert_allclose(np.array(got["after"], np.float32), mlp_reference(model, x), rtol=1e-5, atol=1e-6)


def test_after_a_warmup_new_shapes_take_the_compiled_kernels_at_once(monkeypatch):
    """Warm-up compiles inline; a later shape (the batcher's sizes) is then laid out compiled, not
    on the reference kernels while nothing needs loading."""
    from pooled_predictor import Predictor

    monkeypatch.setattr(compiled, "TIERED", True)
    p = Predictor(make_mlp(batch="N").SerializeToString())
    # batch 2, not 1: a one-row FusedGemm runs compiled/fc.py's product-and-activation call, other batches the
    # GEMM then the epilogue's activation pass, a kernel batch 1 never loads (that shape would rightly start
    # on the reference kernels while it loads)
    p.warmup({"x": (2, 16)})
    x = np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32)
    y = p.forward({"x": x})["y"]
    assert p.net().layout.tier == "compiled"
    np.testing.assert_allclose(y, mlp_reference(make_mlp(batch="N"), x), rtol=1e-5, atol=1e-6)


def test_a_net_laid_out_after_its_programs_compile_finished_takes_the_compiled_kernels(monkeypatch):
    """Another Net of the Program had its kernels loaded (the background job is finished) before this
    one lays out: it takes them at once, and never waits for a further job that would not come."""
    from pooled_predictor import Predictor
    from pooled_predictor.engine.tiering import COMPILER

    monkeypatch.setattr(compiled, "TIERED", True)
    p = Predictor(make_mlp(batch="N").SerializeToString())
    x = np.random.default_rng(2).standard_normal((3, 16)).astype(np.float32)
    first = p.new_net()
    first.forward({"x": x})
    assert first.layout.tier == "reference"  # the Program's first layout in this process
    assert COMPILER.wait(120)
    second = p.new_net()  # laid out now: the Program has still no compiled layout, its job is done
    y = second.forward({"x": x})["y"]
    assert second.layout.tier == "compiled"
    np.testing.assert_allclose(y, mlp_reference(make_mlp(batch="N"), x), rtol=1e-5, atol=1e-6)


def test_a_compile_process_imports_the_serving_process_package_whatever_its_working_directory(tmp_path):
    """`python -m` puts the working directory first on sys.path: from a directory holding another copy of
    the package (a checkout beside an installed one), the compile processes imported that copy and filled
    another cache directory, and the serving process never found its kernels (the background job failed
    with NotCached after its compile). worker_command() gives them this process's sys.path."""
    from pooled_predictor.engine.tiering import worker_command

    decoy = tmp_path / "pooled_predictor"
    decoy.mkdir()
    (decoy / "__init__.py").write_text("raise SystemExit(7)\n")
    (tmp_path / "locks").mkdir()
    plain = subprocess.run([sys.executable, "-m", "pooled_predictor.engine.compile_worker", "--share",
                            str(tmp_path / "locks")], cwd=tmp_path, input=b"", capture_output=True, timeout=120)
    assert plain.returncode == 7  # the decoy: what the old command line imported
    done = subprocess.run(worker_command("--share", str(tmp_path / "locks")), cwd=tmp_path, input=b"",
                          capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()  # the real worker: no names given, nothing to compile
