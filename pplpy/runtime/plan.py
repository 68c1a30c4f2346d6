"""ExecutionPlan: everything about a run that depends on the input shapes, made once per
input-shape signature and cached by the Runtime.

    feeds' shapes (+ values of value-deciding feeds)
      --shape inference, host evaluation of shape values (passes/inference.py)-->
      --memory plan: one arena, live intervals (memory_planner.py); Concat inputs placed
        inside their output where that is contiguous (inplace_concat.py), a Reshape's output
        on its input (inplace_reshape.py), a fused sum's output on its dying operand
        (inplace_sum.py)-->
      --kernel.make_step(io) for every node not evaluated on the host-->
      --step.Plan: the compiled step array, run in one nogil call

Weights are not touched: kernels packed them once when the runtime was built.
"""

import hashlib

import numpy as np

from pplpy.common.data_format import DataFormat
from pplpy.common.tensor_shape import TensorShape
from pplpy.engines.x86.engine import run_once
from pplpy.engines.x86.ops.kernel import Slot, StepIO
from pplpy.engines.x86.passes.inference import infer_shapes
from pplpy.errors import ShapeError
from pplpy.runtime.inplace_concat import plan_inplace_concats
from pplpy.runtime.inplace_reshape import alias_root, plan_inplace_reshapes
from pplpy.runtime.inplace_sum import plan_inplace_sums
from pplpy.runtime.memory_limit import describe_limit, usable_memory_bytes
from pplpy.runtime.memory_planner import ALIGNMENT, Buffer, plan_memory
from pplpy.runtime.step import Plan


def as_steps(made):
    """A kernel's ``make_step`` result as a list: None (no work), one Step, or several Steps
    in order (phases that need a barrier between them, such as pack-then-multiply)."""
    if made is None:
        return []
    if isinstance(made, (list, tuple)):
        return list(made)
    return [made]


def infer_plan_shapes(result, feed_shapes, feed_values):
    """What a plan for these feeds knows before any memory exists: the dims of every value,
    the values known on the host (constants, ``feed_values``, host-evaluated nodes) and the
    set of nodes evaluated on the host.  ``feed_shapes``: input name -> dims.

    Control-flow ops use it to learn a body's output shapes for given input shapes."""
    graph = result.graph
    records = graph.values
    types = {name: record.dtype for name, record in records.items()}
    shapes = {}
    for name, record in records.items():
        if record.producer is None and record.dims is not None and name not in feed_shapes:
            shapes[name] = tuple(record.dims)  # constants, released weights
    shapes.update({name: tuple(dims) for name, dims in feed_shapes.items()})
    values = dict(graph.constants)
    values.update(feed_values)
    host = set()

    def evaluate(node, inputs, in_shapes, in_types):
        return run_once(result.ops[node], result.kernels[node], inputs, in_shapes, 1,
                        in_types)

    infer_shapes(graph.nodes, result.ops, shapes, values, types=types, evaluate=evaluate,
                 host=host)
    return shapes, values, host


def value_digest(array):
    """A value-deciding feed's part of a plan signature: a 256-bit digest of its bytes, read
    in place.  (The bytes themselves were a copy of the feed, kept as a cache key by every
    cached plan: 800 MB fed to NonZero held 800 MB more per plan, and the copy's own
    MemoryError escaped unwrapped.)"""
    return hashlib.blake2b(array.data, digest_size=32).digest()  # feeds are C-contiguous


