"""The package's layers and who may import whom (pooled_predictor/__init__.py states them).

Every import of the package's own modules is read from the source (ast), at module top
or inside a function, and checked against the rules:

* no circle between modules;
* no import from a lower layer into a higher one (LAYERS, lowest first); peers in one
  layer (ops, importers) do not import each other;
* imports of the package's own modules sit at module top (a function-level import is
  how a circle hides);
* memory_opt imports nothing of pooled_predictor;
* a module's `_LAZY` table (name -> module, imported on first use through PEP 562's
  module __getattr__: pooled_predictor/__init__.py) counts as imports at its top;
* third-party packages only where they belong (numba and llvmlite in ops/cpu/compiled,
  cupy in the CUDA device code, ray in serve, h5py in the Caffe importer,
  prometheus_client and threadpoolctl in serving).

test_checker_flags_planted_violations shows the checker fails on a planted upward
import, a circle and a function-level import, so a green run means something.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("pooled_predictor", "memory_opt")

# lowest first; a module may import its own layer's modules and lower layers'
LAYERS = [
    {"pooled_predictor.errors", "pooled_predictor.budget", "pooled_predictor.ir", "pooled_predictor.contrib_schemas"},
    {"pooled_predictor.ops", "pooled_predictor.importers"},
    {"pooled_predictor.passes"},
    {"pooled_predictor.engine"},
    {"pooled_predictor.serving"},
    {"pooled_predictor.serve", "pooled_predictor.zoo", "pooled_predictor.apps", "pooled_predictor.cli",
     "pooled_predictor.__main__", "pooled_predictor"},
]
PEERS_APART = [("pooled_predictor.importers", "pooled_predictor.ops")]

# third-party package -> module prefixes allowed to import it
CONFINED = {
    "numba": ("pooled_predictor.ops.cpu.compiled",),
    "llvmlite": ("pooled_predictor.ops.cpu.compiled",),
    "cupy": ("pooled_predictor.ops.cuda", "pooled_predictor.engine.device"),
    "ray": ("pooled_predictor.serve",),
    "starlette": ("pooled_predictor.serve",),
    "h5py": ("pooled_predictor.importers.caffe",),
    "prometheus_client": ("pooled_predictor.serving.prometheus",),
    "threadpoolctl": ("pooled_predictor.serving.blas",),
    "onnxruntime": (),
    "pooled_predictor": ("pooled_predictor",),  # and never from memory_opt
}


def modules(root: Path = ROOT) -> dict[str, tuple[Path, bool]]:
    """module name -> (file, is a package __init__)."""
    out = {}
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            is_pkg = parts[-1] == "__init__"
            if is_pkg:
                parts = parts[:-1]
            out[".".join(parts)] = (path, is_pkg)
    return out


def imports_of(name: str, source: str, is_pkg: bool, known) -> list[tuple[str, int, bool]]:
    """(imported module, line, at module top) for every import statement in `source`.

    `from x import y` counts as importing x.y when that is a module, else x. Imports under
    `if TYPE_CHECKING:` are skipped (they never run).
    """
    tree = ast.parse(source)
    top_level = set()
    for stmt in tree.body:
        if isinstance(stmt, ast.If) and "TYPE_CHECKING" in ast.unparse(stmt.test):
            continue
        for node in ast.walk(stmt):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and not _in_function(stmt, node):
                top_level.add(id(node))
    skipped = {id(n) for stmt in tree.body if isinstance(stmt, ast.If) and "TYPE_CHECKING" in ast.unparse(stmt.test)
               for n in ast.walk(stmt)}
    found = []
    for stmt in tree.body:  # _LAZY = {"Name": ".module", ...}: imports made on first use, read as top-level
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_LAZY" for t in stmt.targets) \
                and isinstance(stmt.value, ast.Dict):
            for v in stmt.value.values:
                if isinstance(v, ast.Constant) and isinstance(v.value, str):
                    level = len(v.value) - len(v.value.lstrip("."))
                    if level:
                        base = name.split(".") if is_pkg else name.split(".")[:-1]
                        base = base[:len(base) - (level - 1)]
                        mod = ".".join(base + ([v.value[level:]] if v.value[level:] else []))
                    else:
                        mod = v.value
                    found.append((mod, v.lineno, True))
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in known else mod for a in node.names]
        else:
            continue
        for t in targets:
            found.append((t, node.lineno, id(node) in top_level))
    return found


def _in_function(stmt, node) -> bool:
    """True when `node` sits inside a function or class body below `stmt` (or is one)."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return True
    stack = [(stmt, False)]
    while stack:
        cur, inside = stack.pop()
        if cur is node:
            return inside
        for child in ast.iter_child_nodes(cur):
            stack.append((child, inside or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))))
    return False


