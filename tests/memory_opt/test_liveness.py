"""Live ranges, in-place merges and the lower bound on hand-written step lists."""

import pytest

from memory_opt import BEFORE_FIRST_STEP, LiveRange, Step, analyze, lower_bound


def chain_with_relu(**sizes):
    """x -> conv -> a; relu(a) -> b (in place); conv(b) -> y."""
    steps = [Step(("x",), ("a",)), Step(("a",), ("b",), {"b": "a"}), Step(("b",), ("y",))]
    all_sizes = {"x": 100, "a": 400, "b": 400, "y": 200}
    all_sizes.update(sizes)
    return steps, all_sizes


class TestRanges:
    def test_inputs_are_always_live(self):
        steps, sizes = chain_with_relu()
        lv = analyze(steps, sizes, inputs=["x"], outputs=["y"])
        assert lv.value_ranges["x"] == LiveRange(BEFORE_FIRST_STEP, 3)
        assert lv.ranges["x"] == LiveRange(-1, lv.num_steps)

    def test_written_values_live_from_write_to_last_read(self):
        steps, sizes = chain_with_relu()
        lv = analyze(steps, sizes, inputs=["x"], outputs=["y"], inplace=False)
        assert lv.value_ranges == {"x": LiveRange(-1, 3), "a": LiveRange(0, 1),
                                   "b": LiveRange(1, 2), "y": LiveRange(2, 2)}
        assert lv.alias_of == {v: v for v in "xaby"}

    def test_outputs_live_to_the_last_step(self):
        steps = [Step(("x",), ("early",)), Step(("x",), ("t",)), Step(("t",), ("late",))]
        lv = analyze(steps, {"x": 1, "early": 1, "t": 1, "late": 1},
                     inputs=["x"], outputs=["early", "late"])
        assert lv.value_ranges["early"] == LiveRange(0, 2)
        assert lv.value_ranges["late"] == LiveRange(2, 2)

    def test_read_output_still_lives_to_the_end(self):
        steps = [Step(("x",), ("o",)), Step(("o",), ("t",)), Step(("x",), ("u",))]
        lv = analyze(steps, dict.fromkeys(["x", "o", "t", "u"], 8), inputs=["x"], outputs=["o"])
        assert lv.value_ranges["o"] == LiveRange(0, 2)

    def test_unused_value_lives_only_at_its_step(self):
        steps = [Step(("x",), ("a", "unused")), Step(("a",), ("y",))]
        lv = analyze(steps, dict.fromkeys(["x", "a", "unused", "y"], 8), inputs=["x"], outputs=["y"])
        assert lv.value_ranges["unused"] == LiveRange(0, 0)

    def test_input_also_output(self):
        lv = analyze([Step(("x",), ("y",))], {"x": 4, "y": 4}, inputs=["x"], outputs=["x", "y"])
        assert lv.value_ranges["x"] == LiveRange(-1, 1)

    def test_empty_program(self):
        lv = analyze([], {"x": 4}, inputs=["x"], outputs=["x"])
        assert lv.num_steps == 0 and lv.ranges == {"x": LiveRange(-1, 0)}
        assert lower_bound(lv) == 4

    def test_zero_sized_values_are_fine(self):
        steps, sizes = chain_with_relu(a=0, b=0)
        lv = analyze(steps, sizes, inputs=["x"], outputs=["y"])
        assert lv.alias_of["b"] == "a" and lower_bound(lv) == 300


class TestErrors:
    def test_read_before_write_names_the_value(self):
        steps = [Step(("later",), ("a",)), Step(("a",), ("later",))]
        with pytest.raises(ValueError, match="'later' is read at step 0.*written at step 1"):
            analyze(steps, dict.fromkeys(["a", "later"], 1))

    def test_never_written_and_not_an_input(self):
        with pytest.raises(ValueError, match="'ghost'.*never written and is not a graph input"):
            analyze([Step(("ghost",), ("a",))], {"a": 1, "ghost": 1})

    def test_written_twice(self):
        steps = [Step(("x",), ("a",)), Step(("x",), ("a",))]
        with pytest.raises(ValueError, match="'a' is written at step 1.*SSA"):
            analyze(steps, {"x": 1, "a": 1}, inputs=["x"])

    def test_writing_an_input(self):
        with pytest.raises(ValueError, match="'x'.*graph input"):
            analyze([Step((), ("x",))], {"x": 1}, inputs=["x"])

    def test_output_never_written(self):
        with pytest.raises(ValueError, match="graph output 'y'"):
            analyze([Step(("x",), ("a",))], {"x": 1, "a": 1}, inputs=["x"], outputs=["y"])

    def test_missing_or_bad_size(self):
        with pytest.raises(ValueError, match="'a' has no size"):
            analyze([Step(("x",), ("a",))], {"x": 1}, inputs=["x"])
        with pytest.raises(ValueError, match="'a': size must be"):
            analyze([Step(("x",), ("a",))], {"x": 1, "a": -3}, inputs=["x"])

    def test_step_inplace_must_name_its_own_values(self):
        with pytest.raises(ValueError, match="inplace 'b' -> 'z'"):
            Step(("a",), ("b",), {"b": "z"})
        with pytest.raises(ValueError, match="writes a value twice"):
            Step(("a",), ("b", "b"))
        with pytest.raises(ValueError, match="not a str"):
            Step("ab", ("c",))


