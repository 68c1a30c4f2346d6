"""The x86 engine's pipeline: what happens to a graph between the parser and the runtime,
as an ordered list of passes.  Read top to bottom, this is the engine.

Each pass is a function ``run(state) -> summary`` of an ``EngineState``; its docstring (or its
module's) says what it guarantees to the passes after it.  ``pplnn --dump-graph PASS`` prints
the graph after any named pass.
"""

from dataclasses import dataclass, field

from pplpy.common.data_format import DataFormat
from pplpy.common.data_type import DataType
from pplpy.engines.x86.passes.fuse_post_ops import fuse_post_ops
from pplpy.engines.x86.passes.inference import infer_shapes, infer_types, symbolic_dims
from pplpy.engines.x86.passes.layout_folding import fold_layout_transposes
from pplpy.engines.x86.passes.reorder_insertion import select_formats_and_insert_reorders
from pplpy.errors import PplError
from pplpy.optimizer import PassContext

# Free input dims take these values while shapes are inferred at build time; a dim that
# changes between the inferences depends on a free dim (see inference.symbolic_dims).
# Each distinct free dim (by name; an unnamed one by its place) gets its own slot k and
# takes _probe_value(p, k) in inference p: 64 + 2k, 97 + 3k + k * k, 321 + 5k.  The first
# two name the dims that follow a free dim, by their pair of values; the second is not
# affine in k, so no shift of one dim (N + 2, a Pad) nor a combination whose coefficients
# sum to 1 (N + L - M, 2M - N: a Concat sliced by another length) lands on another slot's
# pair (which then passed for that other dim, and an Add of the two, or an attention mask,
# fused as if of one shape) short of a Pythagorean triple of slot distances.  The
# first two lie PROBE_GAP apart, so that no stride up to it (a ViT patch embedding: 16, 32)
# takes them to one size (64 and 65 both pool 2x2 to 32, which then passed for a static
# dim), and stay below the tables a free dim indexes (positions: 128 and up); they name the
# dims that follow a free dim.  The third lies 257 above the first and only vetoes a static
# verdict: a chain of strides up to 256 (a detector's P7 level: H / 128) takes the first two
# to one size but not the third.  A model that cannot take it (a table of fewer rows) keeps
# the first two's verdict.
PROBE_GAP = 33
PROBE_DIMS = (64, 64 + PROBE_GAP, 64 + 257)
PROBE_STEPS = (2, 3, 5)
PROBE_SQUARES = (0, 1, 0)  # the k * k term of each probe
# ``on_pass`` names the graph optimiser's passes (run inside graph_rewrites) "optimizer:<id>".
OPTIMIZER_PREFIX = "optimizer:"


@dataclass
class EngineState:
    """What the passes share: the graph, one op context per node, kernels once made."""

    engine: object  # X86Engine
    graph: object  # ir.Graph
    input_dims: dict  # input name -> dims tuple of int | str (symbolic) | None
    pass_manager: object  # optimizer.PassManager (graph rewrites)
    ops: dict = field(default_factory=dict)  # Node -> op context
    kernels: dict = field(default_factory=dict)  # Node -> kernel
    shapes: dict = field(default_factory=dict)  # value -> build-time dims (probe values)
    log: list = field(default_factory=list)  # (pass name, summary)
    released: dict = field(default_factory=dict)  # constant -> bytes dropped after packing
    rewrites: int = 0  # changes the graph rewrites made
    on_pass: object = None  # on_pass(name, state) after every pass (pplnn --dump-graph)


def _probe_value(probe, slot):
    return PROBE_DIMS[probe] + PROBE_STEPS[probe] * slot + PROBE_SQUARES[probe] * slot * slot


def create_op_contexts(state):
    """Every node gets its op context (the registry was checked before: all nodes are
    supported)."""
    state.ops = {node: state.engine.create_op(node) for node in state.graph.nodes}
    return f"{len(state.ops)} op contexts"


