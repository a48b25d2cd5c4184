"""The host's float32 FMA throughput per core at 8 and 16 lanes: what the compiled kernels can reach.

    python benchmarks/fma_peak.py [--seconds 0.3]
    python benchmarks/fma_peak.py --int8     # AVX2's u8 x s8 step instead (fma_peak_int8.json)

For each width W in (4, 8, 16) it JIT-compiles (llvmlite, the host's CPU name and features, as the
engine's LLVM IR micro-kernels are) a loop of A independent `llvm.fma.v{W}f32` chains, with A from 1 to
16, and times it on this thread's CPU clock. It prints GFLOP/s (2 flops per lane per FMA) and the FMAs
retired per cycle. The clock comes from the one-chain row: a dependent chain retires one FMA every
`--latency` cycles (4 on Skylake-SP through Sapphire Rapids and on Zen 4/5; Agner Fog's instruction
tables). The best row over the accumulator counts is the core's peak at that width.

What it answers: whether 16-lane kernels can run twice as fast as 8-lane ones here. A core with two
512-bit FMA pipes retires two 16-lane FMAs a cycle; one with a single 512-bit pipe (or 512-bit ops
split in two, Zen 4) retires one, and then 16 lanes gain nothing over 8 in arithmetic. Writes
benchmarks/results/fma_peak.json naming the CPU.

--int8 times AVX2's u8 x s8 dot-product step instead, the one MLAS's vpmaddubsw kernels and our saturating int8
kernels (compiled/qgemm.py, ops/int8_arithmetic.py) take on a host without VNNI: vpmaddubsw (32 u8 x s8 products
summed in int16 pairs, saturating), vpmaddwd by ones (the pairs summed into int32), vpaddd, on 256-bit vectors
(llvm.x86.avx2.pmadd.ub.sw / pmadd.wd, compiled for Haswell), A independent chains. It prints GMAC/s (32 products a
step) and steps a cycle (the clock from the one-chain FMA row): the bound of those kernels' inner loops here.
Writes benchmarks/results/fma_peak_int8.json.
"""

from __future__ import annotations

import argparse
import ctypes
import sys
import time
from pathlib import Path

import llvmlite.binding as llvm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import write_results  # noqa: E402

WIDTHS = (4, 8, 16)
CHAINS = (1, 2, 4, 6, 8, 10, 12, 16)


def _chains_loop(declare: list, entry: list, vt: str, init: str, step, add: str, chains: int) -> str:
    """LLVM IR of `void fma_loop(i64 n, float* x)`: `entry` (its set-up from x), then n times `chains` independent
    chains (step(a): the lines that make %nxt{a} of type vt from %acc{a}, first `init`), their sum (`add`) stored
    to x."""
    lines = [*declare, "define void @fma_loop(i64 %n, float* %x) {", "entry:", *entry, "  br label %loop", "loop:",
             "  %i = phi i64 [0, %entry], [%i1, %loop]"]
    lines += [f"  %acc{a} = phi {vt} [{init}, %entry], [%nxt{a}, %loop]" for a in range(chains)]
    for a in range(chains):
        lines += step(a)
    lines += ["  %i1 = add i64 %i, 1", "  %done = icmp eq i64 %i1, %n", "  br i1 %done, label %exit, label %loop",
              "exit:"]
    total = "%nxt0"
    for a in range(1, chains):
        lines.append(f"  %s{a} = {add} {vt} {total}, %nxt{a}")
        total = f"%s{a}"
    lines += [f"  %out = bitcast float* %x to {vt}*", f"  store {vt} {total}, {vt}* %out, align 4", "  ret void", "}"]
    return "\n".join(lines)


def _module(width: int, chains: int) -> str:
    """`chains` independent FMA chains of <width x float> (acc = fma(acc, b, c), b and c loaded from x so that
    nothing folds)."""
    vt = f"<{width} x float>"
    entry = [f"  %vp = bitcast float* %x to {vt}*", f"  %b = load {vt}, {vt}* %vp, align 4",
             f"  %cp = getelementptr {vt}, {vt}* %vp, i64 1", f"  %c = load {vt}, {vt}* %cp, align 4"]
    return _chains_loop([f"declare {vt} @llvm.fma.v{width}f32({vt}, {vt}, {vt})"], entry, vt, "%b",
                        lambda a: [f"  %nxt{a} = call {vt} @llvm.fma.v{width}f32({vt} %acc{a}, {vt} %b, {vt} %c)"],
                        "fadd", chains)


_ONES16 = "<" + ", ".join(["i16 1"] * 16) + ">"


