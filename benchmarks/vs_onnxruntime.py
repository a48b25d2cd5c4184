"""Our pool against onnxruntime and OpenVINO on 2 cores: images/s, side by side, interleaved.

    python benchmarks/vs_onnxruntime.py [--quick] [--models resnet50 ...] [--batches 1 8]
                                        [--rounds R] [--seconds S]

Configurations (each fed closed-loop: a caller submits its next request when its
previous one returned):
* ours         -- PooledPredictor(num_threads=2), 2 client threads calling infer() (a job runs on
                  the calling thread while fewer than 2 run, as onnxruntime's run(); else queued);
* ort_2x1      -- one onnxruntime session with 2 intra-op threads, 1 caller;
* ort_1x2      -- one session with 1 intra-op thread, 2 caller threads;
* openvino     -- OpenVINO f32 (INFERENCE_PRECISION_HINT f32, 2 threads, 2
                  streams), an AsyncInferQueue of 2 jobs kept full (when installed).
Models: ResNet-50, GoogLeNet, MobileNetV2 (zoo, 224x224, seeded weights),
PP-OCR det (480x640) and rec (48x320) (pooled_predictor/zoo/fetch.py); batch
1 and 8. Transformers, batch 1 only (the batch 8 rows are skipped), when their
exported files exist under ~/.cache/pooled-predictor/exported/ (made by
benchmarks/export_transformers.py, run with a Python that has torch): a
BERT-base-sized encoder (sequence 128, the last 16 tokens padding), torchvision's
ViT-B/16 and Swin-T (224x224); a missing one is skipped with a line saying
how to make it. Every round runs every configuration for S seconds (after 0.2 s idle:
benchmarks/_common.settle), in a rotated
order, after one warm-up call each; the table gives the median images/s over
rounds and ours / best onnxruntime setup, ours / OpenVINO. Outputs are checked
against onnxruntime first (max |ours - ort| / max |ort|).
Writes benchmarks/results/vs_onnxruntime.json (machine, versions, command; --out-suffix S:
vs_onnxruntime_S.json).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from benchmarks._common import settle, table, write_results  # noqa: E402

CNNS = ("resnet50", "googlenet", "mobilenet_v2", "ppocr_det", "ppocr_rec")
TRANSFORMERS = {"bert_base": "bert", "vit_b_16": "vit", "swin_t": "swin"}  # -> export_transformers.py's name
MODELS = CNNS + tuple(TRANSFORMERS)


def exported_path(name: str) -> Path:
    """Where benchmarks/export_transformers.py writes a transformer's ONNX file."""
    from benchmarks.export_transformers import FILES, exported_dir

    return exported_dir() / FILES[TRANSFORMERS[name]]


def available(name: str) -> bool:
    """A CNN always; a transformer when its exported file exists (else a line says how to make it)."""
    if name not in TRANSFORMERS or exported_path(name).exists():
        return True
    print(f"{name}: skipped, {exported_path(name)} is missing; make it with "
          f"`<python with torch> benchmarks/export_transformers.py --models {TRANSFORMERS[name]}` (without torch: "
          f"`python benchmarks/export_transformers.py --graphs --models {TRANSFORMERS[name]}`)", flush=True)
    return False


def load_model(name: str, batch: int):
    """(ONNX bytes, input name, input array) for a benchmark model at a batch size."""
    if name in TRANSFORMERS:
        import onnx

        from benchmarks.export_transformers import SEQ

        model = onnx.load(exported_path(name))
        if name == "bert_base":
            x = np.random.default_rng(0).integers(1, 30522, (batch, SEQ)).astype(np.int64)
            x[:, SEQ - 16:] = 0  # padding: the attention mask is live
        else:
            x = np.random.default_rng(0).uniform(-1, 1, (batch, 3, 224, 224)).astype(np.float32)
        return model.SerializeToString(), model.graph.input[0].name, x
    if name.startswith("ppocr"):
        import onnx

        from pooled_predictor.zoo import fetch_ppocr

        models = fetch_ppocr()
        path = models.det if name == "ppocr_det" else models.rec
        shape = (batch, 3, 480, 640) if name == "ppocr_det" else (batch, 3, 48, 320)
        x = np.random.default_rng(0).uniform(-1, 1, shape).astype(np.float32)
        model = onnx.load(path)
        return model.SerializeToString(), model.graph.input[0].name, x
    from pooled_predictor.zoo import build, sample_input

    return build(name).SerializeToString(), "data", sample_input(name, batch)


