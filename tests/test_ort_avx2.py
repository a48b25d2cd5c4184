"""benchmarks/ort_avx2.py's patch-site search, on byte strings laid out as MLAS's platform setup is.

The copy it makes and checks (SGEMM rate, NCHWc block) needs an AVX-512 host and is run by hand; here: the
two jumps are found where they are, only those bytes change, and any other layout is refused.
"""

from __future__ import annotations

import json

import pytest

from benchmarks import ort_avx2

# test $0x10000, %r10d; je +0x0e; mov %r8, %rax; not %rax; test $0xe0, %al; je near
AVX512F = bytes.fromhex("41f7c200000100" "740e" "4c89c0" "48f7d0" "a8e0" "0f8454010000")
# mov $7, %eax; mov $1, %ecx; cpuid; test $0x10, %al; je +0x38
AVX_VNNI = bytes.fromhex("b807000000" "b901000000" "0fa2" "a810" "7438")
FILLER = bytes(range(256)).replace(b"\x74", b"\x90") * 2


def image(*parts: bytes) -> bytes:
    return b"".join(parts)


def test_both_jumps_are_found_at_their_je_bytes():
    data = image(FILLER, AVX_VNNI, FILLER[:100], AVX512F, FILLER)
    sites = ort_avx2.patch_sites(data)
    assert [data[s] for s in sites] == [0x74, 0x74]
    assert sites[0] == len(FILLER) + len(AVX_VNNI) + 100 + 7  # the short je after the AVX512F test
    assert sites[1] == len(FILLER) + len(AVX_VNNI) - 2  # the short je after the AVX-VNNI test


@pytest.mark.parametrize("layout", ["missing", "twice", "apart"])
def test_other_layouts_are_refused(layout):
    data = {"missing": image(FILLER, AVX_VNNI, FILLER),
            "twice": image(AVX512F, AVX_VNNI, FILLER, AVX512F),
            "apart": image(AVX512F, bytes(0x2000), AVX_VNNI)}[layout]
    with pytest.raises(RuntimeError, match="no copy made"):
        ort_avx2.patch_sites(data)


def test_the_result_block_names_the_dispatch(tmp_path, monkeypatch):
    import onnxruntime

    from benchmarks import _common

    monkeypatch.setattr(onnxruntime, "__file__", str(tmp_path / "__init__.py"))  # a package without the marker
    assert _common.machine()["onnxruntime_dispatch"] == "native"
    (tmp_path / ort_avx2.MARKER).write_text(json.dumps({"dispatch": "avx2"}))
    assert _common.machine()["onnxruntime_dispatch"] == "avx2 (patched copy)"
