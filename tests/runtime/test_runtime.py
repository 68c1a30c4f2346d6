"""The runtime: compiled plans cached per input-shape signature, a Python plugin op as a step
between compiled ones, calls from many threads, outputs the caller owns."""

import inspect
import sys
import threading
import time

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import pplpy
import pplpy.engines.x86.ops.onnx  # noqa: F401  (every built-in kernel class)
from pplpy.common.data_format import DataFormat
from pplpy.engines.x86 import X86Kernel, X86OptKernel, op
from pplpy.engines.x86.ops.canned import follow_input_format, same_shape_as_input
from pplpy.runtime.step import PythonStep

RNG = np.random.default_rng(7)


def cnn(batch="N", channels=8):
    """Conv -> Relu -> Conv -> Add(residual) -> GlobalAveragePool, with a free batch."""
    c = channels
    w1 = RNG.standard_normal((c, 3, 3, 3)).astype(np.float32) * 0.3
    w2 = RNG.standard_normal((c, c, 3, 3)).astype(np.float32) * 0.2
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Conv", ["r", "w2"], ["b"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["b", "r"], ["s"]),
        helper.make_node("GlobalAveragePool", ["s"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 10, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_builtin_ops_are_compiled_steps(save_model):
    rt = pplpy.load(save_model(cnn()), num_threads=2)
    rt.run({"x": RNG.standard_normal((2, 3, 10, 10)).astype(np.float32)})
    steps = rt._last.plan.steps
    assert steps and not any(isinstance(s, PythonStep) for s in steps), steps


# Built-in kernels that are Python steps by design, each with its reason.  Every other
# built-in kernel must make compiled steps.
PYTHON_STEP_KERNELS = {
    "IfKernel": "control flow: runs a branch's nested runtime (whose steps are compiled)",
    "LoopKernel": "control flow: iterates the body's nested runtime",
    "ScanKernel": "control flow: iterates the body's nested runtime",
    "FlexAttentionKernel": "runs the score_mod / prob_mod subgraphs as nested runtimes "
                           "between its compiled GEMM and Softmax steps",
    "LossKernel": "a target read at run time is checked after the compiled loss step by a "
                  "small step that raises a ShapeError naming the bad sample (a compiled "
                  "step cannot raise)",
}


def _builtin_kernel_classes():
    """pplpy's kernel classes that ops instantiate (leaves; bases only share code)."""
    pending, found = [X86Kernel], []
    while pending:
        for sub in pending.pop().__subclasses__():
            pending.append(sub)
            if sub.__module__.startswith("pplpy.") and not sub.__subclasses__():
                found.append(sub)
    return found


def test_builtin_kernels_are_compiled_steps_except_the_listed_ones():
    python = set()
    for cls in _builtin_kernel_classes():
        source = inspect.getsource(cls)
        if (cls.make_step is X86Kernel.make_step or "PythonStep" in source
                or "python_step(" in source):
            python.add(cls.__name__)
    assert python == set(PYTHON_STEP_KERNELS)


def test_plans_are_cached_per_shape_signature(save_model):
    model = cnn()
    rt = pplpy.load(save_model(model), num_threads=2, plan_cache_size=2)
    ref = ReferenceEvaluator(model)
    xs = {n: RNG.standard_normal((n, 3, 10, 10)).astype(np.float32) for n in (1, 3, 5)}
    for n in (1, 3, 5, 5, 1):
        got = rt.run({"x": xs[n]})["y"]
        np.testing.assert_allclose(got, ref.run(None, {"x": xs[n]})[0], rtol=1e-4, atol=1e-5)
    assert rt.plan_misses == 4  # 1, 3, 5 new; 5 cached; 1 was evicted by the LRU of size 2
    assert rt.memory()["cached_plans"] == 2


def test_symbolic_dims_are_recorded(save_model):
    rt = pplpy.load(save_model(cnn()))
    assert rt.graph.values["x"].dims == ("N", 3, 10, 10)
    assert rt.outputs[0].dims == ("N", 8, 1, 1)


def test_in_shapes_fix_free_dims_at_load(save_model):
    rt = pplpy.load(save_model(cnn()), in_shapes={"x": [2, 3, 10, 10]})
    assert rt.input_shapes["x"] == (2, 3, 10, 10)
    with pytest.raises(pplpy.InputError):
        rt.run({"x": np.zeros((3, 3, 10, 10), np.float32)})


@pytest.mark.parametrize("after_conv", [False, True])
@pytest.mark.parametrize("fusion", [True, False])
def test_a_free_dim_only_some_sizes_of_fit_loads_and_runs_at_those(save_model, after_conv,
                                                                   fusion):
    """x[N, ...] * c[3, ...] is a model for N = 3 only.  The build probes free dims with
    sizes of its own (64, 65, ...): their shape error is not the model's, so the model loads,
    runs at N = 3, and a run at another N is that run's error."""
    c = RNG.standard_normal((3, 4, 1, 1)).astype(np.float32)
    nodes = [helper.make_node("Mul", ["a", "c"], ["y"])]
    inits = [numpy_helper.from_array(c, "c")]
    if after_conv:  # the Mul reads an N16CX value
        w = RNG.standard_normal((4, 4, 1, 1)).astype(np.float32)
        nodes.insert(0, helper.make_node("Conv", ["x", "w"], ["a"]))
        inits.append(numpy_helper.from_array(w, "w"))
    else:
        nodes.insert(0, helper.make_node("Relu", ["x"], ["a"]))
    graph = helper.make_graph(
        nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 5, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    rt = pplpy.load(save_model(model), num_threads=2, fusion=fusion)
    x = RNG.standard_normal((3, 4, 5, 5)).astype(np.float32)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(rt.run({"x": x})["y"], want, rtol=1e-5, atol=1e-6)
    with pytest.raises(pplpy.PplError, match="broadcast"):
        rt.run({"x": np.zeros((2, 4, 5, 5), np.float32)})
    np.testing.assert_allclose(rt.run({"x": x})["y"], want, rtol=1e-5, atol=1e-6)


def _free_dims_model(nodes, inputs):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, d) for n, d in inputs],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_a_pooled_free_dim_stays_free(save_model):
    """The build's two probes of a free dim must not pool to one size (64 and 65 both pool
    2x2 to 32, which then passed for a static dim and the data-free Transpose became a
    Reshape to [1, 32, 1, 32]: every run failed)."""
    m = _free_dims_model(
        [helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
         helper.make_node("Transpose", ["p"], ["y"], perm=[0, 2, 1, 3])],
        [("x", [1, 1, "H", "W"])])
    rt = pplpy.load(save_model(m), num_threads=1)
    assert rt.graph.values["p"].dims[2:] != (32, 32)
    for h, w in ((20, 20), (64, 64), (64, 66), (130, 8)):
        x = RNG.standard_normal((1, 1, h, w)).astype(np.float32)
        want = x.reshape(1, 1, h // 2, 2, w // 2, 2).max(axis=(3, 5)).transpose(0, 2, 1, 3)
        np.testing.assert_array_equal(rt.run({"x": x})["y"], want)


@pytest.mark.parametrize("pools", [1, 7])
def test_a_free_dim_strided_past_the_probe_gap_stays_free(save_model, pools):
    """A stride of 64 in one pool, or seven 2x2 pools (a detector's P7 level, H / 128),
    takes the first two probes (64, 97) to one size (1, or 0); the third probe (321) tells
    the dim is not static.  Taken for static, Shape was folded to the probe's dims and the
    data-free Transpose became a Reshape to them: every run at another size failed."""
    k = 64 if pools == 1 else 2
    nodes = [helper.make_node("MaxPool", [f"p{i}" if i else "x"], [f"p{i + 1}"],
                              kernel_shape=[k, k], strides=[k, k]) for i in range(pools)]
    nodes += [helper.make_node("Shape", [f"p{pools}"], ["s"]),
              helper.make_node("Transpose", [f"p{pools}"], ["y"], perm=[0, 2, 3, 1])]
    m = _free_dims_model(nodes, [("x", [1, 4, "H", "W"])])
    m.graph.output.append(helper.make_tensor_value_info("s", TensorProto.INT64, None))
    rt = pplpy.load(save_model(m), num_threads=1)
    dims = rt.graph.values[f"p{pools}"].dims  # None: the first probe's 0 rows did not pool
    assert dims is None or dims[2:] == (None, None)
    ref = ReferenceEvaluator(m)
    for h, w in ((128, 128), (256, 384), (128, 700)):
        x = RNG.standard_normal((1, 4, h, w)).astype(np.float32)
        got = rt.run({"x": x})
        want_y, want_s = ref.run(None, {"x": x})
        np.testing.assert_array_equal(got["s"], want_s)
        np.testing.assert_array_equal(got["y"], want_y)


def test_a_shifted_free_dim_is_not_taken_for_another(save_model):
    """Pad(x[1, N, 8]) by 1 on each side is N + 2 long; with every probe shifting a slot by 2
    its probe values were M's, so it was recorded as M, and Add(xp, y[1, M, 8]) then
    LayerNorm fused into AddLayerNormalization (no broadcast): N = 3, M = 1 failed."""
    d = 8
    graph = helper.make_graph(
        [helper.make_node("Pad", ["x", "pads"], ["xp"]),
         helper.make_node("Add", ["xp", "y"], ["s"]),
         helper.make_node("LayerNormalization", ["s", "sc", "bi"], ["out"], axis=-1)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "N", d]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "M", d])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array([0, 1, 0, 0, 1, 0], np.int64), "pads"),
         numpy_helper.from_array(RNG.standard_normal(d).astype(np.float32), "sc"),
         numpy_helper.from_array(RNG.standard_normal(d).astype(np.float32), "bi")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    rt = pplpy.load(save_model(model), num_threads=1)
    assert rt.graph.values["xp"].dims[1] != "M"
    ref = ReferenceEvaluator(model)
    for n, m in ((3, 5), (3, 1), (1, 3)):
        feeds = {"x": RNG.standard_normal((1, n, d)).astype(np.float32),
                 "y": RNG.standard_normal((1, m, d)).astype(np.float32)}
        np.testing.assert_allclose(rt.run(feeds)["out"], ref.run(None, feeds)[0], rtol=1e-4,
                                   atol=1e-4)


