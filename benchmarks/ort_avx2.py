"""onnxruntime held to its AVX2 kernels on an AVX-512 host: a proxy for the issues' "AVX2 machine" rows.

    python benchmarks/ort_avx2.py           # make (once) and check the copy; print the PYTHONPATH that selects it
    python benchmarks/ort_avx2.py --path    # only the PYTHONPATH (for $(...))

    . <(grep ^export tests/avx2_target.sh); export POOLED_PREDICTOR_ISA=avx2
    PYTHONPATH=$(python benchmarks/ort_avx2.py --path) python benchmarks/vs_onnxruntime.py --out-suffix avx2_proxy

Issues 32 and 33 ask for rows measured "on the AVX2 machines". On an AVX-512 host our side can run AVX2
code (tests/avx2_target.sh compiles every kernel for Haswell, 8 lanes), but onnxruntime cannot be told to:
MLAS chooses its kernels once, when the library loads, from CPUID and XCR0 (onnxruntime's
core/mlas/lib/platform.cpp, MLAS_PLATFORM::MLAS_PLATFORM), and no option or environment variable changes
that choice. So a side-by-side table there set our AVX2 code against onnxruntime's AVX-512 code.

This script copies the installed onnxruntime package into the cache (~/.cache/pooled-predictor/
onnxruntime-avx2/<version>/) and, in the copy's extension module only, changes two conditional jumps of
MLAS's platform setup into unconditional ones:
  - the AVX512F test (CPUID.(7,0):EBX bit 16, then XCR0's opmask/ZMM state, mask 0xE0): its AVX-512
    branch, which installs the AVX512F / AVX512-core / AVX512-VNNI kernels and the NCHW16c block, is skipped;
  - the AVX-VNNI test (CPUID.(7,1):EAX bit 4): skipped too, as a Haswell-to-Zen 3 host has no AVX-VNNI.
MLAS then keeps what it installed before those tests: its AVX2 + FMA kernels (SGEMM, NCHWc convolutions at
block 8, the u8 x s8 GEMMs by vpmaddubsw, the activations). Nothing else in onnxruntime changes. The jumps
are found by their instruction bytes; each pattern must match exactly once and the two must lie within
one function's reach of each other, else the script refuses (an onnxruntime build laid out otherwise).
The copy is checked before use: one thread's SGEMM rate must fall to at most 0.7x the installed
package's (AVX2 + FMA is half AVX-512's width), and its NCHWc transformer must pick block 8.

What the proxy is: onnxruntime's own AVX2 code and ours, on the same core. It is not an AVX2 machine: this
core's caches, memory and clock stay as they are, and a core built for 512-bit vectors may run 256-bit code
at another speed than a Zen 3 or a Haswell does. Its figures are labelled so: the result JSON's machine
block says "onnxruntime_dispatch": "avx2 (patched copy)" (benchmarks/_common.py reads the marker file
MLAS_DISPATCH.json this script writes into the copy).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

MARKER = "MLAS_DISPATCH.json"
"""The file in the copy's package directory that names what was patched (benchmarks/_common.py reads it)."""

# test $0x10000, r32 (AVX512F); je short (no AVX512F: skip); up to 12 bytes (mov, not rax);
# test $0xe0, %al (XCR0's AVX-512 state); je near (the AVX-512 branch)
_AVX512F = re.compile(rb"\x41?\xf7[\xc0-\xc7]\x00\x00\x01\x00(\x74).{0,12}?\xa8\xe0\x0f\x84", re.S)
# mov $7, %eax; mov $1, %ecx; cpuid; test $0x10, %al (AVX-VNNI); je short (no AVX-VNNI: skip)
_AVX_VNNI = re.compile(rb"\xb8\x07\x00\x00\x00\xb9\x01\x00\x00\x00\x0f\xa2\xa8\x10(\x74)", re.S)
_JMP_SHORT = 0xEB
_REACH = 0x1000  # both sites lie in MLAS_PLATFORM's constructor, a few hundred bytes apart


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pooled-predictor" / "onnxruntime-avx2"


