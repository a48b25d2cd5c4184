"""Every ```python block of README.md runs as written, each in a fresh interpreter.

A block that fetches models (it calls a `fetch_*` of pooled_predictor.zoo) is skipped when
they are neither cached nor downloadable (offline, empty cache); a block that is not meant
to run is not a ```python block (```text, or a bare ```).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)


def python_blocks() -> list[tuple[int, str]]:
    """(line number of the opening fence, code) of each ```python block of the README."""
    text = README.read_text()
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in BLOCK.finditer(text)]


def test_the_readme_has_python_blocks():
    assert python_blocks(), "README.md has no ```python block"


def _fetchers_or_skip(code: str) -> None:
    from pooled_predictor import FetchError
    from pooled_predictor import zoo

    for name in sorted(set(re.findall(r"\b(fetch_\w+)\(", code))):
        try:
            getattr(zoo, name)()
        except FetchError as exc:  # offline with an empty cache: nothing to run the block on
            pytest.skip(f"README block needs {name}(), which cannot fetch here: {str(exc).splitlines()[0]}")


@pytest.mark.parametrize("line,code", python_blocks(), ids=lambda v: f"line{v}" if isinstance(v, int) else "")
def test_readme_python_block_runs(line, code, tmp_path):
    _fetchers_or_skip(code)
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600, env=_env())
    assert proc.returncode == 0, f"README.md line {line}:\n{proc.stdout}\n{proc.stderr}"


def _env() -> dict:
    """This process's environment, with this checkout first on sys.path (the block runs in tmp_path)."""
    import os

    env = dict(os.environ)
    root = str(README.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env
