"""One test per rule of docs/op_context_contract.md, numbered as there."""

import threading

import numpy as np
import pytest
from onnx import helper
from onnx_builders import FLOAT, INT64, make_model

import pplpy
from pplpy.common.data_format import DataFormat
from pplpy.common.data_type import DataType
from pplpy.engines.x86 import X86Kernel, X86OptKernel, op
from pplpy.engines.x86.ops.canned import follow_input_format, same_shape_as_input

DOMAIN = "test.contract"
SEEN = {}


class CopyKernel(X86Kernel):
    def do_execute(self, ctx):
        ctx.outputs[0][...] = ctx.inputs[0]


class Base(X86OptKernel):
    infer_shape = same_shape_as_input

    def create_kernel(self):
        return CopyKernel(self)


@op(DOMAIN, "Record", since=1)
class Record(Base):
    supported_types = (DataType.FLOAT32,)

    def infer_type(self, in_types):
        SEEN["types"] = list(in_types)
        return super().infer_type(in_types)

    def infer_shape(self, in_shapes, in_values):
        SEEN.setdefault("shapes", []).append(list(in_shapes))
        return [in_shapes[0]]


@op(DOMAIN, "TooFew", since=1)
class TooFew(Base):
    def infer_shape(self, in_shapes, in_values):
        return []


@op(DOMAIN, "Negative", since=1)
class Negative(Base):
    def infer_shape(self, in_shapes, in_values):
        return [(-1,)]


@op(DOMAIN, "ByValue", since=1)
class ByValue(Base):
    value_inputs = (1,)

    def infer_shape(self, in_shapes, in_values):
        if in_values[1] is None:
            raise self.value_required(1, "the length")
        return [(int(in_values[1][0]),)]


class FillKernel(X86Kernel):
    def do_execute(self, ctx):
        ctx.outputs[0][...] = 1.0


@op(DOMAIN, "Fill", since=1)
class Fill(ByValue):
    def create_kernel(self):
        return FillKernel(self)


@op(DOMAIN, "Picky", since=1)
class Picky(Base):
    def infer_shape(self, in_shapes, in_values):
        if in_shapes[0][0] != 2:
            raise self.shape_error("the first dim must be 2", in_shapes)
        raise IndexError("tuple index out of range")


@op(DOMAIN, "Crashy", since=1)
class Crashy(Base):
    def infer_shape(self, in_shapes, in_values):
        raise LookupError("boom")


class RebindKernel(X86Kernel):
    def do_execute(self, ctx):
        ctx.outputs[0] = ctx.inputs[0] * 2  # wrong: rebinds instead of writing


@op(DOMAIN, "Rebind", since=1)
class Rebind(Base):
    def create_kernel(self):
        return RebindKernel(self)


class Blocked(Base):
    formats = (DataFormat.NDARRAY, DataFormat.N16CX)
    select_format = follow_input_format


@op(DOMAIN, "Finite", since=1)
class Finite(Blocked):
    keeps_padding_finite = True


@op(DOMAIN, "Undeclared", since=1)
class Undeclared(Blocked):
    pass


@op(DOMAIN, "OddShape", since=1)
class OddShape(Base):
    """infer_shape returns SEEN["result"]."""

    def infer_shape(self, in_shapes, in_values):
        return SEEN["result"]


@op(DOMAIN, "OddType", since=1)
class OddType(Base):
    """infer_type returns SEEN["result"]."""

    def infer_type(self, in_types):
        return SEEN["result"]


def load(nodes, inputs, outputs=(("y", FLOAT, None),), inits=()):
    for node in nodes:
        if node.op_type not in ("Conv", "Relu"):
            node.domain = DOMAIN
    model = make_model(nodes, inputs, list(outputs), list(inits),
                       extra_opsets=[(DOMAIN, 1)])
    return pplpy.load(model.SerializeToString(), num_threads=1)


def test_rule_1_infer_type_sees_none_for_omitted_inputs():
    load([helper.make_node("Record", ["x", ""], ["y"], name="rec")], [("x", FLOAT, [2])])
    assert SEEN["types"] == [DataType.FLOAT32, None]
    with pytest.raises(pplpy.UnsupportedOpError, match='node "rec2".*input type int64'):
        load([helper.make_node("Record", ["x"], ["y"], name="rec2")], [("x", INT64, [2])])


def test_rule_2_one_shape_per_output_and_no_negative_dims():
    with pytest.raises(pplpy.ShapeError, match='node "few".*gave 0 shapes for 1 outputs'):
        load([helper.make_node("TooFew", ["x"], ["y"], name="few")], [("x", FLOAT, [2])])
    with pytest.raises(pplpy.ShapeError, match='node "neg".*negative output dim'):
        load([helper.make_node("Negative", ["x"], ["y"], name="neg")], [("x", FLOAT, [2])])
    SEEN["result"] = [(np.int64(2), np.int32(3))]  # numpy ints are ints
    rt = load([helper.make_node("OddShape", ["x"], ["y"], name="odd")], [("x", FLOAT, [2, 3])])
    assert rt.run({"x": np.ones((2, 3), np.float32)})["y"].shape == (2, 3)


