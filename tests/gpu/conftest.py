"""GPU tests: marked `gpu`, skipped where CuPy or a CUDA device is missing (ops/cuda/runtime.unavailable).
benchmarks/gpu_check.py runs them on the lent GPU machine."""

import pytest

from pooled_predictor.ops.cuda import runtime

WHY = runtime.unavailable()


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "tests/gpu/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.gpu)
            if WHY is not None:
                item.add_marker(pytest.mark.skip(reason=f"no GPU here: {WHY}"))
