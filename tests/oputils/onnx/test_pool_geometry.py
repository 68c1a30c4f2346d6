"""resolve_pads against ONNX shape inference on one-node MaxPool, AveragePool and Conv models."""

import math

import onnx
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from pplpy.oputils.onnx.pool_geometry import PoolWindow, pool_window, resolve_pads

OPSET = 22


def _inferred_spatial(op_type, in_spatial, kernel, strides, dilations, pads, auto_pad, ceil_mode):
    """Output spatial dims ONNX shape inference gives a one-node model (may be <= 0)."""
    rank = len(in_spatial)
    attrs = {"strides": list(strides), "dilations": list(dilations)}
    if pads is not None:
        attrs["pads"] = list(pads)
    if auto_pad != "NOTSET":
        attrs["auto_pad"] = auto_pad
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, *in_spatial])]
    if op_type == "Conv":
        inputs.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, [3, 2, *kernel]))
        attrs["kernel_shape"] = list(kernel)
    else:
        attrs["kernel_shape"] = list(kernel)
        attrs["ceil_mode"] = int(ceil_mode)
    node = helper.make_node(op_type, [i.name for i in inputs], ["y"], **attrs)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([node], "g", inputs, [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    dims = model.graph.output[0].type.tensor_type.shape.dim
    assert len(dims) == rank + 2
    return tuple(d.dim_value for d in dims[2:])


@st.composite
def window_cases(draw):
    rank = draw(st.integers(1, 3))
    axis = st.integers(1, 4)
    in_spatial = tuple(draw(st.integers(1, 13)) for _ in range(rank))
    kernel = tuple(draw(axis) for _ in range(rank))
    strides = tuple(draw(axis) for _ in range(rank))
    dilations = tuple(draw(st.integers(1, 3)) for _ in range(rank))
    auto_pad = draw(st.sampled_from(["NOTSET", "NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"]))
    pads = None
    if auto_pad == "NOTSET" and draw(st.booleans()):
        pads = tuple(draw(st.integers(0, 3)) for _ in range(2 * rank))
    ceil_mode = draw(st.booleans())
    op_type = draw(st.sampled_from(["MaxPool", "AveragePool", "Conv"]))
    if op_type == "Conv":
        ceil_mode = False
    return op_type, in_spatial, kernel, strides, dilations, pads, auto_pad, ceil_mode


def _window_larger_than_padded_input(case):
    """A window with no position: larger than the padded input (with ceil_mode, by a stride
    or more: ceil((in + pads - ek) / s) + 1 is 1 for a shortfall under a stride)."""
    _, in_spatial, kernel, strides, dilations, pads, auto_pad, ceil_mode = case
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        return False
    rank = len(in_spatial)
    pads = pads if pads is not None and auto_pad == "NOTSET" else (0,) * (2 * rank)
    short = [(kernel[a] - 1) * dilations[a] + 1 - (in_spatial[a] + pads[a] + pads[rank + a])
             for a in range(rank)]
    return any(s > 0 and not (ceil_mode and s < strides[a]) for a, s in enumerate(short))


@settings(derandomize=True, deadline=None, max_examples=400)
@given(window_cases())
def test_output_shape_matches_shape_inference(case):
    op_type, in_spatial, kernel, strides, dilations, pads, auto_pad, ceil_mode = case
    expected = _inferred_spatial(*case)
    if min(expected) <= 0 or _window_larger_than_padded_input(case):
        # ONNX shape inference reports an empty output as a zero or negative dim, except when
        # C++'s truncating division rounds (in + pads - ek) / s from -0.5 up to 0 and gives 1.
        with pytest.raises(ValueError, match="empty"):
            resolve_pads(in_spatial, kernel, strides, dilations, pads, auto_pad, ceil_mode)
        return
    out, pads_begin, pads_end = resolve_pads(
        in_spatial, kernel, strides, dilations, pads, auto_pad, ceil_mode
    )
    assert out == expected
    # The resolved pads, given explicitly, must describe the same window op.
    explicit = _inferred_spatial(
        op_type, in_spatial, kernel, strides, dilations, pads_begin + pads_end, "NOTSET", ceil_mode
    )
    assert out == explicit


@settings(derandomize=True, deadline=None, max_examples=200)
@given(window_cases())
def test_auto_pad_follows_the_spec_formulas(case):
    _, in_spatial, kernel, strides, dilations, _, auto_pad, ceil_mode = case
    assume(auto_pad != "NOTSET")
    try:
        out, pads_begin, pads_end = resolve_pads(
            in_spatial, kernel, strides, dilations, None, auto_pad, ceil_mode
        )
    except ValueError:
        assume(False)
    for axis, n in enumerate(in_spatial):
        s, ek = strides[axis], (kernel[axis] - 1) * dilations[axis] + 1
        pb, pe = pads_begin[axis], pads_end[axis]
        if auto_pad == "VALID":
            assert pb == pe == 0
            if not ceil_mode:
                assert out[axis] == (n - ek) // s + 1
            else:
                # The operator docs give ceil((in - ek + 1) / s), the floor-mode size, but
                # shape inference and ONNX Runtime apply ceil_mode to VALID like to explicit
                # pads (a model's declared shapes follow them), and so do we.
                last_start_ok = math.ceil((n - ek) / s) * s < n
                assert out[axis] == math.ceil((n - ek) / s) + (1 if last_start_ok else 0)
        else:
            assert out[axis] == math.ceil(n / s)
            assert pb + pe == max(0, (out[axis] - 1) * s + ek - n)
            # The odd cell goes at the end for SAME_UPPER, at the beginning for SAME_LOWER.
            assert (pe - pb if auto_pad == "SAME_UPPER" else pb - pe) in (0, 1)


def test_ceil_mode_drops_a_window_starting_in_the_right_padding():
    # in 5, kernel 2, stride 2, no pads: ceil((5 - 2) / 2) + 1 = 3 windows, at 0, 2, 4; the
    # last starts inside the input, so it stays.
    assert resolve_pads([5], [2], [2], None, None, "NOTSET", True)[0] == (3,)
    # in 4, kernel 2, stride 2, pads (0, 1): ceil((4 + 1 - 2) / 2) + 1 = 3, but the third
    # window would start at 4 = in + pads_begin, in the right pad: dropped.
    assert resolve_pads([4], [2], [2], None, [0, 1], "NOTSET", True)[0] == (2,)
    # The rule belongs to ceil_mode only (as in shape inference): floor mode keeps a window
    # that lies wholly in the right pad, here in 4, kernel 1, stride 2, pads (0, 1).
    assert resolve_pads([4], [1], [2], None, [0, 1], "NOTSET", False)[0] == (3,)
    assert resolve_pads([4], [1], [2], None, [0, 1], "NOTSET", True)[0] == (2,)


def test_ceil_mode_cells_are_not_added_to_pads_end():
    out, pads_begin, pads_end = resolve_pads([4], [3], [3], None, None, "NOTSET", True)
    assert (out, pads_begin, pads_end) == ((2,), (0,), (0,))


def test_defaults_and_bytes_auto_pad():
    assert resolve_pads([5, 6], [3, 3], None, None, None, None) == ((3, 4), (0, 0), (0, 0))
    assert resolve_pads([5], [3], None, None, None, b"SAME_LOWER") == ((5,), (1,), (1,))
    assert resolve_pads([6], [2], [1], [1], [0, 0], "SAME_UPPER") == ((6,), (0,), (1,))


@pytest.mark.parametrize(
    "args, message",
    [
        (([5], [6], [1], [1], [0, 0], "NOTSET"), "empty"),
        (([5], [3], [1], [3], None, "VALID"), "empty"),
        (([5], [3, 3], None, None, None, "NOTSET"), "kernel_shape: expected 1 values"),
        (([5], [3], [0], None, None, "NOTSET"), "strides: every value must be >= 1"),
        (([5], [3], None, [0], None, "NOTSET"), "dilations"),
        (([5], [3], None, None, [1], "NOTSET"), r"pads: expected 2 values"),
        (([5], [3], None, None, [-1, 0], "NOTSET"), "negative"),
        (([5], [3], None, None, [1, 1], "SAME_UPPER"), "cannot be used with auto_pad"),
        (([5], [3], None, None, None, "SAME"), "auto_pad: expected one of"),
        (([5], None, None, None, None, "NOTSET"), "kernel_shape is required"),
    ],
)
def test_errors_name_the_problem(args, message):
    with pytest.raises(ValueError, match=message):
        resolve_pads(*args)


def test_pool_window_fills_in_the_defaults():
    w = pool_window([7, 8], [3, 3], None, None, None, "SAME_UPPER")
    assert w == PoolWindow(out=(7, 8), kernel=(3, 3), strides=(1, 1), pads_begin=(1, 1),
                           pads_end=(1, 1), dilations=(1, 1))
    w = pool_window([5], [3], [2], [1], [1, 0], "NOTSET", ceil_mode=True)
    assert (w.out, w.pads_begin, w.pads_end, w.strides) == ((3,), (1,), (0,), (2,))
    with pytest.raises(ValueError, match="strides"):
        pool_window([5], [3], [0], None, None, "NOTSET")
