"""Runtime: executes an EnginePlan on numpy inputs.

    run(feeds) --check feeds--> (shapes changed? infer shapes, plan memory, bind views)
               --> kernels in order, each on views of one arena --> dict of outputs

A Runtime owns its arena and contexts, so runtimes of one builder can run on different
threads at once; the kernels and constant weights they share are read-only.
"""

from collections.abc import Mapping

import numpy as np

from pplpy.common.data_format import DataFormat
from pplpy.common.tensor_shape import TensorShape
from pplpy.engines.x86.ops.kernel import KernelContext
from pplpy.engines.x86.passes.inference import infer_shapes
from pplpy.errors import InputError
from pplpy.runtime.memory_planner import Buffer, plan_memory
from pplpy.runtime.profiler import Profiler, clock
from pplpy.runtime.tensor import Tensor


class Runtime:
    def __init__(self, plan):
        self._plan = plan
        graph = plan.graph
        self._graph = graph
        self._nodes = list(graph.nodes)
        self._input_infos = list(graph.inputs)
        self.profiler = Profiler()
        self._signature = None
        self._steps = []
        self.memory_bytes = 0
        # Feeds whose values decide shapes (e.g. a Reshape's shape given as a model input):
        # a change of value re-plans like a change of shape.
        position = {v.name: i for i, v in enumerate(self._input_infos)}
        self._value_feeds = sorted({
            position[node.inputs[i]]
            for node in self._nodes
            for i in plan.ops[id(node)].value_inputs
            if i < len(node.inputs) and node.inputs[i] in position
        })  # planned arena size for the current input shapes

    # -- introspection -------------------------------------------------------------------

    @property
    def input_names(self):
        return [v.name for v in self._input_infos]

    @property
    def output_names(self):
        return self._graph.output_names

    @property
    def input_shapes(self):
        """Declared dims of each input (str or None where the model leaves a dim free)."""
        return {v.name: v.dims for v in self._input_infos}

    @property
    def inputs(self):
        return [Tensor(v.name, v.data_type, v.dims) for v in self._input_infos]

    @property
    def outputs(self):
        types = self._plan.types
        return [Tensor(v.name, types.get(v.name, v.data_type), v.dims)
                for v in self._graph.outputs]

    @property
    def graph(self):
        """The graph the engine built (with inserted reorders), for inspection."""
        return self._graph

    @property
    def plan(self):
        return self._plan

    def tensor_shapes(self):
        """TensorShape of every tensor for the current input shapes (after a run)."""
        return dict(self._tshapes) if self._signature is not None else {}

    # -- running -------------------------------------------------------------------------

    def run(self, feeds):
        """Run the model.  ``feeds`` maps input name -> numpy array; returns name -> array."""
        arrays = self._check_feeds(feeds)
        signature = tuple(a.shape for a in arrays) + tuple(
            arrays[i].tobytes() for i in self._value_feeds)
        if signature != self._signature:
            self._prepare(arrays)
            self._signature = signature
        for slots, index, position in self._input_slots:
            slots[index] = arrays[position]
        results = {}
        for name in self.output_names:
            if name in self._fresh_outputs:
                results[name] = np.empty(self._fresh_outputs[name][0],
                                         self._fresh_outputs[name][1])
        for slots, index, name in self._output_slots:
            slots[index] = results[name]
        profiler = self.profiler
        if profiler.enabled:
            for node, kernel, ctx in self._steps:
                start = clock()
                kernel.execute(ctx)
                profiler.record(node, clock() - start)
            profiler.runs += 1
        else:
            for _, kernel, ctx in self._steps:
                kernel.execute(ctx)
        for name in self.output_names:
            if name not in results:  # an output that is a constant or a graph input
                source = self._graph.constants.get(name)
                if source is None:
                    source = arrays[self.input_names.index(name)]
                results[name] = np.array(source, copy=True)
        return {name: results[name] for name in self.output_names}

    def _check_feeds(self, feeds):
        if not isinstance(feeds, Mapping):
            raise InputError(f"run() takes a dict of input name -> numpy array, got "
                             f"{type(feeds).__name__}")
        expected = self.input_names
        unknown = sorted(set(feeds) - set(expected))
        missing = [name for name in expected if name not in feeds]
        if unknown or missing:
            parts = []
            if unknown:
                parts.append(f"unknown input(s) {unknown}")
            if missing:
                parts.append(f"missing input(s) {missing}")
            raise InputError(f"{' and '.join(parts)}; the model's inputs are {expected}")
        arrays = []
        for info in self._input_infos:
            value = feeds[info.name]
            try:
                array = np.asarray(value)
            except Exception as exc:  # noqa: BLE001 - any conversion failure is bad input
                raise InputError(f'input "{info.name}": cannot convert {type(value).__name__} '
                                 f"to an array: {exc}") from exc
            want = info.data_type.numpy
            declared = _describe_dims(info.dims)
            if array.dtype != want:
                raise InputError(f'input "{info.name}": expected {info.data_type} {declared}, '
                                 f"got {array.dtype} {list(array.shape)}")
            if info.dims is not None:
                if array.ndim != len(info.dims) or any(
                    isinstance(d, int) and d > 0 and d != a for d, a in zip(info.dims, array.shape)
                ):
                    raise InputError(f'input "{info.name}": expected shape {declared}, got '
                                     f"{list(array.shape)}")
            arrays.append(np.ascontiguousarray(array))
        return arrays

    def _prepare(self, arrays):
        """Infer shapes for these input shapes, plan the arena and bind every context."""
        plan, graph = self._plan, self._graph
        constants = graph.constants
        shapes = {name: tuple(v.shape) for name, v in constants.items()}
        shapes.update({name: a.shape for name, a in zip(self.input_names, arrays)})
        values = dict(constants)
        values.update(zip(self.input_names, arrays))
        infer_shapes(self._nodes, plan.ops, shapes, values)
        tshapes = {
            name: TensorShape(dims, plan.types[name], plan.formats.get(name, DataFormat.NDARRAY))
            for name, dims in shapes.items()
            if name in plan.types
        }
        self._tshapes = tshapes

        outputs = set(self.output_names)
        inputs = set(self.input_names)
        first, last = {}, {}
        for step, node in enumerate(self._nodes):
            for name in node.outputs:
                if name:
                    first.setdefault(name, step)
                    last.setdefault(name, step)
            for name in node.inputs:
                if name and name in first:
                    last[name] = step
        buffers = [
            Buffer(name, tshapes[name].bytes, first[name], last[name])
            for name in first
            if name not in outputs and name not in inputs and name not in constants
        ]
        offsets, total = plan_memory(buffers)
        arena = np.empty(max(total, 1), dtype=np.uint8)
        self.memory_bytes = total
        views = {}
        for name, offset in offsets.items():
            ts = tshapes[name]
            views[name] = (
                arena[offset: offset + ts.bytes].view(ts.data_type.numpy).reshape(ts.physical_dims)
            )
        self._fresh_outputs = {
            name: (tshapes[name].physical_dims, tshapes[name].data_type.numpy)
            for name in outputs
            if name in first
        }
        input_position = {name: i for i, name in enumerate(self.input_names)}
        steps, input_slots, output_slots = [], [], []
        for node in self._nodes:
            in_arrays, in_shapes = [], []
            for name in node.inputs:
                if not name:
                    in_arrays.append(None)
                    in_shapes.append(None)
                    continue
                in_shapes.append(tshapes.get(name) or _constant_shape(constants[name]))
                if name in constants:
                    in_arrays.append(constants[name])
                elif name in views:
                    in_arrays.append(views[name])
                else:
                    in_arrays.append(None)  # bound per run
            out_arrays = [views.get(name) if name else None for name in node.outputs]
            ctx = KernelContext(
                in_arrays,
                in_shapes,
                out_arrays,
                [tshapes[name] if name else None for name in node.outputs],
                plan.options.num_threads,
            )
            for i, name in enumerate(node.inputs):
                if name in input_position:
                    input_slots.append((ctx.inputs, i, input_position[name]))
                elif name in self._fresh_outputs:
                    output_slots.append((ctx.inputs, i, name))  # an output read later on
            for i, name in enumerate(node.outputs):
                if name in self._fresh_outputs:
                    output_slots.append((ctx.outputs, i, name))
            steps.append((node, plan.kernels[id(node)], ctx))
        self._steps = steps
        self._input_slots = input_slots
        self._output_slots = output_slots
        self._arena = arena


def _constant_shape(value):
    from pplpy.common.data_type import DataType

    return TensorShape(value.shape, DataType.from_numpy(value.dtype))


def _describe_dims(dims):
    if dims is None:
        return "[any shape]"
    return "[" + ",".join(str(d) if isinstance(d, int) and d > 0 else "?" for d in dims) + "]"
