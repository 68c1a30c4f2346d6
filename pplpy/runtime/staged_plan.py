"""StagedPlan: a run planned in stages, for graphs where a value the run computes decides a
shape (NonZero's count, the boxes NonMaxSuppression keeps, TopK's k or a Reshape's shape
computed from the data, an If whose cond is computed and whose branches differ in shape).

pplpy plans memory before a run, so the first node whose plan-time shape inference needs
such a value (a ``ValueRequired``: the *cut*) cannot be planned with the others.  Instead of
refusing the model, the plan cuts the graph there:

    first stage   every node that does not depend on the cut node: a plan made once per
                  input signature, like any other (staged again if it holds a cut of its
                  own)
    rest          the cut node and everything downstream of it, planned after the first
                  stage ran: the values crossing the cut are its feeds, and those a rest
                  node reads as shape-deciding values (``value_inputs``) are fed by value,
                  so their digests key the rest's plan in the runtime's PlanCache of rests

A rest that holds another such node is staged in turn (``make_plan`` recurses), so NonZero
-> ... -> TopK with a computed k runs in three stages.  All the rest plans of one runtime,
however deep the stages and however many input signatures, share one least-recently-used
budget of ``plan_cache_size`` plans (each StagedPlan keeping its own would hold that many
squared for two cuts in a row).  Values crossing a cut are copied out of one stage's arena
and into the next's.  The first stage's plan is reused while the feeds' signature holds; a
rest plan is made again whenever a deciding value changes (NonZero over a detector's
scores: nearly every run), as engines with dynamic shapes allocate per run.  A node whose
needed value no cut can supply (one computed inside a control-flow body, a blocked tensor)
keeps the UnsupportedOpError that names it.
"""

import itertools

from pplpy.common.data_format import DataFormat
from pplpy.engines.x86.ops.op_context import ValueRequired
from pplpy.errors import UnsupportedOpError
from pplpy.runtime.plan import ExecutionPlan, value_digest
from pplpy.runtime.plan_cache import PlanCache

# Cuts one plan may take, counting every stage below the first (deeper would nest Python
# calls past the interpreter's recursion limit; models have a handful).
MAX_CUTS = 64


def held_plans(plan):
    """The ExecutionPlans ``plan`` holds: itself, or a StagedPlan's first stage's and its last
    rest's (which the RestPlanCache may have let go of since)."""
    if not isinstance(plan, StagedPlan):
        return [plan]
    rest = held_plans(plan._last_rest) if plan._last_rest is not None else []
    return held_plans(plan.first) + rest


def make_plan(result, feeds, value_feeds, num_threads, pool=None, rest_cache=None,
              feed_dims=None, cuts=0):
    """An ExecutionPlan for these feeds, or a StagedPlan where a value computed by the run
    decides a shape (arguments as ExecutionPlan's; ``rest_cache``: the runtime's
    PlanCache of rest plans, a new one of 8 where None; ``cuts``: those taken above this one)."""
    if rest_cache is None:
        rest_cache = PlanCache(8)
    try:
        return ExecutionPlan(result, feeds, value_feeds, num_threads, pool, feed_dims)
    except UnsupportedOpError as exc:
        if not isinstance(exc.__cause__, ValueRequired):
            raise
        cut = _cut_at(result, exc, value_feeds)
        if cut is None:
            raise
        if cuts >= MAX_CUTS:
            raise UnsupportedOpError(
                f"{exc}; pplpy plans such a value by cutting the plan before the node, and "
                f"this model needs more than {MAX_CUTS} cuts", nodes=exc.nodes) from exc
    return StagedPlan(result, feeds, value_feeds, num_threads, pool, rest_cache, feed_dims,
                      cut, cuts + 1)


def _cut_at(result, exc, value_feeds):
    """(node, the values it needs that a node of this graph computes) for the node the
    error names, or None where cutting before it would not make those values known."""
    graph = result.graph
    name = exc.nodes[0][0] if exc.nodes else None
    node = next((n for n in graph.nodes if n.name == name), None)
    if node is None:
        return None
    computed = {out for n in graph.nodes for out in n.outputs if out}
    needed = []
    for index in result.ops[node].value_inputs:
        value = node.inputs[index] if index < len(node.inputs) else ""
        if value and value in computed and value not in value_feeds and _plain(graph, value):
            needed.append(value)
    return (node, needed) if needed else None


def _plain(graph, name):
    """Whether ``name`` is held NDARRAY, so that its bytes are its value as a shape rule
    reads it (a blocked tensor's are not)."""
    record = graph.values.get(name)
    return record is None or record.format in (None, DataFormat.NDARRAY)


def _unique(names):
    return list(dict.fromkeys(names))


class _StageGraph:
    """The part of a graph one stage plans: its nodes, the values fed to it and those it
    hands on.  Value records, constants and producers are the whole graph's (the root's, so
    that a stage of a stage looks them up in one step)."""

    def __init__(self, whole, nodes, input_names, output_names):
        self._whole = whole._whole if isinstance(whole, _StageGraph) else whole
        self.nodes = nodes
        self.input_names = input_names
        self.output_names = output_names
        self._outputs = frozenset(output_names)

    def is_graph_output(self, name):
        return name in self._outputs

    def __getattr__(self, name):
        return getattr(self._whole, name)


