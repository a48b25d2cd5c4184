"""The engine: a Graph compiled for a device and run over planned memory.

    program.py       Graph + device -> Program (a Step per node, constants folded, bodies compiled)
    layout.py        the compile-for-shapes pipeline: build_layout(program, shapes, device, ...) -> Layout
                     (infer and bind, assign kernel types, plan the arena, bind arrays)
    arena.py         the arena stage: memory_opt's plan, Concat inputs stored in place
    layout_cache.py  a Net's layouts by input shapes, within a byte budget
    device.py        Device: arena buffers, views, weight placement, host<->device copies (CPU)
    inputs.py        InputSpec, the one input validator; fill_out
    control_flow.py  If/Loop/Scan bodies as nested Nets (the body runner handed down to kernels)
    net.py           Net: weights, cached layouts, forward() (the one way in)
    profiling.py     per-node timing, tables and Chrome traces

A request's inputs reach the kernels as serving -> InputSpec.check -> Net.forward ->
(LayoutCache -> build_layout on new shapes) -> Layout.feed -> the bound calls in order.
"""
