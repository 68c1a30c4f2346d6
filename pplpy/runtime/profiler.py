"""Per-step timing of runs: summaries per node and per op type, and Chrome trace events.

    rt.profiler.enabled = True
    rt.run(feeds)                      # each step timed (Plan.run_profiled)
    rt.profiler.per_op_type()          # [(op type, nodes, mean ms, share)]
    rt.profiler.save_trace("out.json") # open in https://ui.perfetto.dev or chrome://tracing

A trace holds one complete event ("ph": "X") per step per run: name = op type, args = node
name, input and output shapes with their formats, the kernel's class and algorithm, and the
work items the step is cut into for the thread team (``node_items`` keeps them per node).
Events of a run are laid end to end from the run's start (the plan runs its steps in order).

With a thread team, each parallel step's shares (each thread's part of its work) are events
too, one lane per thread that ran them (tid: the Linux thread id; args: the CPU), and
``per_node_threads()`` says per node how late the last share started after the step began
and how much longer the longest share took than the mean: a step whose workers joined late
(woken from sleep, or on a busy CPU) shows the first, one cut into uneven parts the second.
In the steps whose items are claimed as they run (pplpy_step.h, ppl_next_items) the shares
even out what they can: there a long share is one whose thread came early or ran fast.
"""

import json
import os
import time
from collections import defaultdict

clock = time.perf_counter

# Trace events kept at most (a long profiling loop must not grow without bound).
MAX_TRACE_EVENTS = 1_000_000