def infer(state):
    """Every value record gets its element type and dims: ints where static, the input's dim
    name where it follows a free input dim, None where unknown.  Errors in a model's shapes
    surface here, before anything is built."""
    graph, ops = state.graph, state.ops
    for node in graph.nodes:  # nodes added since the last inference
        if node not in ops:
            ops[node] = state.engine.create_op(node)
    for node in [n for n in ops if n not in graph]:
        del ops[node]
    for node, op in ops.items():
        op.constants = {i: graph.constants[name] for i, name in enumerate(node.inputs)
                        if name in graph.constants}
    types = {name: DataType.from_numpy(graph.constants[name].dtype) for name in graph.constants}
    types.update({v.name: v.data_type for v in graph.inputs})
    infer_types(graph.nodes, ops, types)
    probes, symbols = [], {}
    free = [(name, i, d) for name, dims in state.input_dims.items()
            for i, d in enumerate(dims) if not isinstance(d, int)]
    slots = {}  # a free dim's symbol (or (input, axis) when unnamed) -> its probe slot
    for name, i, d in free:
        slots.setdefault(d if isinstance(d, str) else (name, i), len(slots))
    probe_values = {}  # a free dim's name -> its value in each probe
    for key, slot in slots.items():
        symbols[(_probe_value(0, slot), _probe_value(1, slot))] = \
            key if isinstance(key, str) else None
        if isinstance(key, str):
            probe_values[key] = [_probe_value(p, slot) for p in range(len(PROBE_DIMS))]
    for probe in range(len(PROBE_DIMS) if free else 1):
        dims = {}
        for name, declared in state.input_dims.items():
            dims[name] = tuple(
                d if isinstance(d, int) else
                _probe_value(probe, slots[d if isinstance(d, str) else (name, k)])
                for k, d in enumerate(declared))
        shapes = {name: tuple(v.shape) for name, v in graph.constants.items()}
        shapes.update(dims)
        values = dict(graph.constants)
        # With free dims, a probe value may be one the model cannot take (a 3x3 conv on a
        # free width of 1): shapes that fail stay unknown until a run feeds real ones.
        # Without, a shape error is the model's and is reported now.
        infer_shapes(graph.nodes, ops, shapes, values, partial=True, types=types,
                     evaluate=state.engine.evaluate_op, host=set(), strict=not free)
        probes.append(shapes)
    state.shapes = probes[0]
    merged = symbolic_dims(probes, symbols, probe_values) if free else probes[0]
    for name, record in graph.values.items():
        record.dtype = types.get(name, record.dtype)
        if name in merged:
            record.dims = merged[name]
    return f"{len(types)} types, {len(merged)} shapes" + (f", {len(free)} free dims"
                                                         if free else "")


def graph_rewrites(state):
    """The engine-independent passes (pplpy.optimizer): constant folding with this engine's
    kernels, dead code, and what the graph optimiser adds.  Layout does not exist yet."""
    before = len(state.graph)
    pm = state.pass_manager
    start = len(pm.log)
    on_pass = None
    if state.on_pass is not None:
        def on_pass(pass_id, graph):
            state.on_pass(f"{OPTIMIZER_PREFIX}{pass_id}", state)
    pm.run(state.graph, PassContext(evaluate=state.engine.evaluate,
                                    is_deterministic=state.engine.is_deterministic,
                                    fusion=state.engine.options.fusion,
                                    supports=state.engine.supports_op,
                                    conv_algorithm=state.engine.conv_algorithm), on_pass)
    state.rewrites = sum(record.changes for record in pm.log[start:])
    return f"{state.rewrites} changes, {before} -> {len(state.graph)} nodes"


def infer_after_rewrites(state):
    """Rewrites changed the graph: refresh the value records (nothing to do if they did
    not)."""
    return infer(state) if state.rewrites else "unchanged"


def select_formats(state):
    """Formats (NDARRAY or N16CX) for every value and Reorder nodes where they differ; see
    passes/reorder_insertion.py."""
    engine = state.engine
    inserted = select_formats_and_insert_reorders(state.graph, state.ops, state.shapes,
                                                  engine.create_op)
    for name, record in state.graph.values.items():
        if record.format is DataFormat.N16CX and record.dtype is not DataType.FLOAT32:
            raise PplError(f'value "{name}": N16CX needs float32, got {record.dtype}')
    return f"{inserted} reorders"