def closed_loop(call, clients: int, seconds: float) -> float:
    """Requests per second of `clients` threads each calling call() back to back for about
    `seconds` (the last requests are let finish and counted, over the time they took)."""
    start = time.perf_counter()
    stop = start + seconds
    done = [0] * clients

    def loop(i):
        while time.perf_counter() < stop:
            call()
            done[i] += 1

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(done) / (time.perf_counter() - start)


class Ours:
    name = "ours"

    def __init__(self, data, input_name, x, worker_affinity="none", queued=False):
        """queued: every job through the queue to a worker (forward().result()), else infer()."""
        from pooled_predictor import Config, PooledPredictor

        self.pool = PooledPredictor(Config(model_bytes=[data], num_threads=2, warmup=True,
                                           warmup_shapes=[{input_name: x.shape}],
                                           worker_affinity=worker_affinity))
        self.feed = {input_name: x}
        self.output = self.pool.predictor(0).output_names[0]
        self.queued = queued
        closed_loop(self.once, 2, 0.05)  # infer()'s 2 caller Nets (or the workers' Nets) laid out before timing

    def once(self):
        if self.queued:
            return self.pool.forward(self.feed).result()[self.output]
        return self.pool.infer(self.feed)[self.output]  # on the calling thread while a Net is free

    def run(self, seconds):
        return closed_loop(self.once, 2, seconds)

    def close(self):
        self.pool.close()


class OrtSession:
    def __init__(self, data, input_name, x, intra: int, callers: int):
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = intra
        so.inter_op_num_threads = 1
        self.sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
        self.feed = {input_name: x}
        self.callers = callers
        self.name = f"ort_{intra}x{callers}"

    def once(self):
        return self.sess.run(None, self.feed)[0]

    def run(self, seconds):
        return closed_loop(self.once, self.callers, seconds)

    def close(self):
        pass


class OpenVino:
    name = "openvino"

    def __init__(self, data, input_name, x):
        import openvino as ov

        core = ov.Core()
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "m.onnx"
            path.write_bytes(data)
            model = core.read_model(str(path))
        model.reshape({input_name: list(x.shape)})
        self.compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32",
                                                          "INFERENCE_NUM_THREADS": "2", "NUM_STREAMS": "2"})
        self.x = x
        self.queue = ov.AsyncInferQueue(self.compiled, 2)
        self.done = 0
        self.queue.set_callback(self._count)

    def _count(self, request, userdata):
        self.done += 1

    def once(self):
        req = self.compiled.create_infer_request()
        return next(iter(req.infer([self.x]).values()))

    def run(self, seconds):
        self.done = 0
        start = time.perf_counter()
        stop = start + seconds
        while time.perf_counter() < stop:
            self.queue.start_async([self.x])  # waits for a free job: 2 in flight
        self.queue.wait_all()
        return self.done / (time.perf_counter() - start)

    def close(self):
        pass


def configurations(data, input_name, x, with_openvino: bool, worker_affinity: str = "none"):
    # pinned workers only run jobs queued to them: infer() would run on the unpinned client threads
    configs = [Ours(data, input_name, x, worker_affinity, queued=worker_affinity != "none"),
               OrtSession(data, input_name, x, 2, 1),
               OrtSession(data, input_name, x, 1, 2)]
    if with_openvino:
        try:
            configs.append(OpenVino(data, input_name, x))
        except ImportError:
            pass
    return configs