def test_a_combination_of_free_dims_is_not_taken_for_another(save_model):
    """Concat(x[1, N, 8], z[1, L, 8]) sliced from M on has N + L - M rows; with probe values
    affine in the slot that combination landed on M's values in every probe, was recorded
    as M, and Add(s, y[1, M, 8]) + LayerNorm fused into AddLayerNormalization (no broadcast):
    N = 2, M = 3, L = 2 (one row, a broadcast) failed."""
    graph = helper.make_graph(
        [helper.make_node("Concat", ["x", "z"], ["xz"], axis=1),
         helper.make_node("Shape", ["y"], ["ys"]),
         helper.make_node("Slice", ["ys", "one", "two"], ["m"]),
         helper.make_node("Slice", ["xz", "m", "big", "one"], ["s"]),
         helper.make_node("Add", ["s", "y"], ["a"]),
         helper.make_node("LayerNormalization", ["a", "sc", "bi"], ["out"], axis=-1)], "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, d, 8])
         for n, d in (("x", "N"), ("y", "M"), ("z", "L"))],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array([1], np.int64), "one"),
         numpy_helper.from_array(np.array([2], np.int64), "two"),
         numpy_helper.from_array(np.array([1 << 30], np.int64), "big"),
         numpy_helper.from_array(RNG.standard_normal(8).astype(np.float32), "sc"),
         numpy_helper.from_array(RNG.standard_normal(8).astype(np.float32), "bi")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    rt = pplpy.load(save_model(model), num_threads=1)
    assert rt.graph.values["s"].dims[1] != "M"
    ref = ReferenceEvaluator(model)
    for n, m, l in ((2, 3, 2), (4, 3, 2), (1, 1, 1)):
        feeds = {k: RNG.standard_normal((1, d, 8)).astype(np.float32)
                 for k, d in (("x", n), ("y", m), ("z", l))}
        np.testing.assert_allclose(rt.run(feeds)["out"], ref.run(None, feeds)[0], rtol=1e-4,
                                   atol=1e-4)


