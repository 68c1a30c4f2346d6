"""The pass pipeline as Glow configures it: entries with a pass id, a convergence mode,
DCE after the pass and the build modes it runs in; YAML pipelines; the pass log."""

import numpy as np
import pytest
from onnx import helper
from onnx_builders import FLOAT, make_model

import pplpy
from pplpy.optimizer import DEFAULT_PIPELINE, PassManager, load_pipeline
from pplpy.optimizer.pass_manager import PassConfig


def identity_chain(save_model):
    """x -> Identity -> Identity -> Relu -> y, plus a Neg nobody reads."""
    nodes = [helper.make_node("Identity", ["x"], ["i1"]),
             helper.make_node("Identity", ["i1"], ["i2"]),
             helper.make_node("Neg", ["i2"], ["unused"]),
             helper.make_node("Relu", ["i2"], ["y"])]
    return save_model(make_model(nodes, [("x", FLOAT, [4])], [("y", FLOAT, None)]))


def test_entries_in_every_form_become_pass_configs(tmp_path):
    yaml = tmp_path / "p.yaml"
    yaml.write_text("- {pass: remove_identity, convergence: fixed_point, dce_after: true}\n"
                    "- {pass: fold_into_conv, modes: [fusion]}\n"
                    "- {pass: constant_folding}\n")
    from_yaml = load_pipeline(yaml)
    from_list = load_pipeline([("remove_identity", "fixed_point", True),
                               {"pass": "fold_into_conv", "modes": "fusion"},
                               "constant_folding"])
    assert from_yaml == from_list == (
        PassConfig("remove_identity", "fixed_point", True),
        PassConfig("fold_into_conv", modes=frozenset({"fusion"})),
        PassConfig("constant_folding"))


@pytest.mark.parametrize("entry, message", [
    ({"pass": "no_such_pass"}, "unknown pass 'no_such_pass'"),
    ({"pass": "remove_identity", "convergence": "twice"}, "convergence must be 'once' or"),
    ({"pass": "remove_identity", "dce_after": "yes"}, "dce_after must be true or false"),
    ({"pass": "remove_identity", "modes": ["training"]}, "modes must be a non-empty list"),
    ({"pass": "remove_identity", "mode": "once"}, "unknown: mode"),
    ({"convergence": "once"}, "needs a 'pass' key"),
    (42, "expected a pass id"),
    ({"pass": ["cse"]}, "unknown pass \\['cse'\\]"),  # not hashable: was an InternalError
    ({"pass": "remove_identity", "modes": 5}, "modes must be a non-empty list"),
    ({"pass": "remove_identity", "modes": [["fusion"]]}, "modes must be a non-empty list"),
])
def test_bad_entries_are_pplpy_errors_that_say_what_to_fix(entry, message):
    with pytest.raises(pplpy.PplError, match=message):
        load_pipeline([entry])


def test_bad_yaml_files_are_pplpy_errors(tmp_path):
    with pytest.raises(pplpy.PplError, match="cannot read pass pipeline"):
        load_pipeline(tmp_path / "missing.yaml")
    text = tmp_path / "map.yaml"
    text.write_text("pass: dead_code_elimination\n")
    with pytest.raises(pplpy.PplError, match="must be a YAML list"):
        load_pipeline(text)


def test_fixed_point_repeats_and_dce_after_cleans_up(save_model):
    rt = pplpy.load(identity_chain(save_model),
                    passes=[("remove_identity", "fixed_point", True)])
    assert [n.op_type for n in rt.graph.nodes] == ["Relu"]  # the unread Neg went too
    rt_once = pplpy.load(identity_chain(save_model), passes=[("remove_identity", "once")])
    assert sorted(n.op_type for n in rt_once.graph.nodes) == ["Neg", "Relu"]
    assert rt.pass_log[0].startswith("remove_identity: 2 change(s) in 2 round(s), 4 -> 2")
    assert rt.pass_log[1].startswith("dead_code_elimination: 1 change(s) in 1 round(s)")
    x = np.array([-1, 0, 2, -3], np.float32)
    np.testing.assert_array_equal(rt.run({"x": x})["y"], np.maximum(x, 0))


def test_modes_choose_the_entries_a_build_runs(save_model):
    passes = [{"pass": "remove_identity", "convergence": "fixed_point", "modes": ["fusion"]},
              {"pass": "dead_code_elimination", "modes": ["no_fusion"]}]
    fused = pplpy.load(identity_chain(save_model), passes=passes)
    unfused = pplpy.load(identity_chain(save_model), passes=passes, fusion=False)
    assert [line.split(":")[0] for line in fused.pass_log] == ["remove_identity"]
    assert [line.split(":")[0] for line in unfused.pass_log] == ["dead_code_elimination"]
    assert sorted(n.op_type for n in unfused.graph.nodes) == ["Identity", "Identity", "Relu"]


def test_pass_log_says_what_constant_folding_folded(save_model):
    shape = helper.make_node("Shape", ["w"], ["s"])
    cos = helper.make_node("ConstantOfShape", ["s"], ["ones"],
                           value=helper.make_tensor("v", 1, [1], [1.0]))
    add = helper.make_node("Add", ["x", "ones"], ["y"])
    model = make_model([shape, cos, add], [("x", FLOAT, [2, 3])], [("y", FLOAT, None)],
                       initializers=[("w", np.zeros((2, 3), np.float32))])
    rt = pplpy.load(save_model(model))
    line = next(l for l in rt.pass_log if l.startswith("constant_folding"))
    assert "folded ConstantOfShape 1" in line and "folded Shape 1" in line


def test_default_pipeline_is_valid_and_runs_every_pass_once_per_entry(save_model):
    pm = PassManager()
    assert pm.pipeline == DEFAULT_PIPELINE
    rt = pplpy.load(identity_chain(save_model))
    ran = [line.split(":")[0] for line in rt.pass_log]
    expected = []
    for entry in DEFAULT_PIPELINE:
        expected.append(entry.pass_id)
        if entry.dce_after:
            expected.append("dead_code_elimination")
    assert ran == expected