class Profiler:
    def __init__(self):
        self.enabled = False
        self.runs = 0
        self.node_times = defaultdict(float)  # node name -> seconds over all runs
        self.node_types = {}
        self.node_items = {}  # node name -> work items of its largest step (0: not reported)
        # node name -> [steps, sum of last share's start (s), sum of longest / mean share]
        self.node_shares = defaultdict(lambda: [0, 0.0, 0.0])
        self.trace_events = []
        self._origin = clock()
        self._cursor = None  # microseconds since origin where the next step starts
        self._plan = None
        self._kernels = {}

    def reset(self):
        self.runs = 0
        self.node_times.clear()
        self.node_items.clear()
        self.node_shares.clear()
        self.trace_events.clear()
        self._cursor = None

    def mark(self):
        """What the profiler holds now, for ``rollback`` if the run that follows fails (a
        staged plan's first stage has recorded its steps when its rest fails)."""
        return (dict(self.node_times), dict(self.node_types), dict(self.node_items),
                {name: list(stats) for name, stats in self.node_shares.items()},
                len(self.trace_events), self._cursor)

    def rollback(self, mark):
        """Forget what was recorded since ``mark()``."""
        times, types, items, shares, events, cursor = mark
        self.node_times = defaultdict(float, times)
        self.node_types = types
        self.node_items = items
        self.node_shares = defaultdict(lambda: [0, 0.0, 0.0], shares)
        del self.trace_events[events:]
        self._cursor = cursor

    def begin_run(self, plan, kernels=None):
        """Called by the Runtime before a profiled run of ``plan`` (an ExecutionPlan);
        ``kernels`` maps nodes to kernels (for the kernel and algorithm in the trace)."""
        self._plan = plan
        self._kernels = kernels or {}
        self._cursor = (clock() - self._origin) * 1e6

    def record(self, node, seconds, work_items=0, shares=None):
        """One step of ``node`` took ``seconds``; ``work_items``: the independent items the
        step is cut into for the thread team (fewer than the threads leave some idle; 1 for
        a serial step, 0 where the kernel does not say); ``shares``: None, or the step's
        shares as the team ran them (``pplpy.runtime.step.Share``: start after the step
        began, seconds, CPU, thread)."""
        self.node_times[node.name] += seconds
        self.node_types[node.name] = node.op_type
        self.node_items[node.name] = max(self.node_items.get(node.name, 0), work_items)
        if self._cursor is None:
            self._cursor = (clock() - self._origin) * 1e6
        duration = seconds * 1e6
        if len(self.trace_events) < MAX_TRACE_EVENTS:
            self.trace_events.append({
                "name": node.op_type,
                "cat": node.domain or "ai.onnx",
                "ph": "X",
                "ts": round(self._cursor, 3),
                "dur": round(duration, 3),
                "pid": os.getpid(),
                "tid": 0,
                "args": self._args(node, work_items),
            })
        if shares:
            self._record_shares(node, shares)
        self._cursor += duration

    def _record_shares(self, node, shares):
        stats = self.node_shares[node.name]
        mean = sum(s.seconds for s in shares) / len(shares)
        stats[0] += 1
        stats[1] += max(s.start for s in shares)
        stats[2] += max(s.seconds for s in shares) / mean if mean > 0 else 1.0
        for k, share in enumerate(shares):
            if len(self.trace_events) >= MAX_TRACE_EVENTS:
                break
            self.trace_events.append({
                "name": node.op_type, "cat": "share", "ph": "X",
                "ts": round(self._cursor + share.start * 1e6, 3),
                "dur": round(share.seconds * 1e6, 3), "pid": os.getpid(), "tid": share.thread,
                "args": {"node": node.name, "share": k, "cpu": share.cpu},
            })

    def per_node_threads(self):
        """{node: (mean us from the step's start to its last share's, mean of longest share
        / mean share)} for the nodes whose steps ran on the thread team."""
        return {name: (late * 1e6 / n, spread / n)
                for name, (n, late, spread) in self.node_shares.items() if n}

    def _args(self, node, work_items=0):
        args = {"node": node.name, "op_type": node.op_type}
        if work_items:
            args["work_items"] = work_items
        plan = self._plan
        shapes = getattr(plan, "tensor_shapes", None) or {}
        graph = getattr(plan, "graph", None)

        def describe(name):
            ts = shapes.get(name)
            if ts is not None:
                return {"name": name, "type": str(ts.data_type), "shape": list(ts.dims),
                        "format": ts.data_format.name}
            record = graph.values.get(name) if graph is not None else None
            fmt = record.format.name if record is not None and record.format else None
            return {"name": name, "format": fmt}

        args["inputs"] = [describe(n) for n in node.inputs if n]
        args["outputs"] = [describe(n) for n in node.outputs if n]
        kernel = self._kernels.get(node)
        if kernel is not None:
            args["kernel"] = type(kernel).__name__
            algorithm = getattr(kernel, "algorithm", None)
            if algorithm is not None:
                args["algorithm"] = str(algorithm)
        return args

    def trace(self):
        """The Chrome trace (a dict with ``traceEvents``) of the profiled runs so far."""
        return {"traceEvents": list(self.trace_events), "displayTimeUnit": "ms",
                "otherData": {"producer": "pplpy", "runs": self.runs}}

    def save_trace(self, path):
        """Write ``trace()`` as JSON to ``path``; returns the number of events."""
        with open(path, "w") as f:
            json.dump(self.trace(), f)
        return len(self.trace_events)

    def per_node(self):
        """[(node, op type, mean ms per run)] slowest first."""
        runs = max(self.runs, 1)
        rows = [(n, self.node_types[n], t * 1e3 / runs) for n, t in self.node_times.items()]
        return sorted(rows, key=lambda r: -r[2])

    def per_op_type(self):
        """[(op type, node count, mean ms per run, share)] slowest first."""
        runs = max(self.runs, 1)
        totals, counts = defaultdict(float), defaultdict(int)
        for name, seconds in self.node_times.items():
            totals[self.node_types[name]] += seconds
            counts[self.node_types[name]] += 1
        grand = sum(totals.values()) or 1.0
        rows = [(t, counts[t], s * 1e3 / runs, s / grand) for t, s in totals.items()]
        return sorted(rows, key=lambda r: -r[2])