def rel_err(a, b) -> float:
    return float(np.abs(np.asarray(a, np.float64) - b).max() / max(np.abs(b).max(), 1e-30))


def bench(name: str, batch: int, rounds: int, seconds: float, with_openvino: bool,
          worker_affinity: str = "none") -> dict:
    data, input_name, x = load_model(name, batch)
    configs = configurations(data, input_name, x, with_openvino, worker_affinity)
    ref = configs[1].once()
    row = {"model": name, "batch": batch, "err_vs_ort": rel_err(configs[0].once(), ref)}
    if len(configs) > 3:
        row["err_openvino_vs_ort"] = rel_err(configs[3].once(), ref)
    rates = {c.name: [] for c in configs}
    for r in range(rounds):  # rotated order: no configuration always runs first or last
        for c in configs[r % len(configs):] + configs[:r % len(configs)]:
            settle()
            rates[c.name].append(c.run(seconds) * batch)
    for c in configs:
        c.close()
        row[c.name] = statistics.median(rates[c.name])
    row["ort_best"] = max(row["ort_2x1"], row["ort_1x2"])
    row["vs_ort"] = row["ours"] / row["ort_best"]
    if "openvino" in row:
        row["vs_openvino"] = row["ours"] / row["openvino"]
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=3.0, help="per configuration per round")
    ap.add_argument("--quick", action="store_true", help="3 rounds of 1 s (a smoke run; noisier)")
    ap.add_argument("--no-openvino", action="store_true")
    ap.add_argument("--out-suffix", default="",
                    help="write results/vs_onnxruntime_<suffix>.json (a run of some rows beside the full table)")
    ap.add_argument("--worker-affinity", choices=["none", "spread"], default="none",
                    help="ours' Config.worker_affinity, its jobs then queued to the pinned workers (infer() "
                         "would run them on the unpinned clients); onnxruntime's callers stay unpinned: on a "
                         "loaded host pinning takes a larger share of it, so 'spread' is not like for like there")
    args = ap.parse_args(argv)
    if args.quick:
        args.rounds, args.seconds = 3, 1.0
    rows = []
    for name in args.models:
        if not available(name):
            continue
        for batch in args.batches:
            if name in TRANSFORMERS and batch != 1:
                continue
            row = bench(name, batch, args.rounds, args.seconds, not args.no_openvino, args.worker_affinity)
            rows.append(row)
            print(f"{name} batch {batch}: ours {row['ours']:.1f} img/s, ort best {row['ort_best']:.1f} "
                  f"({row['vs_ort']:.2f}x)", flush=True)
    ratios = [r["vs_ort"] for r in rows]
    geomean = math.exp(sum(math.log(v) for v in ratios) / len(ratios))
    columns = [("model", "model", "s"), ("batch", "batch", "d"), ("ours", "ours img/s", ".1f"),
               ("ort_2x1", "ort 1x2thr", ".1f"), ("ort_1x2", "ort 2x1thr", ".1f"),
               ("openvino", "openvino", ".1f"), ("vs_ort", "ours/ort best", ".2f"),
               ("vs_openvino", "ours/openvino", ".2f"), ("err_vs_ort", "max rel err", ".1e")]
    print()
    print(table(rows, columns))
    print(f"\ngeometric mean ours / best onnxruntime: {geomean:.2f}x "
          f"({args.rounds} rounds x {args.seconds:g} s, medians)")
    versions = {}
    for mod in ("numba", "openvino"):
        try:
            versions[mod] = __import__(mod).__version__
        except ImportError:
            pass
    path = write_results("vs_onnxruntime" + (f"_{args.out_suffix}" if args.out_suffix else ""), rows, geomean_vs_ort=geomean, rounds=args.rounds,
                         seconds=args.seconds, versions=versions, worker_affinity=args.worker_affinity)
    print(f"written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
