"""The fuzz harness: cases in batches in subprocesses, with a timeout per case and a memory limit.

    python -m tests.fuzz.harness --count 5000 [--seed 0] [--processes 2] [--only INDEX]

Each subprocess (tests/fuzz/child.py) runs many cases; when one hangs (no
report within `case_timeout` seconds) the subprocess is killed and the batch
goes on in a new one from the next case; when the subprocess dies, its case is
a crash. Prints the counts (cases tried, successes, typed errors, crashes,
hangs, untyped errors, mismatches against onnxruntime, files read outside)
and returns them as a FuzzReport.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BAIT = b"bait: never read me\n"


@dataclass
class FuzzReport:
    """Counts of a fuzz run; `problems` holds one dict per crash, hang, untyped error, mismatch or outside read."""

    tried: int = 0
    ok: int = 0              # every call of the case succeeded (a benign mutation)
    typed: int = 0           # the case ended in one of our errors
    crashes: int = 0
    hangs: int = 0
    untyped: int = 0
    mismatches: int = 0      # succeeded with values unlike onnxruntime's
    outside: int = 0         # cases that opened a file of the bait directory
    reference_crashes: list = field(default_factory=list)  # the reference (onnxruntime, OpenCV) killed the process
    #   while it compared a case we had run: not ours (listed; onnxruntime's AVX2 QLinearGlobalAveragePool divides
    #   by an empty input's size)
    compared: Counter = field(default_factory=Counter)
    errors: Counter = field(default_factory=Counter)
    families: Counter = field(default_factory=Counter)
    problems: list = field(default_factory=list)
    ort_refuses: list = field(default_factory=list)  # cases we ran and onnxruntime refused (for review)
    reference: list = field(default_factory=list)  # cases where ours is onnx.reference's, not onnxruntime's
    seconds: float = 0.0

    def add(self, r: dict) -> None:
        self.tried += 1
        self.families[r["family"]] += 1
        outcomes = r["outcomes"]
        self.errors.update(o.split(":", 1)[1] for o in outcomes if ":" in o)
        if r.get("outside"):
            self.outside += 1
            self.problems.append({"kind": "outside", **r})
        if any(o.startswith("untyped:") for o in outcomes):
            self.untyped += 1
            self.problems.append({"kind": "untyped", **r})
        elif any(o.startswith("typed:") for o in outcomes):
            self.typed += 1
        else:
            self.ok += 1
        if "compared" in r:
            self.compared[r["compared"]] += 1
            if r["compared"] == "ort_refuses":
                self.ort_refuses.append(r)
            if r["compared"] == "reference":  # onnxruntime differs; ours is onnx.reference's (for review)
                self.reference.append(r)
            if r["compared"] == "mismatch":
                self.mismatches += 1
                self.problems.append({"kind": "mismatch", **r})

    def failure(self, kind: str, index: int, detail: str) -> None:
        self.tried += 1
        setattr(self, kind, getattr(self, kind) + 1)
        self.problems.append({"kind": kind, "i": index, "detail": detail})

    def summary(self) -> str:
        lines = [f"fuzz: {self.tried} cases in {self.seconds:.1f} s: {self.ok} succeeded, {self.typed} typed errors, "
                 f"{self.crashes} crashes, {self.hangs} hangs, {self.untyped} untyped errors, "
                 f"{self.mismatches} mismatches with onnxruntime, {self.outside} read files outside"
                 + (f"; the reference crashed on {len(self.reference_crashes)} (cases "
                    f"{sorted(self.reference_crashes)[:10]}: not ours)" if self.reference_crashes else ""),
                 f"  families: {dict(self.families)}",
                 f"  successes compared with onnxruntime: {dict(self.compared)}",
                 f"  errors: {dict(self.errors.most_common())}"]
        for p in self.problems[:20]:
            lines.append(f"  PROBLEM {p['kind']} case {p['i']}: {p.get('what', '')}\n{p.get('detail', '')[-1500:]}")
        return "\n".join(lines)


def run_fuzz(count: int, seed: int = 0, processes: int = 2, case_timeout: float = 30.0,
             as_bytes: int = 4 << 30, budget: int = 256 << 20, start: int = 0,
             workdir: str | None = None) -> FuzzReport:
    """Run cases start..start+count of `seed` in `processes` subprocesses; return the counts."""
    report = FuzzReport()
    lock = threading.Lock()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="pp-fuzz-") as tmp:
        workdir = workdir or tmp
        os.makedirs(os.path.join(workdir, "bait"), exist_ok=True)
        os.makedirs(os.path.join(workdir, "cases"), exist_ok=True)
        with open(os.path.join(workdir, "bait", "secret.bin"), "wb") as f:
            f.write(BAIT * 64)
        chunks = [(start + count * k // processes, start + count * (k + 1) // processes) for k in range(processes)]
        threads = [threading.Thread(target=_run_range, args=(a, b, seed, workdir, case_timeout, as_bytes, budget,
                                                             report, lock)) for a, b in chunks if b > a]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    report.seconds = time.perf_counter() - t0
    return report


def _run_range(a: int, b: int, seed: int, workdir: str, case_timeout: float, as_bytes: int, budget: int,
               report: FuzzReport, lock: threading.Lock) -> None:
    nxt = a
    while nxt < b:
        cmd = [sys.executable, "-m", "tests.fuzz.child", "--seed", str(seed), "--start", str(nxt), "--stop", str(b),
               "--workdir", workdir, "--as-bytes", str(as_bytes), "--budget", str(budget)]
        # the cases' model cache (the cache's code runs on crafted models too) lies in workdir, removed with it
        # (the caller's PYTHONPATH kept after ROOT: tests/avx2_target.sh's ORT_AVX2=1 puts its onnxruntime there)
        path = os.pathsep.join([ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
        env = {**os.environ, "PYTHONPATH": path, "POOLED_PREDICTOR_CACHE_DIR": os.path.join(workdir, "model-cache")}
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True, env=env)
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=lambda: [lines.put(l) for l in proc.stdout] + [lines.put(None)], daemon=True).start()
        err_tail: list[str] = []
        threading.Thread(target=lambda: [err_tail.append(l) or err_tail.__delitem__(slice(0, -40))
                                         for l in proc.stderr], daemon=True).start()
        current = comparing = None
        timeout = 300.0  # imports (numba, onnxruntime) before the first case
        while True:
            try:
                line = lines.get(timeout=timeout)
            except queue.Empty:  # a hang: kill the subprocess, go on after this case
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                with lock:
                    report.failure("hangs", current if current is not None else nxt,
                                   f"no report within {timeout:.0f} s")
                nxt = (current if current is not None else nxt) + 1
                break
            if line is None:  # the subprocess ended
                proc.wait()
                if current is not None and comparing == current:  # in onnxruntime's (OpenCV's) run, after ours
                    with lock:
                        report.tried += 1
                        report.reference_crashes.append(current)
                    nxt = current + 1
                elif current is not None:
                    with lock:
                        report.failure("crashes", current, f"exit status {proc.returncode}\n" + "".join(err_tail))
                    nxt = current + 1
                elif nxt < b:  # it died before starting a case
                    with lock:
                        report.failure("crashes", nxt, f"exit status {proc.returncode}\n" + "".join(err_tail))
                    nxt += 1
                break
            msg = json.loads(line)
            timeout = case_timeout
            if "start" in msg:
                current = msg["start"]
            elif "comparing" in msg:
                comparing = msg["comparing"]
            elif "outcomes" in msg:
                with lock:
                    report.add(msg)
                nxt, current = msg["i"] + 1, None
        if nxt >= b:
            break


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=int(os.environ.get("POOLED_PREDICTOR_FUZZ_CASES", 3000)))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--only", type=int, help="run one case (replay)")
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--case-timeout", type=float, default=30.0)
    ap.add_argument("--json", help="write the counts here")
    ap.add_argument("--show-ort-refusals", action="store_true",
                    help="list the cases onnxruntime refused and we ran, and those where ours is onnx.reference's "
                         "and onnxruntime's differs")
    args = ap.parse_args(argv)
    start, count = (args.only, 1) if args.only is not None else (args.start, args.count)
    report = run_fuzz(count, args.seed, args.processes if count > 1 else 1, args.case_timeout, start=start)
    print(report.summary())
    if args.show_ort_refusals:
        for r in report.ort_refuses:
            print(f"  case {r['i']} {r['family']}: {r['what']}: onnxruntime: {r.get('ort_error', '')[:200]}")
        for r in report.reference:
            print(f"  case {r['i']} {r['family']}: {r['what']}: ours is onnx.reference's, onnxruntime's differs: "
                  f"{r.get('detail', '')[:200]}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({k: (dict(v) if isinstance(v, Counter) else v) for k, v in vars(report).items()}, f, indent=1)
    bad = report.crashes + report.hangs + report.untyped + report.mismatches + report.outside
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