def installed() -> Path:
    """The installed onnxruntime package's directory (imported in a child: this process may hold the copy)."""
    out = subprocess.run([sys.executable, "-c", "import onnxruntime, os; print(os.path.dirname(onnxruntime.__file__))"],
                         capture_output=True, text=True, check=True, env=_without_copy())
    return Path(out.stdout.strip())


def _without_copy() -> dict:
    env = dict(os.environ)
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and not p.startswith(str(cache_root()))]
    env["PYTHONPATH"] = os.pathsep.join(parts)
    return env


def extension(package: Path) -> Path:
    """The package's extension module (onnxruntime is linked into it)."""
    found = sorted((package / "capi").glob("onnxruntime_pybind11_state*.so"))
    if len(found) != 1:
        raise RuntimeError(f"expected one onnxruntime_pybind11_state*.so under {package / 'capi'}, found {found}")
    return found[0]


def patch_sites(data: bytes) -> list[int]:
    """The file offsets of the two jumps (module docstring).

    Raises:
        RuntimeError: a pattern matches other than once, or the two lie apart (another build's layout).
    """
    sites = []
    for name, pattern in (("AVX512F", _AVX512F), ("AVX-VNNI", _AVX_VNNI)):
        hits = [m.start(1) for m in pattern.finditer(data)]
        if len(hits) != 1:
            raise RuntimeError(f"MLAS's {name} test matched {len(hits)} times in this onnxruntime build, "
                               "expected once: this build is laid out otherwise; no copy made")
        sites.append(hits[0])
    if abs(sites[0] - sites[1]) > _REACH:
        raise RuntimeError(f"MLAS's AVX512F and AVX-VNNI tests lie {abs(sites[0] - sites[1]):#x} bytes apart, "
                           f"expected under {_REACH:#x}: not one function; no copy made")
    return sites


def make_copy(force: bool = False) -> Path:
    """The directory to put on PYTHONPATH (it holds the patched `onnxruntime` package); made once per version."""
    src = installed()
    so = extension(src)
    digest = hashlib.sha256(so.read_bytes()).hexdigest()
    version = json.loads(subprocess.run([sys.executable, "-c", "import onnxruntime, json; "
                                         "print(json.dumps(onnxruntime.__version__))"], capture_output=True,
                                        text=True, check=True, env=_without_copy()).stdout)
    root = cache_root() / f"{version}-{digest[:12]}"
    marker = root / "onnxruntime" / MARKER
    if marker.exists() and not force:
        return root
    data = bytearray(so.read_bytes())
    sites = patch_sites(bytes(data))
    for at in sites:
        data[at] = _JMP_SHORT
    cache_root().mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".making-", dir=cache_root()))
    try:
        shutil.copytree(src, tmp / "onnxruntime", ignore=shutil.ignore_patterns("__pycache__"))
        extension(tmp / "onnxruntime").write_bytes(bytes(data))
        (tmp / "onnxruntime" / MARKER).write_text(json.dumps(
            {"dispatch": "avx2", "source": str(so), "source_sha256": digest, "onnxruntime": version,
             "patched_offsets": [hex(s) for s in sites],
             "what": "MLAS's AVX512F and AVX-VNNI branches skipped (benchmarks/ort_avx2.py)"}, indent=1))
        if root.exists():
            shutil.rmtree(root)
        tmp.rename(root)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return root


