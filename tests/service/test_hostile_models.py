"""Hostile models: one builder per case, each asserting the exact pplpy error class and that
the message names the node (or the value) to fix; then a bounded fuzz test that mutates valid
models and checks that only pplpy errors come out of ``pplpy.load`` and ``Runtime.run``.

A case is ``builder() -> (model, feeds, error class, words the message must hold)``: feeds
None means the error comes at load; ``model`` is a ModelProto, or bytes for a broken file.
"""

import warnings

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper
from onnx_builders import FLOAT, INT64, make_model

import pplpy
from pplpy.engines.x86 import X86Kernel, X86OptKernel, op
from pplpy.engines.x86.ops.canned import same_shape_as_input
from pplpy.models.onnx.registry import register_parser

DOMAIN = "test.hostile"
CASES = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


def relu_model(**node_kwargs):
    return make_model([helper.make_node("Relu", ["x"], ["y"], name="r", **node_kwargs)],
                      [("x", FLOAT, [2, 3])], [("y", FLOAT, [2, 3])])


def conv_model(name="conv", **attrs):
    w = np.ones((4, 3, 3, 3), np.float32)
    return make_model([helper.make_node("Conv", ["x", "w"], ["y"], name=name, **attrs)],
                      [("x", FLOAT, [1, 3, 8, 8])], [("y", FLOAT, None)], [("w", w)])


# -- plugin ops whose code raises (wrapped as PluginError with node and package) ----------


class _RaisingKernel(X86Kernel):
    def do_execute(self, ctx):
        raise ZeroDivisionError("plugin kernel divided by zero")


@op(DOMAIN, "BadShape", since=1)
class BadShapeOp(X86OptKernel):
    def infer_shape(self, in_shapes, in_values):
        raise RuntimeError("plugin shape function failed")

    def create_kernel(self):
        return _RaisingKernel(self)


@op(DOMAIN, "BadKernel", since=1)
class BadKernelOp(X86OptKernel):
    infer_shape = same_shape_as_input

    def create_kernel(self):
        return _RaisingKernel(self)


def _bad_parse(node_proto, opset):
    raise KeyError("plugin parser looked for a missing key")


@op(DOMAIN, "BadParse", since=1, parse=_bad_parse)
class BadParseOp(BadKernelOp):
    pass


def plugin_model(op_type, name):
    return make_model([helper.make_node(op_type, ["x"], ["y"], name=name, domain=DOMAIN)],
                      [("x", FLOAT, [2, 3])], [("y", FLOAT, None)], extra_opsets=[(DOMAIN, 1)])


# -- the files ------------------------------------------------------------------------------


@case
def empty_file():
    return b"", None, pplpy.ModelError, ["empty (0 bytes)"]


@case
def garbage_file():
    return b"\x08\x96\x01\xff\xfe not protobuf", None, pplpy.ModelError, ["not an ONNX model"]


@case
def graph_without_nodes():
    model = make_model([], [("x", FLOAT, [2])], [("x", FLOAT, [2])])
    return model, None, pplpy.ModelError, ["has no nodes"]


@case
def graph_without_outputs():
    model = make_model([helper.make_node("Relu", ["x"], ["y"], name="r")],
                       [("x", FLOAT, [2])], [])
    return model, None, pplpy.ModelError, ["declares no outputs"]


@case
def opset_zero():
    model = relu_model()
    model.opset_import[0].version = 0
    return model, None, pplpy.ModelError, ["opset 0", "opsets start at 1"]


@case
def domain_not_imported():
    model = make_model([helper.make_node("Foo", ["x"], ["y"], name="foo", domain="com.nope")],
                       [("x", FLOAT, [2])], [("y", FLOAT, None)])
    return model, None, pplpy.ModelError, ['node "foo"', "imports no opset", "com.nope"]


# -- structure ------------------------------------------------------------------------------


@case
def dangling_node_input():
    model = make_model([helper.make_node("Add", ["x", "ghost"], ["y"], name="adder")],
                       [("x", FLOAT, [2])], [("y", FLOAT, None)])
    return model, None, pplpy.ModelError, ['node "adder"', 'input 1 "ghost"', "not produced"]