def graph(mods: dict) -> tuple[dict, list]:
    """Edges module -> {module: first line} between the package's modules, and every import
    as (importer, imported, line, at top)."""
    edges: dict[str, dict[str, int]] = {m: {} for m in mods}
    every = []
    for m, (path, is_pkg) in mods.items():
        for target, line, top in imports_of(m, path.read_text(), is_pkg, mods):
            every.append((m, target, line, top))
            t = target
            while t not in mods and "." in t:
                t = t.rsplit(".", 1)[0]
            if t in mods and t != m:
                edges[m].setdefault(t, line)
    return edges, every


def layer_of(module: str):
    """(index of its layer, the layer member it belongs to) by the longest matching prefix."""
    best = None
    for i, members in enumerate(LAYERS):
        for p in members:
            if (module == p or module.startswith(p + ".")) and (best is None or len(p) > len(best[1])):
                best = (i, p)
    return best


def circles(edges: dict) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def violations(mods: dict) -> list[str]:
    """Every broken rule, one line each (empty: the package keeps its layers)."""
    edges, every = graph(mods)
    problems = [f"circle: {' <-> '.join(c)}" for c in circles(edges)]
    for m, targets in edges.items():
        if m.startswith("memory_opt"):
            continue
        lm = layer_of(m)
        for t, line in targets.items():
            if t.startswith("memory_opt"):
                continue
            lt = layer_of(t)
            if lm is None or lt is None:
                problems.append(f"{m}:{line} imports {t}: a module outside every layer")
            elif lt[0] > lm[0]:
                problems.append(f"upward: {m}:{line} imports {t} (layer {lm[1]} may not import {lt[1]})")
            elif lt[0] == lm[0] and (lm[1], lt[1]) in PEERS_APART + [(b, a) for a, b in PEERS_APART]:
                problems.append(f"peers: {m}:{line} imports {t} ({lm[1]} and {lt[1]} stay apart)")
    for m, target, line, top in every:
        own = target.split(".")[0] in PACKAGES
        if own and not top:
            problems.append(f"function-level import: {m}:{line} imports {target} (move it to the module's top)")
        root = target.split(".")[0]
        if root in CONFINED:
            allowed = CONFINED[root]
            ok = any(m == p or m.startswith(p + ".") for p in allowed)
            if not ok and not (root == "pooled_predictor" and m.startswith("memory_opt")):
                problems.append(f"confined: {m}:{line} imports {root} (allowed only in {allowed or 'tests'})")
            if root == "pooled_predictor" and m.startswith("memory_opt"):
                problems.append(f"memory_opt: {m}:{line} imports {target} (memory_opt stands alone)")
    return problems


def test_the_package_keeps_its_layers():
    problems = violations(modules())
    assert not problems, "\n" + "\n".join(problems)


def test_checker_flags_planted_violations(tmp_path):
    """A copy of the package with an upward import, a circle, a function-level import and an upward
    _LAZY entry planted:
    each is reported (the rules can fail)."""
    import shutil

    for pkg in PACKAGES:
        shutil.copytree(ROOT / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    ir = tmp_path / "pooled_predictor" / "ir.py"
    ir.write_text(ir.read_text() + "\nfrom .engine import net as _planted  # upward\n")
    plan = tmp_path / "memory_opt" / "plan.py"
    plan.write_text(plan.read_text() + "\n\ndef _planted():\n    import pooled_predictor.errors\n")
    errors = tmp_path / "pooled_predictor" / "errors.py"
    errors.write_text(errors.read_text() + '\n_LAZY = {"Net": ".engine.net"}  # upward, on first use\n')
    problems = violations(modules(tmp_path))
    assert any(p.startswith("upward: pooled_predictor.errors:") and "pooled_predictor.engine.net" in p
               for p in problems), problems
    assert any(p.startswith("upward: pooled_predictor.ir:") and "pooled_predictor.engine.net" in p
               for p in problems), problems
    assert any(p.startswith("circle:") and "pooled_predictor.ir" in p for p in problems), problems
    assert any(p.startswith("memory_opt: memory_opt.plan:") for p in problems), problems
    assert any(p.startswith("function-level import: memory_opt.plan:") for p in problems), problems