_PROBE = r"""
import json, sys, time
import numpy as np, onnx, onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

def session(model, opt_path=None):
    so = ort.SessionOptions(); so.intra_op_num_threads = 1; so.log_severity_level = 3
    if opt_path:
        so.optimized_model_filepath = opt_path
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])

rng = np.random.default_rng(0)
w = numpy_helper.from_array(rng.standard_normal((512, 512)).astype(np.float32), "w")
g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "gemm",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [256, 512])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [256, 512])], [w])
s = session(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
x = {"x": rng.standard_normal((256, 512)).astype(np.float32)}
for _ in range(5):
    s.run(None, x)
best = 1e9
for _ in range(5):
    t = time.perf_counter()
    for _ in range(20):
        s.run(None, x)
    best = min(best, (time.perf_counter() - t) / 20)
# a 24 -> 24 channel 3x3 convolution: the NCHWc transformer pads its filter's channels to MLAS's block
# (NCHW16c on AVX-512, NCHW8c on AVX2): the blocked filter is 32 x 32 x 3 x 3 at block 16, 24 x 24 x 3 x 3 at 8
c = numpy_helper.from_array(rng.standard_normal((24, 24, 3, 3)).astype(np.float32), "c")
g = helper.make_graph([helper.make_node("Conv", ["x", "c"], ["y"], pads=[1, 1, 1, 1])], "conv",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 24, 16, 16])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 24, 16, 16])], [c])
session(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), sys.argv[1])
opt = onnx.load(sys.argv[1])
blocked = {n.input[1] for n in opt.graph.node if n.domain == "com.microsoft.nchwc" and n.op_type == "Conv"}
dims = [list(t.dims) for t in opt.graph.initializer if t.name in blocked]
block = {32: 16, 24: 8}.get(dims[0][0]) if len(dims) == 1 else None
print(json.dumps({"file": ort.__file__, "gflops": 2 * 256 * 512 * 512 / best / 1e9, "nchwc_block": block}))
"""


def probe(pythonpath: str | None) -> dict:
    """One thread's SGEMM rate and whether a 24-channel convolution is blocked, in a child process."""
    env = _without_copy()
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, env.get("PYTHONPATH", "")) if p)
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run([sys.executable, "-c", _PROBE, str(Path(tmp) / "opt.onnx")], capture_output=True,
                             text=True, env=env)
    if out.returncode:
        raise RuntimeError(f"onnxruntime probe failed: {out.stderr.strip()[-600:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def check(root: Path, avx512: bool = True) -> dict:
    """Both packages probed; the copy must be the one imported, with NCHWc block 8 and, on an AVX-512 host, at
    most 0.7x the installed package's SGEMM rate (on an AVX2 host both run the AVX2 kernels).

    Raises:
        RuntimeError: the copy is not imported, or still runs AVX-512 kernels."""
    native, copy = probe(None), probe(str(root))
    if not copy["file"].startswith(str(root)):
        raise RuntimeError(f"the copy was not imported: {copy['file']}")
    ratio = copy["gflops"] / native["gflops"]
    facts = {"native_gflops": round(native["gflops"], 1), "copy_gflops": round(copy["gflops"], 1),
             "ratio": round(ratio, 3), "native_nchwc_block": native["nchwc_block"],
             "copy_nchwc_block": copy["nchwc_block"]}
    if (avx512 and ratio > 0.7) or copy["nchwc_block"] != 8:
        raise RuntimeError(f"the copy does not run MLAS's AVX2 kernels: {facts}")
    return facts


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--path", action="store_true", help="print only the directory for PYTHONPATH (made if needed)")
    ap.add_argument("--force", action="store_true", help="make the copy again")
    ap.add_argument("--no-check", action="store_true", help="skip the SGEMM-rate and NCHWc-block check")
    args = ap.parse_args(argv)
    flags = Path("/proc/cpuinfo").read_text()
    if "avx2" not in flags:
        print("this host has no AVX2: MLAS's AVX2 kernels cannot run here", file=sys.stderr)
        return 2
    # on an AVX2 host the copy is the installed package less AVX-VNNI (an Alder Lake's), so a Haswell-to-Zen 3 one
    root = make_copy(force=args.force)
    if args.path:
        print(root)
        return 0
    if not args.no_check:
        print("check:", json.dumps(check(root, avx512="avx512f" in flags)))
    print(f"export PYTHONPATH={root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
