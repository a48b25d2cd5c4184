"""The `pooled-predictor` command (also `python -m pooled_predictor`).

    pooled-predictor demo [--threads N] [--image PAGE.png] [--device cpu|cuda]
    pooled-predictor faces [IMAGE] [-o boxes.png] [--threshold 0.5] [--threads N]
    pooled-predictor run MODEL.onnx [--input x.npy|x.npz] [--save-outputs out.npz]
                         [--threads N] [--requests R] [--shape NAME=1x3x224x224] [--dim NAME=V]
    pooled-predictor ops [--device cpu|cuda]
    pooled-predictor zoo NAME -o FILE.onnx [--seed S] [--opset V] [--batch N]
    pooled-predictor inspect MODEL.onnx [--level all] [--input-shapes x:1x3x224x224] [--disable PASS]
    pooled-predictor warmup [MODEL.onnx ...] [--shape NAME=1x3x224x224]
    pooled-predictor profile MODEL.onnx [--shape NAME=1x3x224x224] [--dim NAME=V] [--runs N] [--trace trace.json]

`COMMAND -h` describes every option. `profile` refuses inputs with symbolic or unknown dimensions
that --shape/--dim leave unset (it names them); `run` and `warmup` take them as 1. Output cut
by a closed pipe ends quietly (exit status 141, see main).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from importlib.metadata import version

import numpy as np

from .apps.faces import detect_faces, draw_faces
from .apps.ocr import PAGE_TEXT, character_error_rate, load_image, read_page
from .engine.device import get_device
from .errors import PooledPredictorError
from .ops import int8_arithmetic
from .ops.cpu import compiled
from .ops.cpu.compiled import compile_inline, load_all
from .ops.registry import registered_ops
from .passes import inspect, parse_input_shapes
from .serving.pool import Config, PooledPredictor
from .serving.predictor import Predictor
from .zoo import (ZOO, build, fetch_astronaut_image, fetch_page_image, fetch_ppocr, fetch_res10_face_detector,
                  profile)
from .zoo.fetch import downloads


def _cmd_demo(args) -> int:
    start = time.perf_counter()
    get_device(args.device)  # no GPU where one is asked for: the typed error now, before any download
    before = len(downloads())
    models = fetch_ppocr()
    page = args.image or fetch_page_image()
    fetched = time.perf_counter() - start
    how = "downloaded" if len(downloads()) > before else "cached"
    image = load_image(page)
    t1 = time.perf_counter()
    config = Config(model_paths=[models.det, models.rec], num_threads=args.threads, device=args.device)
    with PooledPredictor(config) as pool:
        loaded = time.perf_counter() - t1
        result = read_page(pool, image)
        if args.repeat > 1:  # steady state: Nets already laid out for these shapes
            for _ in range(args.repeat - 1):
                result = read_page(pool, image)
    total = time.perf_counter() - start
    print(f"# {page} ({image.shape[1]}x{image.shape[0]}), PP-OCRv6 tiny det (net 0) + rec (net 1), "
          f"{args.threads} worker thread(s) on {args.device}\n")
    print(result.text)
    print()
    runs = f"{args.repeat} run{'s' if args.repeat > 1 else ''}"
    rows = [(f"fetch models + page ({how})", fetched), ("load both models (import, passes, Program)", loaded)]
    rows += [(stage, ms / 1e3) for stage, ms in result.timings_ms.items()]
    rows.append((f"total wall time of the command (fetch, load, {runs}, close)", total))
    width = max(len(label) for label, _ in rows)
    if args.repeat == 1:
        print("(the page's first run in this process: its pool jobs lay out the Nets and, with kernels not in "
              "memory yet, run the numpy reference kernels while the compiled ones load or compile in the "
              "background; --repeat N times the steady state)")
    else:
        print(f"(the page's stages: the last of {runs})")
    for label, seconds in rows:
        print(f"{label:<{width}}  {seconds * 1e3:9.1f} ms")
    print(f"{'lines':<{width}}  {len(result.lines):9d}")
    if args.image is None:
        cer = character_error_rate(result.text, PAGE_TEXT)
        print(f"{'character error rate vs the page':<{width}}  {cer * 100:8.2f} %")
    return 0


def _cmd_faces(args) -> int:
    model = fetch_res10_face_detector()
    path = args.image or fetch_astronaut_image()
    image = load_image(path)
    config = Config(model_paths=[(model.prototxt, model.caffemodel)], num_threads=args.threads)
    t0 = time.perf_counter()
    with PooledPredictor(config) as pool:
        faces = detect_faces(pool, image, threshold=args.threshold).result()
    ms = (time.perf_counter() - t0) * 1e3
    print(f"# {path} ({image.shape[1]}x{image.shape[0]}), res10 300x300 SSD (Caffe), "
          f"{len(faces)} face(s) with score >= {args.threshold} ({ms:.0f} ms with load)")
    for f in faces:
        print(f"score {f.score:.4f}  box x0={f.x0:.1f} y0={f.y0:.1f} x1={f.x1:.1f} y1={f.y1:.1f}")
    if args.output:
        draw_faces(image, faces, args.output)
        print(f"wrote {args.output}")
    return 0


def _parse_shapes(items) -> dict:
    out = {}
    for item in items or ():
        name, _, dims = item.rpartition("=")
        if not name:
            raise SystemExit(f"--shape expects NAME=D1xD2x..., got {item!r}")
        out[name] = tuple(int(d) for d in dims.lower().split("x") if d)
    return out


def _parse_dims(items) -> dict:
    out = {}
    for item in items or ():
        name, _, value = item.rpartition("=")
        if not name:
            raise SystemExit(f"--dim expects NAME=VALUE, got {item!r}")
        out[name] = int(value)
    return out


def _random_inputs(predictor, shapes: dict, dims: dict, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    feeds = {}
    for v in predictor.inputs:
        shape = shapes.get(v.name) or tuple(
            d if isinstance(d, int) else dims.get(d, 1) if isinstance(d, str) else 1 for d in (v.shape or ()))
        dtype = v.dtype if v.dtype is not None else np.dtype(np.float32)
        if dtype.kind == "f":
            feeds[v.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "b":
            feeds[v.name] = rng.random(shape) < 0.5
        else:
            feeds[v.name] = rng.integers(0, 10, shape).astype(dtype)
    return feeds


def _cmd_run(args) -> int:
    config = Config(model_paths=[args.model], num_threads=args.threads,
                    queue_capacity=max(args.threads * 2, 1), graph_optimization_level=args.level)
    with PooledPredictor(config) as pool:
        predictor = pool.predictor(0)
        if args.input:
            data = np.load(args.input, allow_pickle=False)
            feeds = dict(data) if hasattr(data, "files") else {predictor.input_names[0]: data}
        else:
            feeds = _random_inputs(predictor, _parse_shapes(args.shape), _parse_dims(args.dim))
        for name, a in feeds.items():
            print(f"input  {name}: {a.dtype} {a.shape}")
        first = pool.forward(feeds).result()  # warm-up: lays out the Nets
        for name, a in first.items():
            print(f"output {name}: {a.dtype} {a.shape}")
        latencies = []
        start = time.perf_counter()
        futures = []
        for _ in range(args.requests):
            t = time.perf_counter()
            f = pool.forward(feeds)
            f.add_done_callback(lambda _, t=t: latencies.append(time.perf_counter() - t))
            futures.append(f)
        for f in futures:
            f.result()
        wall = time.perf_counter() - start
    lat = np.array(latencies) * 1e3
    print(f"{args.requests} requests, {args.threads} thread(s): {args.requests / wall:.2f} req/s, "
          f"latency p50 {np.percentile(lat, 50):.2f} ms, p99 {np.percentile(lat, 99):.2f} ms")
    if args.save_outputs:
        np.savez(args.save_outputs, **first)
        print(f"outputs written to {args.save_outputs}")
    return 0


def _cmd_ops(args) -> int:
    by_op: dict = {}
    for k in registered_ops(args.device):
        kind = ", ".join(t for t in (k.layout if k.layout != "NCHW" else "",
                                     k.precision if k.precision != "any" else "") if t)
        by_op.setdefault((k.domain, k.op_type), {}).setdefault(k.device, []).append(
            f"{k.since} ({kind})" if kind else k.since)
    if args.json:
        print(json.dumps([{"op_type": op, "domain": d, "devices": devs} for (d, op), devs in sorted(by_op.items())]))
        return 0
    print(f"{'op_type':<24} {'device':<6} since_versions")
    for (domain, op), devs in sorted(by_op.items()):
        for dev, versions in sorted(devs.items()):
            name = op if not domain else f"{domain}.{op}"
            print(f"{name:<24} {dev:<6} {', '.join(map(str, versions))}")
    print(f"\n{len(by_op)} ops")
    if args.device in (None, "cpu"):  # which instruction the integer kernels' u8 x s8 products take here
        print("int8 (u8 x s8) products on this host: " + "; ".join(
            f"{a}: {int8_arithmetic.describe(a)}" for a in int8_arithmetic.ARITHMETICS))
        amx = compiled.amx  # imported here, not with the package (compiled/__init__.py)
        print(f"{amx.status()}" + (": DynamicQuantizeMatMul, MatMulIntegerToFloat (exact sums); QLinearConv, "
                                   "QLinearMatMul and QGemm (8-bit outputs) "
                                   f"{'too' if amx.conv_enabled() else 'with POOLED_PREDICTOR_AMX_CONV=1'}"
                                   if amx.usable() else ""))
    if args.device == "cuda":  # the rest run on the CPU behind host<->device copies (engine/placement.py)
        host = {(k.domain, k.op_type) for k in registered_ops("cpu")}
        print(f"{len(by_op)} of {len(host)} CPU ops have a CUDA kernel; the others run on the CPU behind io_copy")
    return 0


def _cmd_zoo(args) -> int:
    import onnx

    if args.name is None or args.name == "list":
        print(f"{'name':<14} {'params':>12} {'MACs':>10}  paper")
        for name, z in ZOO.items():
            print(f"{name:<14} {z.params:>12,} {z.macs / 1e9:>9.3f}G  {z.paper}")
        return 0
    if args.name not in ZOO:
        raise SystemExit(f"unknown zoo model {args.name!r}; choose from {', '.join(ZOO)}")
    if not args.output:
        raise SystemExit("zoo NAME needs -o FILE.onnx")
    batch = int(args.batch) if args.batch and args.batch.isdigit() else (args.batch or "N")
    model = build(args.name, batch=batch, seed=args.seed, opset=args.opset)
    onnx.save(model, args.output)
    cost = profile(model)
    print(f"wrote {args.output}: {args.name}, {cost.params:,} parameters, {cost.macs / 1e9:.3f} GMACs per image")
    return 0


def _cmd_inspect(args) -> int:
    shapes = parse_input_shapes(args.input_shapes) if args.input_shapes else None
    print(inspect(args.model, args.level, input_shapes=shapes, disable=args.disable or ()))
    return 0


def _free_dims(predictor, shapes: dict, dims: dict) -> list[str]:
    """What --shape/--dim leave unset: one line per input with a symbolic or unknown size, or no shape."""
    lines = []
    for v in predictor.inputs:
        if v.name in shapes:
            continue
        if v.shape is None:
            lines.append(f"input {v.name!r} has no declared shape: --shape {v.name}=D0xD1x...")
            continue
        free = [(i, d) for i, d in enumerate(v.shape)
                if not isinstance(d, int) and not (isinstance(d, str) and d in dims)]
        if free:
            decl = "x".join(str(d) if isinstance(d, int) else f"<{d if isinstance(d, str) else '?'}>"
                            for d in v.shape)
            names = [f"--dim {d}=VALUE" for _, d in free if isinstance(d, str)]
            what = ", ".join(f"{d!r}" if isinstance(d, str) else f"dimension {i} (unknown)" for i, d in free)
            lines.append(f"input {v.name!r}: {what}: " + ", ".join(names + [f"--shape {v.name}={decl}"]))
    return lines


def _cmd_profile(args) -> int:
    predictor = Predictor(args.model, graph_optimization_level=args.level, int8_arithmetic=args.int8_arithmetic)
    net = predictor.new_net()
    shapes, dims = _parse_shapes(args.shape), _parse_dims(args.dim)
    free = _free_dims(predictor, shapes, dims)
    if free:  # a profile at a guessed size (1) times a model nobody runs
        raise SystemExit(f"pooled-predictor profile: {args.model} has input dimensions of no declared size; "
                         "set each with --dim or --shape (profile does not guess them):\n  " + "\n  ".join(free))
    feeds = _random_inputs(predictor, shapes, dims)
    t0 = time.perf_counter()
    with compile_inline():  # lays the Net out and compiles (or loads) its kernels, untiered: not profiled
        net.forward(feeds)
    first = time.perf_counter() - t0
    profiler = net.enable_profiling()
    for _ in range(args.runs):
        net.forward(feeds)
    shapes = ", ".join(f"{n} {a.dtype}{list(a.shape)}" for n, a in feeds.items())
    print(f"# {args.model}: {shapes}; one Net, one thread; first forward {first * 1e3:.1f} ms (not profiled)")
    print(f"# int8 arithmetic: {net.int8_arithmetic} "
          f"(u8 x s8 products: {int8_arithmetic.describe(net.int8_arithmetic)})")
    print(profiler.table(top=args.top))
    if args.trace:
        print(f"\nChrome trace (chrome://tracing, ui.perfetto.dev): {profiler.write_trace(args.trace)}")
    return 0


def _cmd_warmup(args) -> int:
    # numba's cache directory is NUMBA_CACHE_DIR (ops/cpu/compiled sets it before numba is imported when the
    # package directory is not writable); numba is not imported here (it stays in ops/cpu/compiled)
    where = os.environ.get("NUMBA_CACHE_DIR") or "beside the package (pooled_predictor/ops/cpu/compiled/__pycache__)"
    if not args.models:  # every kernel, whether a model needs it or not
        seconds = load_all()
        print(f"every compiled kernel ready in {seconds:.2f} s (numba {version('numba')}; cache: {where})")
    else:
        print(f"compiling the kernels each model calls (numba {version('numba')}; cache: {where})")
    for model in args.models:
        t0 = time.perf_counter()
        predictor = Predictor(model)
        loaded = time.perf_counter() - t0
        given = _parse_shapes(args.shape)
        shapes = {n: given.get(n, s) for n, s in predictor.canonical_net.default_input_shapes().items()}
        first = predictor.warmup(shapes)
        print(f"{model}: load + compile {loaded:.2f} s, first forward {first:.2f} s")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pooled-predictor", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True, help="`pooled-predictor COMMAND -h` for its options")

    d = sub.add_parser("demo", help="OCR of a scanned page with PP-OCR det + rec in one pool")
    d.add_argument("--threads", type=int, default=2, help="worker threads of the pool (default 2)")
    d.add_argument("--image", help="another image instead of skimage's page.png")
    d.add_argument("--repeat", type=int, default=1, help="run the page this many times (timings of the last)")
    d.add_argument("--device", default="cpu", help="cpu (default), cuda or cuda:<n> (needs the gpu extra and a GPU)")
    d.set_defaults(fn=_cmd_demo)

    f = sub.add_parser("faces", help="detect faces in a photo with OpenCV's res10 SSD (Caffe) through the pool")
    f.add_argument("image", nargs="?", help="a photo (default: skimage's astronaut.png)")
    f.add_argument("-o", "--output", help="write the photo with the boxes to this PNG")
    f.add_argument("--threshold", type=float, default=0.5,
                   help="keep the detections whose score is at least this (0..1, default 0.5)")
    f.add_argument("--threads", type=int, default=1, help="worker threads of the pool (default 1)")
    f.set_defaults(fn=_cmd_faces)

    r = sub.add_parser("run", help="run any supported ONNX model through the pool; throughput and p50/p99")
    r.add_argument("model", help="the ONNX model file")
    r.add_argument("--input", help=".npy (first input) or .npz (inputs by name); default: random inputs")
    r.add_argument("--save-outputs", help="write the outputs by name to this .npz")
    r.add_argument("--threads", type=int, default=1, help="worker threads of the pool (default 1)")
    r.add_argument("--requests", type=int, default=20,
                   help="requests timed after one warm-up request, submitted back to back (default 20)")
    r.add_argument("--shape", action="append", help="NAME=1x3x224x224 for random inputs (repeatable)")
    r.add_argument("--dim", action="append", help="symbolic dimension NAME=VALUE (default 1; repeatable)")
    r.add_argument("--level", default="all", choices=["none", "basic", "extended", "all"],
                   help="graph optimization level")
    r.set_defaults(fn=_cmd_run)

    o = sub.add_parser("ops", help="list registered ops, versions and devices")
    o.add_argument("--device", choices=["cpu", "cuda"], default=None, help="only this device's kernels")
    o.add_argument("--json", action="store_true", help="one JSON list of {op_type, domain, devices} instead")
    o.set_defaults(fn=_cmd_ops)
    z = sub.add_parser("zoo", help="write a classic CNN (seeded random weights) as an ONNX file")
    z.add_argument("name", nargs="?", help="alexnet, googlenet, resnet50, mobilenet_v2, squeezenet1_1, vgg16; "
                                           "omit to list them")
    z.add_argument("-o", "--output", help="the .onnx file to write")
    z.add_argument("--seed", type=int, default=0, help="seed of the random weights (default 0)")
    z.add_argument("--opset", type=int, default=17, help="ONNX opset of the model (default 17)")
    z.add_argument("--batch", default="N", help="a number, or a symbolic name (default N)")
    z.set_defaults(fn=_cmd_zoo)

    i = sub.add_parser("inspect", help="node counts per op type before and after each graph pass")
    i.add_argument("model", help="the ONNX model file")
    i.add_argument("--level", default="all", choices=["none", "basic", "extended", "all"],
                   help="graph optimization level (default all)")
    i.add_argument("--input-shapes", help="x:1x3x224x224[,y:...] to fold shape computations")
    i.add_argument("--disable", action="append", help="a pass not to run (repeatable)")
    i.set_defaults(fn=_cmd_inspect)

    w = sub.add_parser("warmup", help="compile into numba's disk cache the kernels each MODEL calls (with no "
                                       "MODEL: every kernel), running each once: a server pays it before traffic")
    w.add_argument("models", nargs="*", help="ONNX model files to run once, compiling what each calls (none: "
                                             "compile every kernel)")
    w.add_argument("--shape", action="append", help="NAME=1x3x224x224 (default: declared, symbolic as 1)")
    w.set_defaults(fn=_cmd_warmup)

    pr = sub.add_parser("profile", help="time every node of a model on one thread: tables by op type and "
                                         "node, Chrome trace JSON",
                        description="Time every node of a model on one thread, on random inputs. Every input "
                                    "dimension without a declared size (symbolic, unknown) must be set with "
                                    "--dim or --shape: profile refuses to guess them, and names those missing.")
    pr.add_argument("model", help="the ONNX model file")
    pr.add_argument("--shape", action="append", help="NAME=1x3x224x224: the shape of input NAME (repeatable)")
    pr.add_argument("--dim", action="append",
                    help="NAME=VALUE: the size of symbolic dimension NAME in every input (repeatable)")
    pr.add_argument("--runs", type=int, default=10, help="profiled forwards after one unprofiled")
    pr.add_argument("--top", type=int, default=15, help="nodes listed in the by-node table")
    pr.add_argument("--trace", help="write the Chrome / Perfetto trace JSON here")
    pr.add_argument("--level", default="all", choices=["none", "basic", "extended", "all"],
                    help="graph optimization level (default all)")
    pr.add_argument("--int8-arithmetic", choices=["onnxruntime", "exact"], default=None,
                    help="the quantized kernels' u8 x s8 arithmetic (default: onnxruntime's on this host)")
    pr.set_defaults(fn=_cmd_profile)
    return p


EXIT_BROKEN_PIPE = 128 + 13
"""The exit status when the reader of stdout went away (`pooled-predictor ops | head`): 128 + SIGPIPE,
what a shell reports for a command killed by SIGPIPE, as `yes` in `yes | head`."""


def main(argv=None) -> int:
    """Run one command. Returns the exit status: 0, 2 on a PooledPredictorError (its message on
    stderr), EXIT_BROKEN_PIPE when stdout is a pipe whose reader closed it (quietly: no traceback,
    the rest of the output dropped)."""
    args = build_parser().parse_args(argv)
    try:
        status = args.fn(args)
        sys.stdout.flush()  # here, not at exit: a closed pipe is found while it can be handled
        return status
    except PooledPredictorError as exc:
        print(f"pooled-predictor: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # Python's advice (signal module docs, "Note on SIGPIPE"): point stdout at devnull, so
        # the interpreter's last flush at exit does not raise again, and leave
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


if __name__ == "__main__":
    sys.exit(main())