@pytest.mark.parametrize("op_type, result", [
    ("OddShape", None), ("OddShape", [None]), ("OddShape", ["ab"]),
    ("OddShape", [(2.5, 3)]),  # was truncated to (2, 3)
    ("OddType", [None]), ("OddType", []), ("OddType", ["float"]),  # failed only at run
])
def test_rules_1_and_2_a_result_of_the_wrong_kind_is_a_plugin_error(op_type, result):
    SEEN["result"] = result
    wrong = 'node "odd".*(DataType|tuple of ints|one shape per output)'
    with pytest.raises(pplpy.PluginError, match=wrong) as info:
        load([helper.make_node(op_type, ["x"], ["y"], name="odd")], [("x", FLOAT, [2, 3])])
    assert info.value.node == "odd"


def test_rule_3_present_inputs_have_full_int_shapes_even_with_free_dims():
    SEEN.pop("shapes", None)
    rt = load([helper.make_node("Record", ["x", ""], ["y"], name="rec")],
              [("x", FLOAT, ["n", 3])])
    rt.run({"x": np.ones((5, 3), np.float32)})
    for shapes in SEEN["shapes"]:
        assert shapes[1] is None
        assert all(isinstance(d, int) for d in shapes[0])
    assert [5, 3] in [list(s[0]) for s in SEEN["shapes"]]


def test_rule_4_value_inputs_constant_fed_or_computed():
    rt = load([helper.make_node("Fill", ["x", "n"], ["y"], name="fill")],
              [("x", FLOAT, [1]), ("n", INT64, [1])])
    assert rt.run({"x": np.ones(1, np.float32), "n": np.array([3])})["y"].shape == (3,)
    assert rt.run({"x": np.ones(1, np.float32), "n": np.array([4])})["y"].shape == (4,)
    rt = load([helper.make_node("Fill", ["x", "n"], ["y"], name="fill")],
              [("x", FLOAT, [1])], inits=[("n", np.array([2]))])
    assert rt.run({"x": np.ones(1, np.float32)})["y"].shape == (2,)
    # computed by another node: the plan is cut before the op and the rest planned once the
    # value is known (a staged plan), for each new value
    rt = load([helper.make_node("Relu", ["x"], ["r"], name="relu"),
               helper.make_node("Fill", ["x", "r"], ["y"], name="fill")], [("x", FLOAT, [1])])
    assert rt.run({"x": np.full(1, 3, np.float32)})["y"].shape == (3,)
    assert rt.run({"x": np.full(1, 5, np.float32)})["y"].shape == (5,)
    assert rt.run({"x": np.full(1, -1, np.float32)})["y"].shape == (0,)


def test_rule_5_errors_name_the_node():
    with pytest.raises(pplpy.ShapeError, match='node "picky".*first dim must be 2'):
        load([helper.make_node("Picky", ["x"], ["y"], name="picky")], [("x", FLOAT, [3])])
    with pytest.raises(pplpy.ShapeError, match='node "picky".*tuple index out of range'):
        load([helper.make_node("Picky", ["x"], ["y"], name="picky")], [("x", FLOAT, [2])])
    with pytest.raises(pplpy.PluginError, match='node "crashy".*LookupError: boom') as info:
        load([helper.make_node("Crashy", ["x"], ["y"], name="crashy")], [("x", FLOAT, [2])])
    assert info.value.node == "crashy" and isinstance(info.value.__cause__, LookupError)


def test_rule_6_rebinding_an_output_is_detected():
    rt = load([helper.make_node("Rebind", ["x"], ["y"], name="rebind")], [("x", FLOAT, [2])])
    with pytest.raises(pplpy.PluginError, match="rebind"):
        rt.run({"x": np.ones(2, np.float32)})


@pytest.mark.parametrize("op_type, wanted", [("Finite", "N16CX"), ("Undeclared", "NDARRAY")])
def test_rule_7_padding_rule(op_type, wanted):
    w = np.eye(20, dtype=np.float32).reshape(20, 20, 1, 1)
    rt = load([helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
               helper.make_node(op_type, ["c"], ["y"], name="plugin")],
              [("x", FLOAT, [1, 20, 2, 2])], inits=[("w", w)])
    (node,) = [n for n in rt.graph.nodes if n.name == "plugin"]
    assert rt.formats[node.inputs[0]].name == wanted
    x = np.random.default_rng(0).standard_normal((1, 20, 2, 2)).astype(np.float32)
    np.testing.assert_allclose(rt.run({"x": x})["y"], x, rtol=1e-5, atol=1e-6)


def test_rule_8_one_kernel_serves_every_runtime_on_threads():
    model = make_model([helper.make_node("Record", ["x"], ["y"], name="rec", domain=DOMAIN)],
                       [("x", FLOAT, [3])], [("y", FLOAT, None)], extra_opsets=[(DOMAIN, 1)])
    builder = pplpy.RuntimeBuilder.from_onnx(model.SerializeToString(),
                                             engines=[pplpy.X86Engine(num_threads=1)])
    runtimes = [builder.create_runtime() for _ in range(4)]
    assert len({id(rt.result.kernels[n]) for rt in runtimes for n in rt.graph.nodes}) == 1
    bad = []

    def work(i):
        for k in range(50):
            x = np.full(3, i * 100 + k, np.float32)
            if not np.array_equal(runtimes[i].run({"x": x})["y"], x):
                bad.append((i, k))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert bad == []