@case
def graph_output_nobody_produces():
    model = make_model([helper.make_node("Relu", ["x"], ["y"], name="r")],
                       [("x", FLOAT, [2])], [("y", FLOAT, None), ("phantom", FLOAT, None)])
    return model, None, pplpy.ModelError, ['graph output "phantom"', "not produced"]


@case
def two_producers_of_one_value():
    model = make_model([helper.make_node("Relu", ["x"], ["y"], name="first"),
                        helper.make_node("Sigmoid", ["x"], ["y"], name="second")],
                       [("x", FLOAT, [2])], [("y", FLOAT, None)])
    return model, None, pplpy.ModelError, ['node "second"', 'output "y"', 'node "first"']


@case
def node_overwrites_a_graph_input():
    model = make_model([helper.make_node("Relu", ["x"], ["x"], name="loop")],
                       [("x", FLOAT, [2])], [("x", FLOAT, None)])
    return model, None, pplpy.ModelError, ['node "loop"', 'graph input "x"']


@case
def cycle():
    model = make_model([helper.make_node("Add", ["x", "b"], ["a"], name="n_a"),
                        helper.make_node("Relu", ["a"], ["b"], name="n_b"),
                        helper.make_node("Relu", ["a"], ["y"], name="n_y")],
                       [("x", FLOAT, [2])], [("y", FLOAT, None)])
    return model, None, pplpy.ModelError, ["cycle", "n_a", "n_b"]


@case
def duplicate_graph_input():
    model = make_model([helper.make_node("Relu", ["x"], ["y"], name="r")],
                       [("x", FLOAT, [2]), ("x", FLOAT, [2])], [("y", FLOAT, None)])
    return model, None, pplpy.ModelError, ['graph input "x" is declared twice']


@case
def more_outputs_than_the_op_has():
    model = make_model([helper.make_node("Relu", ["x"], ["y", "extra"], name="r2")],
                       [("x", FLOAT, [2])], [("y", FLOAT, None), ("extra", FLOAT, None)])
    return model, None, pplpy.ModelError, ['node "r2"', "2 outputs", "at most 1"]


@case
def more_inputs_than_the_op_takes():
    model = make_model([helper.make_node("Relu", ["x", "x"], ["y"], name="r3")],
                       [("x", FLOAT, [2])], [("y", FLOAT, None)])
    return model, None, pplpy.ModelError, ['node "r3"', "at most 1"]


@case
def missing_required_input():
    model = make_model([helper.make_node("Add", ["x"], ["y"], name="half_add")],
                       [("x", FLOAT, [2])], [("y", FLOAT, None)])
    return model, None, pplpy.ModelError, ['node "half_add"', "requires"]


# -- attributes -----------------------------------------------------------------------------


@case
def fractional_strides():
    return (conv_model(strides=[1.5, 1.5]), None, pplpy.ModelError,
            ['node "conv"', "'strides'", "FLOATS", "INTS"])


@case
def negative_pads():
    return (conv_model(pads=[-1, 0, 0, 0]), None, pplpy.ModelError,
            ['node "conv"', "'pads'", ">= 0"])


@case
def zero_kernel_size():
    model = make_model([helper.make_node("MaxPool", ["x"], ["y"], name="pool",
                                         kernel_shape=[0, 2])],
                       [("x", FLOAT, [1, 3, 8, 8])], [("y", FLOAT, None)])
    return model, None, pplpy.ModelError, ['node "pool"', "'kernel_shape'", "positive"]


@case
def negative_kernel_size():
    return (conv_model(kernel_shape=[-3, 3]), None, pplpy.ModelError,
            ['node "conv"', "'kernel_shape'", "positive"])


@case
def zero_strides():
    return conv_model(strides=[0, 1]), None, pplpy.ModelError, ['node "conv"', "'strides'"]


@case
def zero_group():
    return conv_model(group=0), None, pplpy.ModelError, ['node "conv"', "'group'", ">= 1"]


