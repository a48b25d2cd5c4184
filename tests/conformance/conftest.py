"""Summary of the ONNX node conformance run, printed at the end of the session:

    cpu: 673 selected of 1884 node cases (onnx 1.23.2); ran 673: 671 passed, 2 failed, 0 skipped
      FAILED Resize (2):
        test_resize_downsample_scales_linear_align_corners: AssertionError: ...
    cuda: ...
    excluded: 120 supported cases, by pattern:
      '*FLOAT8*': 52 (float8 types have no numpy dtype)
    not selected: 1091 cases use ops with no cpu kernel; most needed: CastLike (227), ...

Failures are grouped by the op types of the case's graph (joined with '+'
for the multi-node `_expanded` cases).
"""

from __future__ import annotations

import collections

import onnx

_MODULE = "tests/conformance/test_onnx_node.py"
_results: dict[str, tuple[str, str]] = {}  # test id -> (outcome, first line of the error)


def pytest_runtest_logreport(report):
    if _MODULE not in report.nodeid:
        return
    test_id = report.nodeid.split("[", 1)[-1].rstrip("]")
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        message = ""
        if report.failed:
            crash = getattr(report.longrepr, "reprcrash", None)
            message = crash.message if crash is not None else str(report.longrepr)
            message = " ".join(message.split())[:240]
        _results[test_id] = (report.outcome, message)


def pytest_terminal_summary(terminalreporter):
    if not _results:
        return
    from tests.conformance.node_cases import EXCLUDE, case_ops, missing_op_counts, select

    sel = select()
    ops_of = {c.name: case_ops(c) for c in sel.selected}
    tr = terminalreporter
    tr.section("ONNX node conformance")
    for device in ("cpu", "cuda"):
        ran = {k[: -len(device) - 1]: v for k, v in _results.items() if k.endswith("_" + device)}
        counts = collections.Counter(outcome for outcome, _ in ran.values())
        tr.write_line(f"{device}: {len(sel.selected)} selected of {sel.total} node cases "
                      f"(onnx {onnx.__version__}); ran {len(ran)}: {counts['passed']} passed, "
                      f"{counts['failed']} failed, {counts['skipped']} skipped")
        failures = {name: msg for name, (outcome, msg) in ran.items() if outcome == "failed"}
        by_op: dict[str, list[str]] = collections.defaultdict(list)
        for name in failures:
            by_op["+".join(ops_of.get(name, ["?"]))].append(name)
        for op, names in sorted(by_op.items()):
            tr.write_line(f"  FAILED {op} ({len(names)}):")
            for name in names:
                tr.write_line(f"    {name}: {failures[name]}")
    tr.write_line(f"excluded: {sum(len(v) for v in sel.excluded.values())} supported cases, by pattern:")
    for pattern, names in sel.excluded.items():
        tr.write_line(f"  {pattern!r}: {len(names)} ({EXCLUDE[pattern]})")
    tr.write_line(f"not selected: {len(sel.unsupported)} cases use ops with no cpu kernel; most needed: "
                  + ", ".join(f"{op} ({n})" for op, n in missing_op_counts(sel)[:25]))