def _int8_module(chains: int) -> str:
    """`chains` independent u8 x s8 chains of AVX2 (vpmaddubsw, vpmaddwd by ones, vpaddd; the accumulator's bytes
    are the next step's signed operand, so nothing folds)."""
    declare = ["declare <16 x i16> @llvm.x86.avx2.pmadd.ub.sw(<32 x i8>, <32 x i8>)",
               "declare <8 x i32> @llvm.x86.avx2.pmadd.wd(<16 x i16>, <16 x i16>)"]
    entry = ["  %xp = bitcast float* %x to <32 x i8>*", "  %u = load volatile <32 x i8>, <32 x i8>* %xp, align 4"]

    def step(a):
        return [f"  %w{a} = bitcast <8 x i32> %acc{a} to <32 x i8>",
                f"  %p{a} = call <16 x i16> @llvm.x86.avx2.pmadd.ub.sw(<32 x i8> %u, <32 x i8> %w{a})",
                f"  %q{a} = call <8 x i32> @llvm.x86.avx2.pmadd.wd(<16 x i16> %p{a}, <16 x i16> {_ONES16})",
                f"  %nxt{a} = add <8 x i32> %acc{a}, %q{a}"]

    return _chains_loop(declare, entry, "<8 x i32>", "zeroinitializer", step, "add", chains)


def _compile(cpu: str, features: str, ir: str):
    target_machine = llvm.Target.from_default_triple().create_target_machine(cpu=cpu, features=features, opt=3)
    mod = llvm.parse_assembly(ir)
    mod.verify()
    engine = llvm.create_mcjit_compiler(mod, target_machine)
    engine.finalize_object()
    fn = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_void_p)(engine.get_function_address("fma_loop"))
    return engine, fn


def _seconds_per_iteration(fn, seconds: float) -> float:
    buf = (ctypes.c_float * 32)(*([1.0] * 16 + [1e-7] * 16))
    ptr = ctypes.addressof(buf)
    n = 1 << 16
    while True:  # calibrate n to about seconds / 5 a call
        t0 = time.thread_time()
        fn(n, ptr)
        dt = time.thread_time() - t0
        if dt > seconds / 5 or n > 1 << 34:
            break
        n *= 4
    best = dt / n
    for _ in range(4):
        t0 = time.thread_time()
        fn(n, ptr)
        best = min(best, (time.thread_time() - t0) / n)
    return best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=0.3, help="per row")
    ap.add_argument("--latency", type=float, default=4.0, help="cycles of one dependent FMA (for the clock)")
    ap.add_argument("--int8", action="store_true", help="AVX2's u8 x s8 step instead (module docstring)")
    args = ap.parse_args(argv)
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    cpu, features = llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()
    if args.int8:
        return _int8_main(args, cpu, features)
    rows, ghz = [], None
    print(f"LLVM CPU {cpu}")
    print(f"{'lanes':>5} {'chains':>6} {'GFLOP/s':>8} {'FMA/cycle':>9}")
    for width in WIDTHS:
        for chains in CHAINS:
            engine, fn = _compile(cpu, features, _module(width, chains))
            s = _seconds_per_iteration(fn, args.seconds)
            if ghz is None:  # the first row: one dependent chain at the narrowest width
                ghz = args.latency / s / 1e9
            gflops = 2 * width * chains / s / 1e9
            per_cycle = chains / (s * ghz * 1e9)
            rows.append({"lanes": width, "chains": chains, "gflops": gflops, "fma_per_cycle": per_cycle})
            print(f"{width:>5} {chains:>6} {gflops:>8.1f} {per_cycle:>9.2f}", flush=True)
    peak = {w: max(r["gflops"] for r in rows if r["lanes"] == w) for w in WIDTHS}
    print(f"clock about {ghz:.2f} GHz (one chain, {args.latency:g}-cycle FMA); peak GFLOP/s: "
          + ", ".join(f"{w} lanes {peak[w]:.0f}" for w in WIDTHS) + f"; 16/8 lanes {peak[16] / peak[8]:.2f}x")
    out = write_results("fma_peak", rows, llvm_cpu=cpu, llvm=".".join(map(str, llvm.llvm_version_info)),
                        clock_ghz_estimate=ghz, peak_gflops=peak)
    print(f"written to {out}")
    return 0


def _int8_main(args, cpu: str, features: str) -> int:
    engine, fn = _compile(cpu, features, _module(4, 1))
    ghz = args.latency / _seconds_per_iteration(fn, args.seconds) / 1e9
    rows = []
    print(f"LLVM CPU {cpu}; clock about {ghz:.2f} GHz (one FMA chain); "
          "AVX2 u8 x s8 steps (vpmaddubsw, vpmaddwd, vpaddd)")
    print(f"{'chains':>6} {'GMAC/s':>8} {'steps/cycle':>11}")
    for chains in CHAINS:
        engine, fn = _compile("haswell", "+avx2,+fma", _int8_module(chains))
        s = _seconds_per_iteration(fn, args.seconds)
        rows.append({"chains": chains, "gmacs": 32 * chains / s / 1e9, "steps_per_cycle": chains / (s * ghz * 1e9)})
        print(f"{chains:>6} {rows[-1]['gmacs']:>8.1f} {rows[-1]['steps_per_cycle']:>11.2f}", flush=True)
    peak = max(r["gmacs"] for r in rows)
    print(f"peak {peak:.0f} GMAC/s")
    out = write_results("fma_peak_int8", rows, llvm_cpu=cpu, llvm=".".join(map(str, llvm.llvm_version_info)),
                        clock_ghz_estimate=ghz, peak_gmacs=peak)
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