class TestInPlace:
    def test_merge_when_the_read_dies_here_with_the_same_size(self):
        steps, sizes = chain_with_relu()
        lv = analyze(steps, sizes, inputs=["x"], outputs=["y"])
        assert lv.alias_of["b"] == "a"
        assert lv.members["a"] == ["a", "b"]
        assert lv.ranges["a"] == LiveRange(0, 2)
        assert "b" not in lv.ranges and lv.sizes["a"] == 400
        assert lower_bound(lv) == 100 + 400 + 200
        assert lower_bound(analyze(steps, sizes, inputs=["x"], outputs=["y"], inplace=False)) == 900

    def test_no_merge_when_the_read_is_used_later(self):
        steps, sizes = chain_with_relu()
        steps[2] = Step(("b", "a"), ("y",))
        lv = analyze(steps, sizes, inputs=["x"], outputs=["y"])
        assert lv.alias_of["b"] == "b"

    def test_no_merge_when_sizes_differ(self):
        steps, sizes = chain_with_relu(b=404)
        assert analyze(steps, sizes, inputs=["x"], outputs=["y"]).alias_of["b"] == "b"

    @pytest.mark.parametrize("inputs, outputs", [(["a"], ["y"]), (["x"], ["y", "b"]),
                                                 (["x"], ["y", "a"])])
    def test_no_merge_with_graph_inputs_or_outputs(self, inputs, outputs):
        steps, sizes = chain_with_relu()
        if "a" in inputs:
            steps = steps[1:]
        lv = analyze(steps, sizes, inputs=inputs, outputs=outputs)
        assert lv.alias_of["b"] == "b"

    def test_inplace_false_ignores_declarations(self):
        steps, sizes = chain_with_relu()
        assert analyze(steps, sizes, inputs=["x"], inplace=False, outputs=["y"]).alias_of["b"] == "b"

    def test_one_buffer_goes_to_one_write(self):
        steps = [Step(("x",), ("a",)), Step(("a",), ("b", "c"), {"b": "a", "c": "a"}),
                 Step(("b", "c"), ("y",))]
        lv = analyze(steps, dict.fromkeys("xabcy", 64), inputs=["x"], outputs=["y"])
        assert lv.alias_of["b"] == "a" and lv.alias_of["c"] == "c"

    def test_chains_of_in_place_ops_share_one_buffer(self):
        steps = [Step(("x",), ("a",)), Step(("a",), ("b",), {"b": "a"}),
                 Step(("b",), ("c",), {"c": "b"}), Step(("c", "x"), ("y",))]
        lv = analyze(steps, dict.fromkeys("xabcy", 64), inputs=["x"], outputs=["y"])
        assert lv.members["a"] == ["a", "b", "c"]
        assert lv.ranges["a"] == LiveRange(0, 3)

    def test_add_reuses_a_dying_input_not_the_skip(self):
        # y = relu(conv(x)); z = add(y, s) may reuse y's buffer when s lives on.
        steps = [Step(("x",), ("s",)), Step(("s",), ("y",)),
                 Step(("y", "s"), ("z",), {"z": "s"}), Step(("z", "s"), ("out",))]
        lv = analyze(steps, dict.fromkeys(["x", "s", "y", "z", "out"], 64),
                     inputs=["x"], outputs=["out"])
        assert lv.alias_of["z"] == "z"  # s is read again at step 3
        steps[2] = Step(("y", "s"), ("z",), {"z": "y"})
        lv = analyze(steps, dict.fromkeys(["x", "s", "y", "z", "out"], 64),
                     inputs=["x"], outputs=["out"])
        assert lv.alias_of["z"] == "y"


def test_lower_bound_by_hand():
    # step:      0    1    2    3
    # a (0..2):  10   10   10
    # b (1..2):       20   20
    # c (2..3):            30   30
    # x (input) 1 everywhere
    steps = [Step(("x",), ("a",)), Step(("a",), ("b",)), Step(("a", "b"), ("c",)),
             Step(("c",), ("y",))]
    sizes = {"x": 1, "a": 10, "b": 20, "c": 30, "y": 5}
    lv = analyze(steps, sizes, inputs=["x"], outputs=["y"])
    # at step 2: x + a + b(read at 2) + c = 1 + 10 + 20 + 30
    assert lower_bound(lv) == 61
    assert lower_bound(lv, {**sizes, "b": 0}) == 41