@case
def string_where_int_expected():
    model = make_model([helper.make_node("Concat", ["x", "x"], ["y"], name="cat", axis="one")],
                       [("x", FLOAT, [2])], [("y", FLOAT, None)])
    return model, None, pplpy.ModelError, ['node "cat"', "'axis'", "STRING", "INT"]


@case
def unknown_attribute():
    return (relu_model(flavour=3), None, pplpy.ModelError,
            ['node "r"', "['flavour']", "not supported"])


@case
def missing_required_attribute():
    model = make_model([helper.make_node("Concat", ["x", "x"], ["y"], name="cat")],
                       [("x", FLOAT, [2])], [("y", FLOAT, None)])
    return model, None, pplpy.ModelError, ['node "cat"', "required", "axis"]


# -- types and dims -------------------------------------------------------------------------


@case
def float64_initializer():
    model = make_model([helper.make_node("Add", ["x", "w"], ["y"], name="add")],
                       [("x", FLOAT, [2])], [("y", FLOAT, None)],
                       [("w", np.ones(2, np.float64))])
    return model, None, pplpy.UnsupportedOpError, ['node "add"', 'input "w" is float64',
                                                   "cast_to_float32"]


@case
def float16_input():
    model = make_model([helper.make_node("Relu", ["x"], ["y"], name="r")],
                       [("x", TensorProto.FLOAT16, [2])], [("y", TensorProto.FLOAT16, None)])
    return model, None, pplpy.UnsupportedOpError, ['node "r"', 'input "x" is float16']


@case
def string_input():
    model = make_model([helper.make_node("Identity", ["x"], ["y"], name="i")],
                       [("x", TensorProto.STRING, [2])], [("y", TensorProto.STRING, None)])
    return model, None, pplpy.ModelError, ['input "x"', "STRING", "not supported"]


