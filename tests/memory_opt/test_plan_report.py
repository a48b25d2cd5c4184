"""The text table and the allocation plot."""

import pytest

from memory_opt import analyze, format_table, plan_arena, plan_row, plan_shared_buffers, plot_plan
from memory_opt import synthetic


def test_format_table_aligns_columns_and_shows_mib():
    rows = [{"model": "tiny", "arena_bytes": 3 << 20, "efficiency": 1.0},
            {"model": "a-longer-name", "arena_bytes": 123456789, "efficiency": 1.23456}]
    assert format_table(rows).splitlines() == [
        "model          arena (MiB)  efficiency",
        "-------------  -----------  ----------",
        "tiny                  3.00       1.000",
        "a-longer-name       117.74       1.235",
    ]


def test_format_table_columns_and_missing_cells():
    table = format_table([{"a": 1, "b": "x"}, {"a": 22}], columns=["b", "a"])
    assert table.splitlines() == ["b   a", "-  --", "x   1", "   22"]


def test_plan_row_feeds_the_table():
    lv = analyze(*synthetic.alexnet())
    table = format_table([plan_row("alexnet", plan_arena(lv)),
                          plan_row("alexnet", plan_shared_buffers(lv))])
    header, rule, arena, shared = table.splitlines()
    assert header.split()[:3] == ["model", "planner", "values"]
    assert arena.split()[1] == "arena" and shared.split()[1] == "shared_buffers"
    assert len({len(line) for line in (header, rule)}) == 1


@pytest.mark.parametrize("planner", [plan_arena, plan_shared_buffers])
def test_plot_plan_writes_a_png(tmp_path, planner):
    pytest.importorskip("matplotlib")
    net = synthetic.googlenet()
    lv = analyze(*net)
    path = plot_plan(planner(lv), lv, net.sizes, tmp_path / "plan.png", title="GoogLeNet")
    with open(path, "rb") as png:
        assert png.read(8) == b"\x89PNG\r\n\x1a\n"
