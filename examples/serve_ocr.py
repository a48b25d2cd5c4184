"""Serve the PP-OCR pipeline on Ray Serve: two replicas, each a PooledPredictor with det and rec.

    python examples/serve_ocr.py [--replicas 2] [--threads 1] [--pages 4]

Starts a local Ray instance (2 CPUs), deploys pooled_predictor.serve with the
PP-OCR detector (net 0) and recognizer (net 1, dynamic batching up to 16 rows,
2 ms queue delay), and reads the scanned page `--pages` times concurrently
through Ray handles: one detector request per page, then one recognizer
request per text box, all in flight at once and spread over the replicas. It
prints the text, its character error rate against the page's text, the
requests each replica served and the batches it ran, then sends one
recognizer request over HTTP (127.0.0.1) and checks it equals the handle's.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="pool threads per replica")
    ap.add_argument("--pages", type=int, default=4, help="pages read concurrently")
    ap.add_argument("--port", type=int, default=8765)
    args = ap.parse_args(argv)

    import ray
    from ray import serve

    from pooled_predictor import Config
    from pooled_predictor.apps.ocr import (PAGE_TEXT, Line, boxes_from_probability, character_error_rate,
                                           ctc_greedy_decode, det_preprocess, load_image, reading_order,
                                           rec_preprocess)
    from pooled_predictor.serve import application, ndarray_from_json, ndarray_to_json
    from pooled_predictor.zoo import fetch_page_image, fetch_ppocr

    models = fetch_ppocr()           # fetched once, cached; shipped to each node once by application()
    image = load_image(fetch_page_image())
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": args.port})
    config = Config(model_paths=[models.det, models.rec], num_threads=args.threads, queue_capacity=32,
                    max_batch_size=[0, 16], max_queue_delay=0.002)
    t0 = time.perf_counter()
    handle = serve.run(application(config, num_replicas=args.replicas,
                                   ray_actor_options={"num_cpus": 2 / args.replicas}),
                       name="ocr", route_prefix="/ocr")
    print(f"deployed {args.replicas} replicas x {args.threads} pool thread(s) in {time.perf_counter() - t0:.1f} s")
    described = handle.describe.remote().result()
    charset = described[1]["metadata"]["character"].split("\n")

    def read_pages(n):
        x, sx, sy = det_preprocess(image)
        dets = [handle.forward.remote({"x": x}, net_id=0) for _ in range(n)]
        pages = []
        for det in dets:
            boxes = boxes_from_probability(det.result()["fetch_name_0"][0, 0], sx, sy, image.shape)
            pages.append([(b, handle.forward.remote({"x": rec_preprocess(image, b)}, net_id=1)) for b in boxes])
        texts = []
        for page in pages:
            lines = [Line(b, *ctc_greedy_decode(r.result()["fetch_name_0"][0], charset)) for b, r in page]
            texts.append("\n".join(l.text for l in reading_order(
                [l for l in lines if l.confidence >= 0.5 and l.text.strip()])))
        return texts

    read_pages(1)  # warm-up: every replica compiles its Nets
    t0 = time.perf_counter()
    texts = read_pages(args.pages)
    seconds = time.perf_counter() - t0
    print(f"\n{args.pages} pages read concurrently in {seconds:.2f} s; page 1:\n")
    print(texts[0])
    cers = [character_error_rate(t, PAGE_TEXT) for t in texts]
    print(f"\ncharacter error rate per page: {', '.join(f'{c:.3f}' for c in cers)}")

    replicas = {}
    for _ in range(40):
        s = handle.stats.remote().result()
        replicas[s["replica"]] = s
        if len(replicas) == args.replicas:
            break
    for rid, s in sorted(replicas.items()):
        det, rec = s["nets"][0], s["nets"][1]
        print(f"replica {rid}: detector jobs {det['completed']}, recognizer jobs {rec['completed']}, "
              f"recognizer batches (jobs per run: runs) {rec['batch_sizes']}, "
              f"recognizer p50/p99 end-to-end {rec['end_to_end']['p50_ms']:.1f}/{rec['end_to_end']['p99_ms']:.1f} ms")

    x, sx, sy = det_preprocess(image)
    box = boxes_from_probability(handle.forward.remote({"x": x}, net_id=0).result()["fetch_name_0"][0, 0],
                                 sx, sy, image.shape)[0]
    crop = rec_preprocess(image, box)
    body = json.dumps({"net_id": 1, "inputs": {"x": ndarray_to_json(crop)}}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{args.port}/ocr", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        over_http = ndarray_from_json(json.loads(r.read())["outputs"]["fetch_name_0"])
    over_handle = handle.forward.remote({"x": crop}, net_id=1).result()["fetch_name_0"]
    same = np.allclose(over_http, over_handle, rtol=1e-5, atol=1e-6)
    print(f"\nHTTP POST 127.0.0.1:{args.port}/ocr (recognizer, {crop.shape}): "
          f"'{ctc_greedy_decode(over_http[0], charset)[0]}', equal to the handle's answer: {same}")
    serve.shutdown()
    ray.shutdown()
    return 0 if same and max(cers) < 0.05 else 1


if __name__ == "__main__":
    sys.exit(main())