def fuse(state):
    """Activations into Conv/Gemm post-ops; see passes/fuse_post_ops.py."""
    if not state.engine.options.fusion:
        return "off"
    return f"{fuse_post_ops(state.graph, state.ops)} fused"


def fold_layouts(state):
    """Reorders next to channels-last Transposes read or write channels-last themselves;
    see passes/layout_folding.py.  Part of fusion: ``fusion=False`` keeps them apart."""
    if not state.engine.options.fusion:
        return "off"
    return fold_layout_transposes(state)


def create_kernels(state):
    """Each node's kernel, made once with its op context's frozen params: algorithm choice
    that does not depend on input shapes and weight packing happen here, so every runtime
    shares packed weights.  (Per-shape algorithm choice happens in ``make_step``.)

    A constant's raw data is dropped as soon as its last reader's kernel has packed it
    (``release_if_packed``), not after every kernel is made: a model's raw and packed
    weights were all held at once, twice its weights at the load's peak."""
    graph = state.graph
    for node in graph.nodes:
        op = state.ops[node]
        op.constants = {i: graph.constants[name] for i, name in enumerate(node.inputs)
                        if name in graph.constants}
    state.kernels = {}
    released = 0
    for node in graph.nodes:
        state.kernels[node] = state.ops[node].create_kernel()
        for name in dict.fromkeys(node.inputs):
            released += release_if_packed(state, name)
    return f"{len(state.kernels)} kernels, {released} raw weights released"


def release_if_packed(state, name):
    """Drop constant ``name``'s raw data if every reader's kernel exists and holds a copy of
    it (packed weights) and it is no graph output; returns 1 if it was dropped.  The value
    record keeps its dims and type."""
    graph = state.graph
    if name not in graph.constants or graph.is_graph_output(name):
        return 0
    uses = graph.uses(name)
    if not uses or not all(node in state.kernels and index in state.kernels[node].packed_inputs
                           for node, index in uses):
        return 0
    record = graph.values[name]
    record.dims = tuple(record.const.shape)
    record.dtype = DataType.from_numpy(record.const.dtype)
    state.released[name] = record.const.nbytes
    del graph.constants[name]
    for node, index in uses:
        state.ops[node].constants.pop(index, None)
    return 1


def release_raw_weights(state):
    """Drop the raw data of constants that every reader copied into its kernel (packed
    weights) that ``create_kernels`` has not dropped already: weights are then held once."""
    released = sum(release_if_packed(state, name) for name in list(state.graph.constants))
    return f"{released} more raw weights released"


# The pipeline.  Order matters where a comment says why.
PIPELINE = (
    ("create_op_contexts", create_op_contexts),
    # Inference first: a model with inconsistent shapes fails before any work is done.
    ("infer", infer),
    ("graph_rewrites", graph_rewrites),
    ("infer_after_rewrites", infer_after_rewrites),
    ("select_formats", select_formats),
    # After formats: fusion only joins nodes whose formats already agree.
    ("fuse_post_ops", fuse),
    # After the graph a saved optimised model takes (save_model.SAVE_AFTER): a Reorder and
    # the channels-last Transpose (and Reshape) next to it as one copy.
    ("fold_layout_transposes", fold_layouts),
    ("create_kernels", create_kernels),
    # Last: packing has copied what it needs.
    ("release_raw_weights", release_raw_weights),
)

PASS_NAMES = tuple(name for name, _ in PIPELINE)


def run_pipeline(state, on_pass=None):
    """Run every pass in order; ``on_pass(name, state)`` is called after each, and after
    each graph-optimiser pass inside graph_rewrites (named "optimizer:<pass id>")."""
    state.on_pass = on_pass
    for name, run in PIPELINE:
        state.log.append((name, run(state)))
        if on_pass is not None:
            on_pass(name, state)
    return state