class ExecutionPlan:
    def __init__(self, result, feeds, value_feeds, num_threads, pool=None, feed_dims=None):
        """``feeds``: input name -> array (shapes of all, values of ``value_feeds``);
        ``pool``: the runtime's ThreadPool (None: the process-wide one); ``feed_dims``:
        input name -> logical dims where a feed is not an NDARRAY array of its own shape (a
        blocked value handed from one stage of a StagedPlan to the next)."""
        graph = result.graph
        nodes = graph.nodes
        self.graph = graph
        records = graph.values
        types = {name: record.dtype for name, record in records.items()}
        dims = {name: array.shape for name, array in feeds.items()}
        dims.update(feed_dims or {})
        shapes, values, host = infer_plan_shapes(
            result, dims, {name: feeds[name] for name in value_feeds})
        self.shapes = shapes
        self.host_values = {name: values[name] for node in host for name in node.outputs
                            if name}
        step_nodes = [node for node in nodes if node not in host]

        def tensor_shape(name):
            record = records[name]
            return TensorShape(shapes[name], types[name], record.format or DataFormat.NDARRAY)

        # -- memory: graph inputs and every value a step writes live in one arena ----------
        last_step = len(step_nodes)
        first, last = {}, {}
        for name in feeds:
            first[name] = last[name] = 0
        for index, node in enumerate(step_nodes):
            for name in node.inputs:
                if name in first:
                    last[name] = index
            for name in node.outputs:
                if name:
                    first.setdefault(name, index)
                    last[name] = max(last.get(name, index), index)
        for name in graph.output_names:
            if name in first:
                last[name] = last_step
        self.tensor_shapes = {name: tensor_shape(name) for name in first}
        written = {name: index for index, node in enumerate(step_nodes)
                   for name in node.outputs if name}
        aliases, inplace = plan_inplace_concats(step_nodes, self.tensor_shapes, written, graph)
        inplace |= plan_inplace_reshapes(step_nodes, result.kernels, self.tensor_shapes,
                                         aliases)
        for name in aliases:  # a buffer holds every value that lies in it, for all their lives
            root = alias_root(aliases, name)
            first[root] = min(first[root], first[name])
            last[root] = max(last[root], last[name])
        plan_inplace_sums(step_nodes, result.kernels, self.tensor_shapes, aliases, first, last,
                          written, graph.output_names)
        # Sizes over the memory there is are refused before anything is allocated: on a host
        # that overcommits, the allocation would succeed and the run be killed (memory_limit).
        limit = usable_memory_bytes()
        buffers = []
        for name in first:
            if name in aliases:
                continue
            nbytes = self.tensor_shapes[name].bytes
            if nbytes > limit:
                record = records.get(name)
                made_by = (f" (output of {record.producer.describe()})"
                           if record is not None and record.producer is not None else "")
                raise ShapeError(f'value "{name}"{made_by} would take {nbytes} bytes '
                                 f"{self.tensor_shapes[name]}: more than {describe_limit()}; "
                                 f"check the input shapes")
            buffers.append(Buffer(name, nbytes, first[name], last[name]))
        if result.options.mm_policy == "perf":  # every value its own region
            offsets, total = plan_memory([Buffer(b.name, b.nbytes, 0, len(step_nodes))
                                          for b in buffers])
        else:
            offsets, total = plan_memory(buffers)
        if total > limit:
            hint = ("the values of the run (mm_policy \"perf\": each its own memory)"
                    if result.options.mm_policy == "perf" else "the values live at once")
            raise ShapeError(f"{hint} would take {total} bytes: more than {describe_limit()}; "
                             f"check the input shapes")
        raw = np.empty(total + ALIGNMENT, np.uint8)
        start = (-raw.__array_interface__["data"][0]) % ALIGNMENT
        self.arena = raw[start:start + total]
        self._raw = raw
        self.arena_bytes = total
        def place(name):  # a value may lie in one that lies in another (Concats, Reshapes)
            chain = []
            while name not in offsets:
                chain.append(name)
                name = aliases[name][0]
            at = offsets[name]
            for inner in reversed(chain):
                at += aliases[inner][1]
                offsets[inner] = at

        for name in aliases:
            place(name)
        views = {}
        for name, offset in offsets.items():
            ts = self.tensor_shapes[name]
            views[name] = (self.arena[offset:offset + ts.bytes].view(ts.data_type.numpy)
                           .reshape(ts.physical_dims))
        self.views = views
        # Feeds whose values decide shapes are part of the signature: their values are fixed
        # for this plan, and a kernel making its step may read them (Slice's starts).
        for name in value_feeds:
            np.copyto(views[name], feeds[name])

        # -- steps ----------------------------------------------------------------------
        def slot(name):
            if not name:
                return None
            if name in views:
                return Slot(self.tensor_shapes[name], views[name])
            if name in result.released:  # packed into the kernel: only the shape remains
                return Slot(TensorShape(shapes[name], types[name]), None)
            # np.asarray, not np.ascontiguousarray: the latter makes a rank-0 value (1,),
            # which a Python step (If / Loop / Scan) would then see with the wrong shape.
            array = np.asarray(values[name], order="C")
            return Slot(TensorShape(array.shape, types[name]), array)

        steps, self.step_nodes = [], []
        for node in step_nodes:
            if node in inplace:  # its output already holds its inputs' bytes
                continue
            io = StepIO([slot(n) for n in node.inputs], [slot(n) for n in node.outputs],
                        num_threads)
            made = result.kernels[node].make_step(io)
            for step in as_steps(made):
                step.label = step.label or node.name
                if step.fault_message and not step.fault_message.startswith(node.describe()):
                    step.fault_message = f"{node.describe()}: {step.fault_message}"
                steps.append(step)
                self.step_nodes.append(node)
        self.plan = Plan(steps, num_threads, pool)
        self.input_views = {name: views[name] for name in feeds}
        # the BodyRunners of control-flow steps: their runtimes' memory is this plan's too
        self.nested = tuple(r for step in steps for r in getattr(step, "nested", ()))

    @property
    def plan_bytes(self):
        return 64 * len(self.plan)

    def run(self, feeds, profiler=None):
        """Copy ``feeds`` in, run every step, and return copies of the outputs."""
        for name, array in feeds.items():
            np.copyto(self.input_views[name], array)
        if profiler is not None and profiler.enabled:
            for node, step, (seconds, shares) in zip(self.step_nodes, self.plan.steps,
                                                     self.plan.run_profiled()):
                # a serial step runs on one thread: one item for the team
                profiler.record(node, seconds, step.work_items if step.parallel else 1,
                                shares)
        else:
            self.plan.run()
        outputs = {}
        for name in self.graph.output_names:
            if name in self.views:
                outputs[name] = self.views[name].copy()
            elif name in self.host_values:
                outputs[name] = np.array(self.host_values[name], copy=True)
            else:
                outputs[name] = np.array(self.graph.constants[name], copy=True)
        return outputs
