"""ONNX's own node conformance tests on our Net, one test id per case and device.

Ids are onnx's: `test_<case>_cpu`, `test_<case>_cuda`. The cases are selected
by the op types of their nodes (see node_cases.py); the `_cuda` variants skip
where cupy or a GPU is missing, or where an op has no cuda kernel. The
session's summary (conftest.py) prints the counts, the exclusions with their
reasons, and the failures grouped by op.
"""

from __future__ import annotations

import pytest

from tests.conformance.node_cases import cuda_skip_reason, run_case, select

# One case is a few small arrays: a case that takes a minute is a bug, not a slow machine.
pytestmark = pytest.mark.timeout(60)


def _params():
    params = []
    for case in select().selected:
        params.append(pytest.param(case, "cpu", id=f"{case.name}_cpu"))
        reason = cuda_skip_reason(case)
        marks = [pytest.mark.gpu] + ([pytest.mark.skip(reason=reason)] if reason else [])
        params.append(pytest.param(case, "cuda", id=f"{case.name}_cuda", marks=marks))
    return params


@pytest.mark.parametrize("case,device", _params())
def test_onnx_node(case, device):
    run_case(case, device)
