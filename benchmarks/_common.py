"""Shared by the benchmark scripts: machine and version facts, timing loops, result files."""

from __future__ import annotations

import json
import os
import platform
import shlex
import sys
import threading
import time
from pathlib import Path

import numpy as np

# Benchmarks time the compiled kernels: a Net compiles (or loads) what it calls before its first forward
# instead of serving from the reference kernels meanwhile (engine/tiering.py; startup.py's children tier).
os.environ.setdefault("POOLED_PREDICTOR_TIERED", "0")

RESULTS = Path(__file__).resolve().parent / "results"


def cpu() -> dict:
    """The CPU's model name and vector ISA (avx512 with its VNNI/BF16 extensions, avx2, ...), from
    /proc/cpuinfo where there is one."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    model = next((l.split(":", 1)[1].strip() for l in text.splitlines() if l.startswith("model name")), None)
    flags = set(next((l.split(":", 1)[1].split() for l in text.splitlines() if l.startswith("flags")), []))
    isa = "avx512" if "avx512f" in flags else "avx2" if "avx2" in flags else "sse"
    extras = [f for f in ("avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile") if f in flags]
    return {"cpu_model": model, "cpu_isa": isa, "cpu_isa_extras": extras}


def machine() -> dict:
    """Where and with what the numbers were taken."""
    import onnx

    info = {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(), "python": platform.python_version(), "numpy": np.__version__,
            "onnx": onnx.__version__}
    info.update(cpu())
    try:
        from pooled_predictor.ops.cpu.compiled import isa

        info["kernel_isa"], info["kernel_lanes"] = isa.ISA, isa.LANES  # what our kernels run (POOLED_PREDICTOR_ISA)
        info["kernel_isa_detected"] = isa.DETECTED
    except ImportError:
        pass
    try:
        import numba

        info["numba"] = numba.__version__
        from llvmlite import binding

        from pooled_predictor.ops.cpu.compiled import jit

        # numba's target: the CPU its code is tuned for, and whether its loops may use 512-bit vectors there
        info["numba_cpu"] = numba.config.CPU_NAME or binding.get_host_cpu_name()
        info["numba_loops_512"] = jit.PREFERS_512
    except ImportError:
        pass
    try:
        import onnxruntime

        info["onnxruntime"] = onnxruntime.__version__
        # "native": MLAS picks its kernels from this host's CPUID; "avx2 (patched copy)": benchmarks/ort_avx2.py's
        # copy, held to its AVX2 kernels on an AVX-512 host (the AVX2 rows' proxy)
        marker = Path(onnxruntime.__file__).parent / "MLAS_DISPATCH.json"
        info["onnxruntime_dispatch"] = (f"{json.loads(marker.read_text())['dispatch']} (patched copy)"
                                        if marker.exists() else "native")
    except ImportError:
        pass
    try:
        from threadpoolctl import threadpool_info

        info["blas"] = [f"{i.get('internal_api')} {i.get('version')}" for i in threadpool_info()
                        if i.get("user_api") == "blas"]
    except Exception:
        pass
    return info


SETTLE_SECONDS = 0.2


def settle(seconds: float = SETTLE_SECONDS) -> None:
    """Idle before a timed window. onnxruntime's intra-op threads spin on after a run: on 2 cores,
    16 callers of our pool timed right after a 16-thread onnxruntime session served PP-OCR rec
    1.00x onnxruntime's 16 callers, and 1.10x after 0.1 s or 0.5 s idle (the config timed next
    loses what the spinners take, whichever it is)."""
    time.sleep(seconds)


def write_results(name: str, rows, *, rows_only: bool = False, **extra) -> Path:
    """benchmarks/results/<name>.json with the rows, the machine, the versions and the command.

    With rows_only, <name>.json is the bare list of rows and the rest goes to
    <name>.meta.json beside it.
    """
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    meta = {"command": " ".join(shlex.quote(a) for a in [Path(sys.executable).name] + sys.argv),
            "machine": machine(), **extra}
    if rows_only:
        path.write_text(json.dumps(rows, indent=2, default=float) + "\n")
        (RESULTS / f"{name}.meta.json").write_text(json.dumps(meta, indent=2, default=float) + "\n")
    else:
        path.write_text(json.dumps({**meta, "rows": rows}, indent=2, default=float) + "\n")
    return path


def table(rows: list[dict], columns: list[tuple[str, str, str]]) -> str:
    """A plain-text table: columns are (key, header, format)."""
    cells = [[h for _, h, _ in columns]] + [[("{:" + f + "}").format(r[k]) if r.get(k) is not None else "-"
                                             for k, _, f in columns] for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(columns))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
             for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def run_threads(fn, threads: int, seconds: float) -> tuple[int, float, list[float]]:
    """Call fn() in a loop from `threads` Python threads for about `seconds`.

    Returns: (calls, wall seconds, per-call latencies in seconds).
    """
    stop = time.perf_counter() + seconds
    lat: list[float] = []
    lock = threading.Lock()

    def loop():
        mine = []
        while time.perf_counter() < stop:
            t = time.perf_counter()
            fn()
            mine.append(time.perf_counter() - t)
        with lock:
            lat.extend(mine)

    ts = [threading.Thread(target=loop) for _ in range(threads)]
    start = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return len(lat), time.perf_counter() - start, lat


def percentiles_ms(lat: list[float]) -> tuple[float, float]:
    a = np.asarray(lat) * 1e3
    return float(np.percentile(a, 50)), float(np.percentile(a, 99))
