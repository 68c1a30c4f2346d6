"""X86Engine: turns an optimised Graph into kernels for this CPU, by running the passes of
``pipeline.py`` in order.

    Graph --pipeline.PIPELINE--> EngineResult (graph with value records, op contexts, kernels)
          --runtime--> one compiled plan per input-shape signature

Options: ``max_isa`` caps the ISA tier (else ``PPLPY_MAX_ISA``, else the best the CPU has);
``num_threads`` is the size of each runtime's thread team (default: the physical cores);
``fusion`` folds activations into Conv/Gemm post-ops; ``mm_policy`` ("mem" or "perf") says
whether values share arena memory; ``bind_threads`` binds each worker thread of the team to
one CPU (see ``pplpy/runtime/pplpy_pool.h``).
"""

import operator
from dataclasses import dataclass

import numpy as np

from pplpy.common.cpu_topology import physical_cores
from pplpy.common.data_type import DataType
from pplpy.common.isa import best_isa
from pplpy.common.tensor_shape import TensorShape
from pplpy.engines.x86 import ops as _ops  # noqa: F401  (fills the registry)
from pplpy.engines.x86.ops.declare import find_op
from pplpy.engines.x86.ops.kernel import Slot, StepIO
from pplpy.engines.x86.ops.onnx.conv import algorithm_for_team, conv_geometry
from pplpy.engines.x86.passes.inference import infer_shapes
from pplpy.engines.x86.pipeline import EngineState, run_pipeline
from pplpy.errors import PplError
from pplpy.runtime.step import run_steps


# Memory policies, as PPL.NN's --mm-policy: "mem" plans one arena in which values whose
# lifetimes do not overlap share memory (smallest footprint); "perf" gives every value its
# own region of the arena (no reuse: larger, but a step never writes memory a value read
# shortly before used, which can help caches and threads on wide models).
MM_POLICIES = ("mem", "perf")
# A team is made of OS threads, each with its scratch: far more than any machine's CPUs only
# costs memory and start-up (10**6 threads took minutes to make, then failed).
MAX_NUM_THREADS = 1024


@dataclass(frozen=True)
class EngineOptions:
    isa: str
    num_threads: int
    fusion: bool = True
    mm_policy: str = "mem"  # "mem": values share one arena by live interval; "perf": no sharing
    bind_threads: bool = True  # each worker thread on one CPU


@dataclass
class EngineResult:
    """The engine's result, shared by every Runtime of a builder: the graph (value records
    with types, symbolic dims and formats), each node's op context and kernel, and the log
    of the passes."""

    graph: object
    ops: dict  # Node -> op context
    kernels: dict  # Node -> kernel
    options: EngineOptions
    log: list
    released: dict  # constant -> bytes of raw weight released after packing
    pass_log: list = ()  # optimizer.PassRecord per graph-optimiser pass run

    @property
    def weight_bytes(self):
        """Bytes of constants and packed weights the kernels hold."""
        total = sum(v.nbytes for v in self.graph.constants.values())
        seen = set()

        def count(value):
            nonlocal total
            if isinstance(value, np.ndarray):
                if id(value) not in seen:
                    seen.add(id(value))
                    total += value.nbytes
            elif isinstance(value, dict):
                for item in value.values():
                    count(item)
            elif isinstance(value, (list, tuple)):
                for item in value:
                    count(item)

        for kernel in self.kernels.values():
            for value in vars(kernel).values():
                count(value)
        return total


