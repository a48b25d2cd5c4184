"""Serving: a model to many threads at once.

    predictor.py     Predictor: a canonical Net and one Net per calling thread (fb-caffe-exts)
    pool.py          PooledPredictor, PinnedPooledPredictor, Config, Callback; the workers
    jobqueue.py      the bounded multi-producer/multi-consumer priority queue
    futures.py       Future with then(); collect()
    batching.py      Triton-style dynamic batching
    stats.py         per-net counts and latency histograms; prometheus.py exports them
    blas.py          BLAS thread limits (threadpoolctl)
    paddle_api.py    Paddle Inference's handle API
    backend.py       the onnx.backend interface (ONNX's conformance tests)
"""