def test_a_dim_equal_to_a_free_dim_at_two_probes_only_is_not_named_after_it(save_model):
    """L = (N - 64)(N - 97) + N equals N at the first two probes: it was named N, and a
    Reshape of (L, 4) to (N, -1) looked like it kept its dims and was removed (an output of
    5892 rows for N = 2).  The third probe, where L is larger than N, takes the name back."""
    i64 = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)  # noqa: E731
    nodes = [helper.make_node("Shape", ["a"], ["sh"]),
             helper.make_node("Slice", ["sh", "z", "o"], ["n"]),
             helper.make_node("Sub", ["n", "c64"], ["n1"]),
             helper.make_node("Sub", ["n", "c97"], ["n2"]),
             helper.make_node("Mul", ["n1", "n2"], ["p"]),
             helper.make_node("Add", ["p", "n"], ["L"]),
             helper.make_node("Concat", ["L", "c4"], ["t1"], axis=0),
             helper.make_node("Expand", ["b", "t1"], ["xL"]),
             helper.make_node("Concat", ["n", "m1"], ["t2"], axis=0),
             helper.make_node("Reshape", ["xL", "t2"], ["r"]),
             helper.make_node("ReduceSum", ["r", "o"], ["y"], keepdims=0)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["N"]),
                     helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [i64("z", [0]), i64("o", [1]), i64("c64", [64]), i64("c97", [97]), i64("c4", [4]),
         i64("m1", [-1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    rt = pplpy.load(save_model(model), num_threads=1)
    assert rt.graph.values["xL"].dims[0] is None
    feeds = {"a": np.zeros(2, np.float32), "b": np.arange(4, dtype=np.float32)[None]}
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    np.testing.assert_array_equal(rt.run(feeds)["y"], want)


def test_a_dim_a_probe_clamps_keeps_its_symbol(save_model):
    """A position table of 128 rows sliced to the free length N: the third probe (321) is
    clamped to 128, which is not a reason to forget that the slice follows N (its chain with
    the input then stopped fusing)."""
    d = 8
    graph = helper.make_graph(
        [helper.make_node("Shape", ["x"], ["s"]),
         helper.make_node("Gather", ["s", "one"], ["n"], axis=0),
         helper.make_node("Unsqueeze", ["n", "zero"], ["n1"]),
         helper.make_node("Slice", ["pos", "zero", "n1"], ["p"]),
         helper.make_node("Add", ["x", "p"], ["a"]),
         helper.make_node("Relu", ["a"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "N", d])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(RNG.standard_normal((128, d)).astype(np.float32), "pos"),
         numpy_helper.from_array(np.array(1, np.int64), "one"),
         numpy_helper.from_array(np.array([0], np.int64), "zero")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    rt = pplpy.load(save_model(model), num_threads=1)
    assert rt.graph.values["p"].dims == ("N", d)
    ref = ReferenceEvaluator(model)
    for n in (5, 100, 128):
        feeds = {"x": RNG.standard_normal((1, n, d)).astype(np.float32)}
        np.testing.assert_allclose(rt.run(feeds)["y"], ref.run(None, feeds)[0], rtol=1e-5,
                                   atol=1e-6)


def test_feeds_must_agree_on_a_dim_name(save_model):
    """q, k, v [B, 2, s, 8] and a mask [B, 1, s, s]: the build fuses the masked softmax into
    one attention on the word of the declared names.  A mask fed with 1 key (a broadcast
    the Add allows, which the fused kernel reads as "one key, the rest masked": a wrong
    result) or 3 is refused as the contradiction it is, naming the dim and the inputs."""
    dims = ["B", 2, "s", 8]
    graph = helper.make_graph(
        [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
         helper.make_node("MatMul", ["q", "kt"], ["qk"]),
         helper.make_node("Mul", ["qk", "c"], ["sc"]),
         helper.make_node("Add", ["sc", "mask"], ["sm"]),
         helper.make_node("Softmax", ["sm"], ["p"], axis=-1),
         helper.make_node("MatMul", ["p", "v"], ["y"])], "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, dims) for n in "qkv"]
        + [helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["B", 1, "s", "s"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array(8 ** -0.5, np.float32), "c")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    rt = pplpy.load(save_model(model), num_threads=1)
    assert "Attention" in [n.op_type for n in rt.graph.nodes]
    feeds = {n: RNG.standard_normal((1, 2, 4, 8)).astype(np.float32) for n in "qkv"}
    feeds["mask"] = RNG.standard_normal((1, 1, 4, 4)).astype(np.float32)
    np.testing.assert_allclose(rt.run(feeds)["y"], ReferenceEvaluator(model).run(None, feeds)[0],
                               rtol=1e-5, atol=1e-5)
    for keys in (1, 3):
        bad = dict(feeds, mask=np.zeros((1, 1, 4, keys), np.float32))
        with pytest.raises(pplpy.InputError, match=rf'dim "s" is 4 in input "q" \(axis 2\) '
                                                   rf'but {keys} in input "mask" \(axis 3\)'):
            rt.run(bad)
    with pytest.raises(pplpy.InputError, match='dim "B" is 1 in input "q"'):
        rt.run(dict(feeds, k=np.zeros((2, 2, 4, 8), np.float32)))


def test_two_symbols_at_one_axis_are_two_dims(save_model):
    """x[N, 4] + z[M, 4]: N and M are probed with different sizes, so the build does not
    take them for one dim (the element-wise chain then ran on x's shape: N = 1, M = 3
    failed)."""
    m = _free_dims_model([helper.make_node("Add", ["x", "z"], ["a"]),
                          helper.make_node("Relu", ["a"], ["y"])],
                         [("x", ["N", 4]), ("z", ["M", 4])])
    rt = pplpy.load(save_model(m), num_threads=1)
    for n, k in ((1, 3), (3, 1), (3, 3)):
        x = RNG.standard_normal((n, 4)).astype(np.float32)
        z = RNG.standard_normal((k, 4)).astype(np.float32)
        np.testing.assert_array_equal(rt.run({"x": x, "z": z})["y"], np.maximum(x + z, 0))


def test_outputs_are_owned_by_the_caller(save_model):
    rt = pplpy.load(save_model(cnn()))
    x = RNG.standard_normal((1, 3, 10, 10)).astype(np.float32)
    first = rt.run({"x": x})["y"]
    kept = first.copy()
    rt.run({"x": x * 2})
    np.testing.assert_array_equal(first, kept)


def test_raw_weights_are_released_after_packing(save_model):
    rt = pplpy.load(save_model(cnn()))
    assert not rt.graph.constants  # both conv weights live only in their packed form
    assert set(rt.result.released) == {"w1", "w2"}
    assert rt.memory()["weights"] > 0


@pytest.mark.parametrize("shared", ["one runtime", "builder runtimes"])
def test_many_threads_give_single_thread_results(save_model, shared):
    path = save_model(cnn())
    builder = pplpy.RuntimeBuilder.from_onnx(path, engines=[pplpy.X86Engine(num_threads=2)])
    single = builder.create_runtime()
    xs = [RNG.standard_normal((1 + i % 3, 3, 10, 10)).astype(np.float32) for i in range(16)]
    want = [single.run({"x": x})["y"] for x in xs]
    runtimes = [single] * 8 if shared == "one runtime" else [builder.create_runtime()
                                                             for _ in range(8)]
    failures = []

    def work(t):
        for i in range(100):
            k = (t * 7 + i) % len(xs)
            got = runtimes[t].run({"x": xs[k]})["y"]
            if not np.array_equal(got, want[k]):
                failures.append((t, i))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


class DoubleKernel(X86Kernel):
    def do_execute(self, ctx):
        np.multiply(ctx.inputs[0], np.float32(2), out=ctx.outputs[0])


@op("test.runtime", "Double", since=1)
class DoubleOp(X86OptKernel):
    """y = 2x, written in Python: a step that takes the GIL for its own call."""

    formats = (DataFormat.NDARRAY, DataFormat.N16CX)
    infer_shape = same_shape_as_input
    select_format = follow_input_format
    keeps_padding_finite = True  # 2 * 0 = 0: a plugin op may take N16CX only if it says so

    def create_kernel(self):
        return DoubleKernel(self)


class FailingKernel(X86Kernel):
    def do_execute(self, ctx):
        # the largest magnitude: the Conv before it may flip the sign of a large input
        if float(np.abs(ctx.inputs[0]).max()) > 100:
            raise ValueError("input too large for this plugin")
        ctx.outputs[0][...] = ctx.inputs[0]


@op("test.runtime", "Fussy", since=1)
class FussyOp(DoubleOp):
    def create_kernel(self):
        return FailingKernel(self)


def plugin_model(op_type):
    w = RNG.standard_normal((8, 3, 1, 1)).astype(np.float32)
    w2 = RNG.standard_normal((4, 8, 1, 1)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["a"]),
             helper.make_node(op_type, ["a"], ["d"], domain="test.runtime"),
             helper.make_node("Conv", ["d", "w2"], ["y"])]
    graph = helper.make_graph(
        nodes, "plugin", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 5, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(w2, "w2")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("test.runtime", 1)])


def test_python_plugin_op_between_compiled_ops_at_two_threads(save_model):
    path = save_model(plugin_model("Double"))
    rt = pplpy.load(path, num_threads=2)
    x = RNG.standard_normal((2, 3, 5, 5)).astype(np.float32)
    rt.run({"x": x})
    kinds = [type(s).__name__ for s in rt._last.plan.steps]
    assert "PythonStep" in kinds and kinds.count("Step") >= 2
    assert rt.formats["a"] is DataFormat.N16CX and rt.formats["d"] is DataFormat.N16CX
    ref = pplpy.load(path, num_threads=1)
    np.testing.assert_allclose(rt.run({"x": x})["y"], ref.run({"x": x})["y"], rtol=1e-6)


def test_a_failing_python_step_raises_and_leaves_the_runtime_usable(save_model):
    rt = pplpy.load(save_model(plugin_model("Fussy")), num_threads=2)
    good = RNG.standard_normal((2, 3, 5, 5)).astype(np.float32) * 0.01
    want = rt.run({"x": good})["y"]
    # The plugin's exception comes out as a PluginError naming the node; the original is its
    # __cause__ (pplpy's errors are the only ones Runtime.run raises).
    with pytest.raises(pplpy.PluginError, match='node "Fussy_1".*ValueError: input too large') \
            as info:
        rt.run({"x": np.full((2, 3, 5, 5), 1e4, np.float32)})
    assert isinstance(info.value.__cause__, ValueError) and info.value.node == "Fussy_1"
    np.testing.assert_array_equal(rt.run({"x": good})["y"], want)


def shape_subgraph_model():
    """PyTorch's spelling of flatten: Shape -> Gather(0) -> Unsqueeze -> Concat([-1]) ->
    Reshape, after a Relu, with a free batch."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Shape", ["r"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
        helper.make_node("Unsqueeze", ["batch", "axes"], ["batch1"]),
        helper.make_node("Concat", ["batch1", "minus_one"], ["target"], axis=0),
        helper.make_node("Reshape", ["r", "target"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "flatten", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 3, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array(0, np.int64), "zero"),
         numpy_helper.from_array(np.array([0], np.int64), "axes"),
         numpy_helper.from_array(np.array([-1], np.int64), "minus_one")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_shape_subgraph_is_evaluated_on_the_host_at_each_shape(save_model):
    model = shape_subgraph_model()
    rt = pplpy.load(save_model(model), num_threads=2)
    ref = ReferenceEvaluator(model)
    for n in (1, 3, 5, 1):
        x = RNG.standard_normal((n, 4, 3, 2)).astype(np.float32)
        np.testing.assert_array_equal(rt.run({"x": x})["y"], ref.run(None, {"x": x})[0])
        labels = [s.label for s in rt._last.plan.steps]
        assert not any(name.startswith(("Shape", "Gather", "Unsqueeze", "Concat"))
                       for name in labels), labels  # host-evaluated, not steps
    assert rt.plan_misses == 3  # the first shape came back from the cache


def test_mm_policies_give_the_same_outputs(save_model):
    """"mem" shares the arena between values by lifetime, "perf" does not: same results, and
    "mem" needs no more memory."""
    path = save_model(cnn())
    x = RNG.standard_normal((2, 3, 10, 10)).astype(np.float32)
    mem, perf = pplpy.load(path, mm_policy="mem"), pplpy.load(path, mm_policy="perf")
    np.testing.assert_array_equal(mem.run({"x": x})["y"], perf.run({"x": x})["y"])
    assert mem.memory_bytes < perf.memory_bytes
    with pytest.raises(pplpy.PplError, match="mm_policy"):
        pplpy.load(path, mm_policy="fast")


def _loop_model(body_node, x_dims, trips, body_inits=()):
    """Loop(trips, "", x) -> y whose body is ``body_node`` from x_in to x_out (its cond passes
    through); the graph's x has ``x_dims``, the body's values declare no shape."""
    body = helper.make_graph(
        [body_node, helper.make_node("Identity", ["cond_in"], ["cond_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x_in", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x_out", TensorProto.FLOAT, None)], list(body_inits))
    return helper.make_model(helper.make_graph(
        [helper.make_node("Loop", ["m", "", "x"], ["y"], body=body)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_dims)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array(trips, np.int64), "m")]),
        opset_imports=[helper.make_opsetid("", 13)])


def test_memory_counts_control_flow_body_runtimes(save_model):
    """rt.memory() counts the arenas and plans of the If / Loop bodies a run made (a service
    sizing its processes by it saw only the outer graph's): a Loop whose body doubles a
    256 x 256 value holds at least that value's 256 KiB in its body's arena, and each branch
    an If ran adds its plan."""
    model = _loop_model(helper.make_node("Add", ["x_in", "x_in"], ["x_out"]), [256, 256], 3)
    rt = pplpy.load(save_model(model))
    x = RNG.standard_normal((256, 256)).astype(np.float32)
    np.testing.assert_allclose(rt.run({"x": x})["y"], x * 8, rtol=1e-6)
    held = rt.memory()
    assert held["cached_plans"] == 2  # the outer plan and the body's
    assert held["arena"] - rt.memory_bytes >= 256 * 256 * 4

    def branch(op_type):
        return helper.make_graph(
            [helper.make_node(op_type, ["x", "x"], ["out"])], op_type,
            [], [helper.make_tensor_value_info("out", TensorProto.FLOAT, [256, 256])])

    if_node = helper.make_node("If", ["c"], ["y"], then_branch=branch("Add"),
                               else_branch=branch("Mul"))
    model = helper.make_model(helper.make_graph(
        [if_node], "g", [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                         helper.make_tensor_value_info("x", TensorProto.FLOAT, [256, 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [256, 256])]),
        opset_imports=[helper.make_opsetid("", 13)])
    rt = pplpy.load(save_model(model))
    np.testing.assert_allclose(rt.run({"c": np.array(True), "x": x})["y"], x + x)
    assert rt.memory()["cached_plans"] == 2
    np.testing.assert_allclose(rt.run({"c": np.array(False), "x": x})["y"], x * x)
    # cond is part of the outer plan's signature (a branch may decide shapes): two outer
    # plans, each with the body it ran
    assert rt.memory()["cached_plans"] == 4


def test_memory_while_another_thread_runs_a_growing_loop(save_model):
    """rt.memory() from a monitoring thread while the model runs a Loop whose carried value
    grows (a body runtime per length, the oldest evicted): the body runtimes' table changed
    under memory()'s copy of it (KeyError, "OrderedDict mutated during iteration")."""
    model = _loop_model(helper.make_node("Concat", ["x_in", "one"], ["x_out"], axis=0), [1],
                        40, [numpy_helper.from_array(np.ones(1, np.float32), "one")])
    rt = pplpy.load(save_model(model), num_threads=1)
    assert rt.run({"x": np.zeros(1, np.float32)})["y"].shape == (41,)
    stop, errors = threading.Event(), []

    def run():
        while not stop.is_set():
            assert rt.run({"x": np.zeros(1, np.float32)})["y"].shape == (41,)

    worker = threading.Thread(target=run)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can
    try:
        worker.start()
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            try:
                assert rt.memory()["cached_plans"] >= 1
            except Exception as exc:  # noqa: BLE001 - collected, reported below
                errors.append(exc)
    finally:
        sys.setswitchinterval(interval)
        stop.set()
        worker.join()
    assert not errors, {f"{type(e).__name__}: {e}" for e in errors}


def test_a_value_deciding_feed_is_not_copied_into_the_plan_cache_key(save_model):
    """NonZero's input decides its output shape, so its value is part of the plan signature.
    The signature held a bytes copy of the whole feed for as long as the plan stayed cached
    (and building it could fail with a bare MemoryError): now a digest.  What the runtime
    holds after the run is its arena (which has the feed's copy), not a second copy."""
    import tracemalloc

    rt = pplpy.load(save_model(helper.make_model(helper.make_graph(
        [helper.make_node("NonZero", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N"])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, None)]),
        opset_imports=[helper.make_opsetid("", 13)])))
    x = np.zeros(1 << 22, np.float32)  # 16 MiB
    x[[5, 77]] = 1
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        np.testing.assert_array_equal(rt.run({"x": x})["y"], [[5, 77]])
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < rt.memory()["arena"] + x.nbytes // 2
    x[9] = 1  # another value: another plan, and the right answer
    np.testing.assert_array_equal(rt.run({"x": x})["y"], [[5, 9, 77]])


def test_a_plan_whose_first_run_fails_is_not_cached(save_model, monkeypatch):
    """A new plan entered the cache before it ran: one whose run ran out of memory (copying
    its outputs, say) kept its arena for good and had evicted a plan that worked."""
    from pplpy.runtime.plan import ExecutionPlan

    rt = pplpy.load(save_model(cnn()), plan_cache_size=1)
    small = RNG.standard_normal((1, 3, 10, 10)).astype(np.float32)
    big = RNG.standard_normal((6, 3, 10, 10)).astype(np.float32)
    want = rt.run({"x": small})["y"]
    arena = rt.memory()["arena"]
    real_run = ExecutionPlan.run

    def no_memory(self, feeds, profiler=None):
        raise MemoryError("Unable to allocate the outputs")

    monkeypatch.setattr(ExecutionPlan, "run", no_memory)
    with pytest.raises(pplpy.InputError, match="out of memory"):
        rt.run({"x": big})
    assert rt.memory()["cached_plans"] == 1 and rt.memory()["arena"] == arena
    monkeypatch.setattr(ExecutionPlan, "run", real_run)
    np.testing.assert_array_equal(rt.run({"x": small})["y"], want)
    assert rt.plan_misses == 2  # the small plan was still cached
    assert rt.run({"x": big})["y"].shape[0] == 6
    assert rt.plan_misses == 3