class X86Engine:
    """The x86-64 CPU engine (SSE4.1, AVX2+FMA and AVX-512 kernels)."""

    name = "x86"

    def __init__(self, max_isa=None, num_threads=None, fusion=True, mm_policy="mem",
                 bind_threads=True):
        if num_threads is None:
            num_threads = physical_cores()
        try:
            num_threads = operator.index(num_threads)
        except TypeError:
            raise PplError(f"num_threads must be a whole number, got {num_threads!r}") from None
        if not 1 <= num_threads <= MAX_NUM_THREADS:
            raise PplError(f"num_threads must be between 1 and {MAX_NUM_THREADS}, got "
                           f"{num_threads}")
        if mm_policy not in MM_POLICIES:
            raise PplError(f"mm_policy must be one of {', '.join(MM_POLICIES)}, got "
                           f"{mm_policy!r}")
        self.options = EngineOptions(isa=best_isa(max_isa), num_threads=int(num_threads),
                                     fusion=bool(fusion), mm_policy=mm_policy,
                                     bind_threads=bool(bind_threads))

    def __repr__(self):
        o = self.options
        return f"X86Engine(isa={o.isa!r}, num_threads={o.num_threads}, fusion={o.fusion})"

    # -- support -------------------------------------------------------------------------

    def supports(self, node):
        return find_op(node.domain, node.op_type, node.opset) is not None

    def supports_op(self, domain, op_type, opset):
        """Whether an op (domain, op_type) at ``opset`` is registered: what the graph
        optimiser asks before it writes a node of it."""
        return find_op(domain, op_type, opset) is not None

    def conv_algorithm(self, param, x_dims, w_dims):
        """The algorithm ("winograd_f4x3" or "direct") a Conv of ``param`` (ConvParam) would
        run on this engine for static input dims ``x_dims`` and a constant weight of dims
        ``w_dims``, for its thread team: the graph optimiser asks before it splits a
        grouped conv into Winograd-sized ones (split_grouped_conv)."""
        out_spatial = conv_geometry(param, x_dims, w_dims)
        return algorithm_for_team(param, x_dims, w_dims, True, out_spatial,
                                  self.options.isa, self.options.num_threads)

    def is_deterministic(self, node):
        """False for ops whose outputs are not a function of their inputs (random ops)."""
        cls = find_op(node.domain, node.op_type, node.opset)
        return cls is None or cls.deterministic

    def create_op(self, node, constants=None):
        cls = find_op(node.domain, node.op_type, node.opset)
        op = cls(node, self.options)
        if constants is not None:
            op.constants = {i: constants[name] for i, name in enumerate(node.inputs)
                            if name in constants}
        return op

    # -- build ---------------------------------------------------------------------------

    def process(self, graph, input_dims, pass_manager, on_pass=None):
        """Run the pipeline over ``graph``; ``input_dims`` maps each input to its dims (int,
        or str / None for a free dim).  Returns the EngineResult."""
        state = EngineState(self, graph, input_dims, pass_manager)
        run_pipeline(state, on_pass)
        return EngineResult(graph, state.ops, state.kernels, self.options, state.log,
                            state.released, list(pass_manager.log))

    # -- build-time computation ----------------------------------------------------------

    def evaluate(self, node, inputs):
        """Run one node on numpy inputs (NDARRAY) with pplpy's own kernels; return its
        outputs.  Constant folding and host evaluation of shape values use it."""
        return self.evaluate_op(node, inputs, [None if v is None else tuple(v.shape)
                                               for v in inputs])

    def evaluate_op(self, node, inputs, in_shapes, in_types=None):
        constants = {name: value for name, value in zip(node.inputs, inputs)
                     if name and value is not None}
        op = self.create_op(node, constants)
        return run_once(op, op.create_kernel(), inputs, in_shapes, self.options.num_threads,
                        in_types, self.options.bind_threads)


def run_once(op, kernel, inputs, in_shapes, num_threads=1, in_types=None, bind_threads=True):
    """Outputs of ``kernel`` on numpy ``inputs`` (None where absent), as new arrays.

    An input whose value is unknown but whose dims are (Shape reads only dims) gets a slot
    with its TensorShape and no array."""
    node = op.node
    given = in_types or [None] * len(inputs)
    in_types = [DataType.from_numpy(v.dtype) if v is not None else t
                for v, t in zip(inputs, given)]
    out_types = op.infer_type(in_types)
    known = {name: tuple(s) for name, s in zip(node.inputs, in_shapes) if name and s is not None}
    values = {name: v for name, v in zip(node.inputs, inputs) if name and v is not None}
    infer_shapes([node], {node: op}, known, values)
    outputs = [np.empty(known[name], t.numpy) if name else None
               for name, t in zip(node.outputs, out_types)]
    arrays = [np.asarray(v, order="C") if v is not None else None for v in inputs]  # keeps rank 0
    in_slots = []
    for a, dims, t in zip(arrays, in_shapes, in_types):
        if a is not None:
            in_slots.append(Slot(TensorShape(a.shape, DataType.from_numpy(a.dtype)), a))
        elif dims is not None and t is not None:
            in_slots.append(Slot(TensorShape(dims, t), None))
        else:
            in_slots.append(None)
    io = StepIO(
        in_slots,
        [Slot(TensorShape(o.shape, t), o) if o is not None else None
         for o, t in zip(outputs, out_types)],
        num_threads,
    )
    steps = kernel.make_step(io)
    if steps is not None:
        run_steps(steps if isinstance(steps, (list, tuple)) else [steps], num_threads,
                  bind_threads)
    return outputs