@case
def sequence_input():
    seq = helper.make_sequence_type_proto(helper.make_tensor_type_proto(FLOAT, [2]))
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"], name="i")], "g",
                              [helper.make_value_info("x", seq)],
                              [helper.make_tensor_value_info("y", FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    return model, None, pplpy.ModelError, ['input "x"', "only tensors", "a sequence type"]


@case
def untyped_output():
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g",
                              [helper.make_tensor_value_info("x", FLOAT, [2])],
                              [onnx.ValueInfoProto(name="y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    return model, None, pplpy.ModelError, ['output "y" has no type', "make_tensor_value_info"]


@case
def int4_weights():
    """ONNX Runtime's int4 QDQ weights: a valid model in a type pplpy does not compute in,
    so unsupported (naming the reader), not an invalid model (it was a ModelError)."""
    w = helper.make_tensor("w", TensorProto.INT4, [4, 3], [1, -2, 3, 0, 7, -8, 1, 1, 2, -3, 4, 5])
    graph = helper.make_graph(
        [helper.make_node("DequantizeLinear", ["w", "s"], ["wf"], name="dq_w"),
         helper.make_node("MatMul", ["x", "wf"], ["y"], name="mm")], "g",
        [helper.make_tensor_value_info("x", FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", FLOAT, None)],
        [w, helper.make_tensor("s", FLOAT, [], [0.1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    return model, None, pplpy.UnsupportedOpError, [
        'initializer "w" is INT4', 'read by node "dq_w" (ai.onnx::DequantizeLinear)']


@case
def negative_declared_dim():
    model = make_model([helper.make_node("Relu", ["x"], ["y"], name="r")],
                       [("x", FLOAT, [2, -3])], [("y", FLOAT, None)])
    return model, None, pplpy.ModelError, ['input "x"', "negative dim"]


@case
def dims_overflow_the_limit():
    model = make_model([helper.make_node("Relu", ["x"], ["y"], name="r")],
                       [("x", FLOAT, [1 << 20, 1 << 20, 1 << 20])], [("y", FLOAT, None)])
    return model, None, pplpy.ModelError, ['input "x"', "pplpy's limit"]


@case
def integer_weight_fed_to_matmul():
    # Without the check, the kernel read the int64 bytes as floats (1.4e-44 ...).
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
                       [("x", FLOAT, [2, 3]), ("w", INT64, [3, 4])], [("y", FLOAT, None)])
    return model, None, pplpy.ShapeError, ['node "mm"', 'input 1 "w" (B) is int64',
                                           "float32"]


@case
def integer_conv_weight():
    # Without the check, packing cast the integer constant to float32 silently.
    model = make_model([helper.make_node("Conv", ["x", "w"], ["y"], name="conv")],
                       [("x", FLOAT, [1, 3, 5, 5])], [("y", FLOAT, None)],
                       [("w", np.ones((2, 3, 3, 3), np.int32))])
    return model, None, pplpy.ShapeError, ['node "conv"', 'input 1 "w" (W) is int32']


@case
def integer_gemm_bias():
    model = make_model([helper.make_node("Gemm", ["x", "w", "b"], ["y"], name="gemm")],
                       [("x", FLOAT, [2, 3])], [("y", FLOAT, None)],
                       [("w", np.ones((3, 4), np.float32)), ("b", np.ones(4, np.int64))])
    return model, None, pplpy.ShapeError, ['node "gemm"', 'input 2 "b" (C) is int64']


@case
def initializer_with_short_data():
    w = numpy_helper.from_array(np.ones(4, np.float32), "w")
    w.raw_data = w.raw_data[:7]
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"], name="add")], "g",
                              [helper.make_tensor_value_info("x", FLOAT, [4])],
                              [helper.make_tensor_value_info("y", FLOAT, None)], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    return model, None, pplpy.ModelError, ['initializer "w"', "cannot be decoded"]


# -- support --------------------------------------------------------------------------------


@case
def unsupported_op():
    model = make_model([helper.make_node("StringNormalizer", ["x"], ["y"], name="norm")],
                       [("x", FLOAT, [2, 2])], [("y", FLOAT, None)])
    return model, None, pplpy.UnsupportedOpError, ['"norm"', "StringNormalizer",
                                                   "op not supported"]


@case
def cast_to_a_number_that_is_no_type():
    model = make_model([helper.make_node("Cast", ["x"], ["y"], name="c", to=999)],
                       [("x", FLOAT, [2])], [("y", FLOAT, None)])
    return model, None, pplpy.UnsupportedOpError, ['node "c"', "999 (not an ONNX"]


@case
def unsupported_opset():
    model = make_model([helper.make_node("Relu", ["x"], ["y"], name="old_relu")],
                       [("x", FLOAT, [2])], [("y", FLOAT, None)], opset=5)
    return model, None, pplpy.UnsupportedOpError, ['"old_relu"', "opset 5 not supported"]


@case
def control_flow_condition_not_bool():
    branch = helper.make_graph([helper.make_node("Identity", ["x"], ["z"])], "b", [],
                               [helper.make_tensor_value_info("z", FLOAT, [2])])
    model = make_model([helper.make_node("If", ["c"], ["y"], name="branchy",
                                         then_branch=branch, else_branch=branch)],
                       [("c", FLOAT, []), ("x", FLOAT, [2])], [("y", FLOAT, None)])
    return model, None, pplpy.ModelError, ['"branchy"', "bool"]


@case
def control_flow_body_reads_an_unknown_value():
    branch = helper.make_graph([helper.make_node("Identity", ["nowhere"], ["z"])], "b", [],
                               [helper.make_tensor_value_info("z", FLOAT, [2])])
    model = make_model([helper.make_node("If", ["c"], ["y"], name="branchy",
                                         then_branch=branch, else_branch=branch)],
                       [("c", TensorProto.BOOL, []), ("x", FLOAT, [2])], [("y", FLOAT, None)])
    return model, None, pplpy.ModelError, ['"branchy"', '"nowhere"']


# -- shapes ---------------------------------------------------------------------------------


@case
def gemm_inner_dims_differ():
    model = make_model([helper.make_node("Gemm", ["x", "w"], ["y"], name="fc")],
                       [("x", FLOAT, [2, 3])], [("y", FLOAT, None)],
                       [("w", np.ones((5, 4), np.float32))])
    return model, None, pplpy.ShapeError, ['node "fc"', "[2, 3], [5, 4]"]


@case
def transpose_perm_past_the_rank():
    # perm entries were taken modulo the rank: [0, 5] ran as [0, 1] on a free dim.
    model = make_model([helper.make_node("Transpose", ["x"], ["y"], name="tr", perm=[0, 5])],
                       [("x", FLOAT, ["N", 3])], [("y", FLOAT, None)])
    return (model, {"x": np.ones((2, 3), np.float32)}, pplpy.ShapeError,
            ['node "tr"', "perm [0, 5] is not a permutation of 2 axes"])


@case
def transpose_perm_past_the_rank_of_fixed_dims():
    # The optimiser indexed the dims with it before shape inference: an InternalError.
    model = make_model([helper.make_node("Transpose", ["x"], ["y"], name="tr", perm=[2, 1])],
                       [("x", FLOAT, [2, 3])], [("y", FLOAT, None)])
    return model, None, pplpy.ShapeError, ['node "tr"', "not a permutation"]


@case
def conv_fed_zero_channels():
    model = make_model([helper.make_node("Conv", ["x", "w"], ["y"], name="conv")],
                       [("x", FLOAT, [1, "C", 4, 4])], [("y", FLOAT, None)],
                       [("w", np.zeros((2, 0, 3, 3), np.float32))])
    return (model, {"x": np.zeros((1, 0, 4, 4), np.float32)}, pplpy.UnsupportedOpError,
            ['node "conv"', "0 input channels"])


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_a_global_pool_over_an_empty_extent_is_a_shape_error(op):
    model = make_model([helper.make_node(op, ["x"], ["y"], name="gp")],
                       [("x", FLOAT, [1, 16, "H", 4])], [("y", FLOAT, None)])
    rt = pplpy.load(model.SerializeToString(), num_threads=1)
    with pytest.raises(pplpy.ShapeError, match="of an empty spatial extent is undefined"):
        rt.run({"x": np.zeros((1, 16, 0, 4), np.float32)})
    x = np.ones((1, 16, 2, 4), np.float32)
    np.testing.assert_array_equal(rt.run({"x": x})["y"], np.ones((1, 16, 1, 1), np.float32))


@case
def reshape_to_a_different_size():
    model = make_model([helper.make_node("Reshape", ["x", "s"], ["y"], name="rs")],
                       [("x", FLOAT, [2, 3])], [("y", FLOAT, None)],
                       [("s", np.array([4, 4], np.int64))])
    return model, None, pplpy.ShapeError, ['node "rs"', "6 elements"]


@case
def conv_channels_do_not_match():
    model = make_model([helper.make_node("Conv", ["x", "w"], ["y"], name="cv")],
                       [("x", FLOAT, [1, 3, 4, 4])], [("y", FLOAT, None)],
                       [("w", np.ones((2, 5, 1, 1), np.float32))])
    return model, None, pplpy.ShapeError, ['node "cv"', "channels"]


@case
def broadcast_failure_at_run():
    model = make_model([helper.make_node("Add", ["a", "b"], ["y"], name="add")],
                       [("a", FLOAT, ["n"]), ("b", FLOAT, ["m"])], [("y", FLOAT, None)])
    feeds = {"a": np.ones(3, np.float32), "b": np.ones(4, np.float32)}
    return model, feeds, pplpy.ShapeError, ['node "add"', "broadcast"]


# -- plugins --------------------------------------------------------------------------------


@case
def plugin_shape_function_raises():
    return (plugin_model("BadShape", "shapely"), None, pplpy.PluginError,
            ['node "shapely"', "RuntimeError", "plugin shape function failed",
             "plugin 'tests'"])


@case
def plugin_kernel_raises():
    return (plugin_model("BadKernel", "kern"), {"x": np.ones((2, 3), np.float32)},
            pplpy.PluginError, ['node "kern"', "ZeroDivisionError", "plugin 'tests'"])


@case
def plugin_parser_raises():
    return (plugin_model("BadParse", "parsy"), None, pplpy.PluginError,
            ['node "parsy"', "KeyError", "plugin 'tests'"])


# -- feeds ----------------------------------------------------------------------------------


@case
def feed_missing():
    return relu_model(), {}, pplpy.InputError, ["missing input(s) ['x']", "['x']"]


@case
def feed_unknown():
    feeds = {"x": np.ones((2, 3), np.float32), "z": np.ones(1, np.float32)}
    return relu_model(), feeds, pplpy.InputError, ["unknown input(s) ['z']"]


@case
def feed_wrong_dtype():
    return (relu_model(), {"x": np.ones((2, 3), np.float64)}, pplpy.InputError,
            ['input "x"', "expected float32 [2,3]", "got float64 [2, 3]"])


@case
def feed_a_list():
    return (relu_model(), {"x": [[1.0, 2.0, 3.0]] * 2}, pplpy.InputError,
            ['input "x"', "got float64 [2, 3] (a list, which numpy made float64",
             "np.asarray(value, np.float32)"])


@case
def feed_wrong_rank():
    return (relu_model(), {"x": np.ones(6, np.float32)}, pplpy.InputError,
            ['input "x"', "expected rank 2", "got rank 1"])


@case
def feed_wrong_shape():
    return (relu_model(), {"x": np.ones((3, 2), np.float32)}, pplpy.InputError,
            ['input "x"', "expected shape [2,3]", "got [3, 2]"])


@case
def feed_not_an_array():
    return (relu_model(), {"x": object()}, pplpy.InputError, ['input "x"', "got object"])


# -- running the corpus ---------------------------------------------------------------------


def _load_and_run(model, feeds):
    data = model if isinstance(model, bytes) else model.SerializeToString()
    rt = pplpy.load(data, num_threads=1)
    if feeds is not None:
        rt.run(feeds)
    return rt


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_model(name):
    model, feeds, error, words = CASES[name]()
    with pytest.raises(pplpy.PplError) as info:
        _load_and_run(model, feeds)
    assert type(info.value) is error, f"{name}: {type(info.value).__name__}: {info.value}"
    message = str(info.value)
    for word in words:
        assert word in message, f"{name}: {word!r} not in {message!r}"


def test_the_corpus_is_big_enough():
    assert len(CASES) >= 34, len(CASES)
    print(f"\n{len(CASES)} hostile cases")


def test_a_failed_run_leaves_the_runtime_usable():
    rt = pplpy.load(relu_model().SerializeToString(), num_threads=1)
    good = np.arange(-3, 3, dtype=np.float32).reshape(2, 3)
    want = np.maximum(good, 0)
    for bad in ({}, {"x": good.astype(np.float64)}, {"x": good[0]}, {"x": good.T}):
        with pytest.raises(pplpy.InputError):
            rt.run(bad)
        np.testing.assert_array_equal(rt.run({"x": good})["y"], want)
    kern = pplpy.load(plugin_model("BadKernel", "k").SerializeToString(), num_threads=1)
    for _ in range(2):
        with pytest.raises(pplpy.PluginError):
            kern.run({"x": good})


def test_rank0_in_rank0_out():
    model = make_model([helper.make_node("Add", ["x", "c"], ["y"])], [("x", FLOAT, [])],
                       [("y", FLOAT, None)], [("c", np.array(1, np.float32))])
    out = pplpy.load(model.SerializeToString()).run({"x": np.array(-2, np.float32)})["y"]
    assert out.shape == () and out == -1


def test_a_plugin_registration_mistake_is_a_registry_error():
    with pytest.raises(pplpy.RegistryError, match="param must be a dataclass"):
        register_parser(DOMAIN, "Broken", param_cls=dict)
    with pytest.raises(pplpy.RegistryError, match="since must be an opset number"):
        register_parser(DOMAIN, "Broken", since=0)
    with pytest.raises(pplpy.RegistryError, match="already provided by 'pplpy'.*override=True"):
        @op("", "Relu", since=14)
        class MyRelu(BadKernelOp):
            pass
    with pytest.raises(pplpy.RegistryError, match="must decorate an op-context class"):
        op(DOMAIN, "NotAClass")(lambda: None)


# -- fuzz: mutate valid models, only pplpy errors may come out -------------------------------


def _seed_models():
    w = np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32)
    cnn = make_model(
        [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["r"], name="relu"),
         helper.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2],
                          strides=[2, 2]),
         helper.make_node("Flatten", ["p"], ["f"], name="flat"),
         helper.make_node("Gemm", ["f", "g"], ["y"], name="fc", transB=1)],
        [("x", FLOAT, [1, 3, 8, 8])], [("y", FLOAT, None)],
        [("w", w), ("g", np.ones((5, 64), np.float32))])
    shapes = make_model(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"),
         helper.make_node("Reshape", ["r", "s"], ["y"], name="reshape"),
         helper.make_node("Concat", ["y", "y"], ["z"], name="cat", axis=0)],
        [("x", FLOAT, [2, 6])], [("z", FLOAT, None)], [("s", np.array([3, 4], np.int64))])
    return [cnn.SerializeToString(), shapes.SerializeToString()]


SEEDS = _seed_models()
FUZZ_COUNTS = {"ok": 0, "pplpy error": 0}


def _mutate_proto(data, choice, value):
    model = onnx.load_model_from_string(data)
    graph = model.graph
    nodes = list(graph.node)
    node = nodes[value % len(nodes)]
    if choice == 0 and node.input:
        node.input[value % len(node.input)] = ["", "nope", "x", "y"][value % 4]
    elif choice == 1 and node.output:
        node.output[0] = ["x", "y", "", graph.node[0].output[0]][value % 4]
    elif choice == 2:
        node.op_type = ["Relu", "Conv", "Gemm", "Nonsense", "Concat", "Softmax"][value % 6]
    elif choice == 3 and node.attribute:
        attr = node.attribute[value % len(node.attribute)]
        if attr.ints:
            attr.ints[value % len(attr.ints)] = [-1, 0, 1 << 40, 7][value % 4]
        else:
            attr.i = [-5, 0, 1 << 62, 3][value % 4]
    elif choice == 4:
        dims = graph.input[0].type.tensor_type.shape.dim
        if dims:
            dims[value % len(dims)].dim_value = [0, 1, 1 << 30, 5][value % 4]
    elif choice == 5 and graph.initializer:
        init = graph.initializer[value % len(graph.initializer)]
        init.dims[0] = [0, 1, 3, 1 << 40][value % 4]
    elif choice == 6:
        graph.node.remove(node)
    elif choice == 7:
        graph.node.append(node)
    elif choice == 8:
        node.attribute.append(helper.make_attribute("axis", [1.5, -2.0][value % 2]))
    return model.SerializeToString()


@settings(max_examples=200, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.sampled_from(range(len(SEEDS))),
       mutations=st.lists(st.tuples(st.integers(0, 8), st.integers(0, 1000)), min_size=0,
                          max_size=2),
       raw_flip=st.one_of(st.none(), st.tuples(st.integers(0, 10_000), st.integers(0, 255))))
def test_fuzz_mutated_models_raise_only_pplpy_errors(seed, mutations, raw_flip):
    data = SEEDS[seed]
    for choice, value in mutations:
        data = _mutate_proto(data, choice, value)
    if raw_flip is not None:
        position, byte = raw_flip
        buffer = bytearray(data)
        buffer[position % len(buffer)] = byte
        data = bytes(buffer)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rt = pplpy.load(data, num_threads=1)
            feeds = {}
            for t in rt.inputs:
                dims = tuple(d if isinstance(d, int) and 0 < d < 64 else 1
                             for d in (t.dims or ()))
                feeds[t.name] = np.ones(dims, t.dtype)
            rt.run(feeds)
        FUZZ_COUNTS["ok"] += 1
    except pplpy.PplError as exc:
        assert not isinstance(exc, pplpy.InternalError), f"internal error: {exc}"
        FUZZ_COUNTS["pplpy error"] += 1


def test_fuzz_counts():
    print(f"\nfuzz: {FUZZ_COUNTS}")
