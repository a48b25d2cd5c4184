"""memory_opt: plan the activation memory of a step list into one arena.

Pure Python + numpy; usable without pooled_predictor.

    from memory_opt import Step, analyze, plan_arena
    liveness = analyze(steps, sizes, inputs=["x"], outputs=["y"])
    plan = plan_arena(liveness)
    plan.validate()
    plan.offsets["y"], plan.arena_bytes, plan.lower_bound_bytes

Sources: fb-caffe-exts optimizeMemory (live ranges, shared buffers);
Pisarchyk & Lee 2020, "Efficient Memory Management for Deep Neural Net
Inference" (greedy by size offsets); TFLite arena planner.
"""

from .liveness import (BEFORE_FIRST_STEP, LiveRange, Liveness, Step, analyze,
                       buffer_sizes, lower_bound, peak_live_bytes)
from .plan import Plan, PlanError
from .planners import MIN_BYTES_FOR_SHARING, plan_arena, plan_naive, plan_shared_buffers
from .report import format_table, plan_row, plot_plan

__all__ = [
    "BEFORE_FIRST_STEP", "LiveRange", "Liveness", "MIN_BYTES_FOR_SHARING", "Plan",
    "PlanError", "Step", "analyze", "buffer_sizes", "format_table", "lower_bound",
    "peak_live_bytes", "plan_arena", "plan_naive", "plan_row", "plan_shared_buffers",
    "plot_plan",
]
