"""Human-readable reports of plans: a text table and an allocation plot."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from .liveness import Liveness
from .plan import Plan

MIB = 1 << 20


def plan_row(name: str, plan: Plan) -> dict:
    """One table row for `format_table`: the model name and the plan's metrics.

    Args:
        name: what was planned (model name).
        plan: the plan.
    Returns:
        dict with "model", "planner", "values", byte columns (ints, bytes) and
        "efficiency" (arena / lower bound), "saved" (1 - arena / naive).
    """
    return {
        "model": name,
        "planner": plan.planner,
        "values": len(plan.offsets),
        "naive_bytes": plan.naive_bytes,
        "bound_no_inplace_bytes": plan.lower_bound_no_inplace_bytes,
        "bound_bytes": plan.lower_bound_bytes,
        "arena_bytes": plan.arena_bytes,
        "efficiency": plan.efficiency,
        "saved": plan.reduction_vs_naive,
    }


def _cell(column: str, value) -> str:
    if column.endswith("_bytes") and isinstance(value, (int, float)):
        return f"{value / MIB:.2f}"
    if isinstance(value, float):
        return f"{value:.3f}" if round(value, 3) else "0.000"  # no "-0.000"
    return str(value)


def format_table(rows: Sequence[Mapping[str, object]], columns: Sequence[str] | None = None) -> str:
    """Plain-text table with aligned columns.

    Args:
        rows: one mapping column -> value per row (e.g. from `plan_row`).
        columns: the columns to show, in order; default: every key, in order of
            first appearance.
    Returns:
        The table as a str (header, rule, rows), no trailing newline. Columns
        named ``*_bytes`` are shown in MiB with 2 decimals (header ``* (MiB)``),
        other floats with 3 decimals; numbers are right-aligned, text left.
    """
    if columns is None:
        columns = list(dict.fromkeys(key for row in rows for key in row))
    headers = [c[:-len("_bytes")] + " (MiB)" if c.endswith("_bytes") else c for c in columns]
    cells = [[_cell(c, row.get(c, "")) for c in columns] for row in rows]
    numeric = [all(isinstance(row.get(c), (int, float)) for row in rows if c in row) for c in columns]
    widths = [max([len(h)] + [len(r[k]) for r in cells]) for k, h in enumerate(headers)]

    def line(values):
        return "  ".join(v.rjust(w) if num else v.ljust(w)
                         for v, w, num in zip(values, widths, numeric)).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in cells])


def plot_plan(plan: Plan, liveness: Liveness, sizes: Mapping[str, int] | None, path: str | os.PathLike,
              title: str | None = None) -> str:
    """Save a PNG of the plan: one rectangle per value, in step x arena-offset space.

    x is the step (graph inputs span -1 .. num_steps), y the offset in the arena
    (MiB); each value is a rectangle from its first to its last step, as tall as
    its bytes, colored per buffer (per shared region for the shared-buffer
    plan), as in fb-caffe-exts' AlexNet/GoogLeNet figures. A dashed line marks
    the lower bound, a solid one the arena size. matplotlib is imported here
    only, with the Agg canvas (no pyplot, no global backend change).

    Args:
        plan: the plan to draw.
        liveness: the liveness it was planned from (per-value ranges).
        sizes: value -> bytes; None takes them from the plan.
        path: where to write the PNG.
        title: figure title; default names the planner and its numbers.
    Returns:
        str(path).
    Raises:
        ImportError: matplotlib is not installed.
    """
    from matplotlib import colormaps
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.collections import PatchCollection
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    if plan.groups:
        color_of = {v: k for k, group in enumerate(plan.groups) for v in group}
    else:
        index = {b: k for k, b in enumerate(plan.sizes)}
        color_of = {v: index[b] for v, b in plan.buffer_of.items()}
    figure = Figure(figsize=(12, 5), dpi=110)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    palette = colormaps["tab20"]
    patches, colors = [], []
    for value, r in liveness.value_ranges.items():
        nbytes = sizes[value] if sizes is not None else plan.sizes[plan.buffer_of[value]]
        if nbytes == 0:
            continue
        patches.append(Rectangle((r.first - 0.45, plan.offsets[value] / MIB),
                                 r.last - r.first + 0.9, nbytes / MIB))
        colors.append(palette(color_of[value] % 20))
    axes.add_collection(PatchCollection(patches, facecolors=colors, edgecolors="black",
                                        linewidths=0.2, alpha=0.85))
    axes.axhline(plan.lower_bound_bytes / MIB, color="red", linestyle="--", linewidth=1,
                 label=f"lower bound {plan.lower_bound_bytes / MIB:.2f} MiB")
    axes.axhline(plan.arena_bytes / MIB, color="black", linewidth=1,
                 label=f"arena {plan.arena_bytes / MIB:.2f} MiB")
    axes.set_xlim(-1.5, liveness.num_steps + 0.5)
    axes.set_ylim(0, max(plan.arena_bytes, plan.lower_bound_bytes, 1) / MIB * 1.05)
    axes.set_xlabel("step")
    axes.set_ylabel("offset in arena (MiB)")
    axes.legend(loc="lower right", bbox_to_anchor=(1.0, 1.0), ncols=2, frameon=False,
                fontsize="small")
    axes.set_title(title or f"{plan.planner}: arena {plan.arena_bytes / MIB:.2f} MiB, "
                            f"naive {plan.naive_bytes / MIB:.2f} MiB, "
                            f"{plan.efficiency:.3f} x lower bound", loc="left", fontsize="medium")
    figure.tight_layout()
    figure.savefig(os.fspath(path))
    return os.fspath(path)
