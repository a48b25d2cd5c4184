"""The fuzz suite (issue 14): mutated models and requests, each case in a subprocess with a
timeout and a memory limit; only our typed errors (or, for benign mutations, the values
onnxruntime computes; where it differs or refuses, those of onnx's reference implementation),
no crash, no hang, no file read outside the model's directory.

POOLED_PREDICTOR_FUZZ_CASES sets the number of cases (default 3000, about 20 s on 2
cores); `python -m tests.fuzz.harness --count 20000` runs a larger count and prints it.
"""

import os

from tests.fuzz.cases import FAMILIES
from tests.fuzz.harness import run_fuzz

CASES = int(os.environ.get("POOLED_PREDICTOR_FUZZ_CASES", 3000))
SEED = int(os.environ.get("POOLED_PREDICTOR_FUZZ_SEED", 0))


def test_fuzz_models_and_requests():
    report = run_fuzz(CASES, seed=SEED, processes=2, case_timeout=60.0)
    print("\n" + report.summary())
    assert report.tried == CASES
    assert (report.crashes, report.hangs, report.untyped, report.mismatches, report.outside) == (0, 0, 0, 0, 0), \
        report.summary()
    assert report.typed > CASES // 2 and report.ok > 0 and report.compared["same"] > 0
    assert all(report.families[f] > 0 for f in FAMILIES)


def test_harness_counts_hangs_crashes_and_outside_reads(tmp_path, monkeypatch):
    """The harness itself: case 0 hangs, case 1 kills its process, case 2 opens the bait."""
    monkeypatch.setenv("POOLED_PREDICTOR_FUZZ_SABOTAGE", "1")
    report = run_fuzz(3, seed=0, processes=1, case_timeout=5.0, workdir=str(tmp_path))
    assert (report.hangs, report.crashes, report.outside) == (1, 1, 1), report.summary()


def test_a_crash_in_the_reference_is_not_ours(tmp_path, monkeypatch):
    """A process killed after ours ran, while onnxruntime (or OpenCV) computes the reference (onnxruntime's AVX2
    QLinearGlobalAveragePool divides by an empty input's size): listed apart, not a crash of ours."""
    monkeypatch.setenv("POOLED_PREDICTOR_FUZZ_SABOTAGE", "reference")
    report = run_fuzz(40, seed=0, processes=1, case_timeout=30.0, workdir=str(tmp_path))
    assert report.tried == 40 and report.crashes == 0 and report.hangs == 0, report.summary()
    assert report.reference_crashes and not report.compared  # every case that reached its comparison died there
    assert "the reference crashed on" in report.summary()