class _StageResult:
    """An engine result whose graph is one stage's (kernels, ops and options shared)."""

    def __init__(self, whole, graph):
        self._whole = whole._whole if isinstance(whole, _StageResult) else whole
        self.graph = graph

    def __getattr__(self, name):
        return getattr(self._whole, name)


class StagedPlan:
    """The plan of a first stage, and the plans of the rest for the values that crossed."""

    _serials = itertools.count()

    def __init__(self, result, feeds, value_feeds, num_threads, pool, rest_cache, feed_dims,
                 cut, cuts):
        cut_node, _ = cut
        graph = result.graph
        self.graph = graph
        self._result = result
        self._num_threads = num_threads
        self._pool = pool
        self._rest_cache = rest_cache
        self._serial = next(StagedPlan._serials)
        self._cuts = cuts
        first_nodes, rest_nodes, downstream = [], [], set()
        for node in graph.nodes:
            if node is cut_node or any(name in downstream for name in node.inputs if name):
                rest_nodes.append(node)
                downstream.update(name for name in node.outputs if name)
            else:
                first_nodes.append(node)
        made_first = {name for node in first_nodes for name in node.outputs if name}
        read = _unique(name for node in rest_nodes for name in node.inputs if name)
        # what crosses the cut: values the first stage computes and the rest reads
        self.crossing = [name for name in read if name in made_first]
        self.rest_inputs = [name for name in read if name in feeds]
        outputs = graph.output_names
        self.output_names = list(outputs)
        first_outputs = _unique(self.crossing + [n for n in outputs if n not in downstream])
        rest_outputs = [n for n in outputs if n in downstream]
        deciding = {node.inputs[i] for node in rest_nodes
                    for i in result.ops[node].value_inputs
                    if i < len(node.inputs) and node.inputs[i]}
        self.rest_value_feeds = [
            name for name in self.rest_inputs + self.crossing
            if name in value_feeds or (name in deciding and name in self.crossing
                                       and _plain(graph, name))]
        self._feed_dims = {name: tuple(array.shape) for name, array in feeds.items()}
        self._feed_dims.update(feed_dims or {})
        self._first_result = _StageResult(result, _StageGraph(
            graph, first_nodes, list(graph.input_names), first_outputs))
        self._rest_result = _StageResult(result, _StageGraph(
            graph, rest_nodes, self.rest_inputs + self.crossing, rest_outputs))
        self.first = make_plan(self._first_result, feeds, value_feeds, num_threads, pool,
                               rest_cache, feed_dims, cuts)
        self._last_rest = None

    # -- what the Runtime and the profiler read -------------------------------------------

    def _ran(self):
        return [self.first] + ([self._last_rest] if self._last_rest is not None else [])

    @property
    def arena_bytes(self):
        """Arena bytes of the plans the last run ran (the first stage's, the rest's)."""
        return sum(plan.arena_bytes for plan in self._ran())

    @property
    def plan_bytes(self):
        return sum(plan.plan_bytes for plan in self._ran())

    @property
    def nested(self):
        return tuple(runner for plan in self._ran() for runner in plan.nested)

    def _merged(self, attribute):
        merged = {}
        for plan in self._ran():
            merged.update(getattr(plan, attribute))
        return merged

    @property
    def shapes(self):
        """Dims of every value, the rest's as of the last run."""
        return self._merged("shapes")

    @property
    def tensor_shapes(self):
        """TensorShape of every arena value, the rest's as of the last run."""
        return self._merged("tensor_shapes")

    # -- running --------------------------------------------------------------------------

    def run(self, feeds, profiler=None):
        """Run the first stage, plan the rest for what crossed (or take a cached plan), run
        it, and return copies of the outputs."""
        profiling = profiler is not None and profiler.enabled
        if profiling:
            profiler.begin_run(self.first, self._result.kernels)
        first_out = self.first.run(feeds, profiler)
        rest_feeds = {name: first_out[name] for name in self.crossing}
        rest_feeds.update((name, feeds[name]) for name in self.rest_inputs)
        first_shapes = self.first.shapes
        dims = {name: tuple(first_shapes[name]) for name in self.crossing}
        dims.update((name, self._feed_dims[name]) for name in self.rest_inputs)
        signature = tuple(dims[name] for name in rest_feeds) + tuple(
            value_digest(rest_feeds[name]) for name in self.rest_value_feeds)
        key = (self._serial, signature)
        plan = self._rest_cache.get(key)
        cached = plan is not None
        if not cached:
            plan = make_plan(self._rest_result, rest_feeds, self.rest_value_feeds,
                             self._num_threads, self._pool, self._rest_cache, dims,
                             self._cuts)
        if profiling:
            profiler.begin_run(plan, self._result.kernels)
        rest_out = plan.run(rest_feeds, profiler)
        if not cached:  # as the Runtime's cache: a plan joins once it has run
            self._rest_cache.put(key, plan)
        self._last_rest = plan
        return {name: rest_out[name] if name in rest_out else first_out[name]
                for name in self.output_names}
