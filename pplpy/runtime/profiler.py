"""Per-node timing of runs, summarised per node and per op type."""

import time
from collections import defaultdict


class Profiler:
    def __init__(self):
        self.enabled = False
        self.runs = 0
        self.node_times = defaultdict(float)  # node name -> seconds over all runs
        self.node_types = {}

    def reset(self):
        self.runs = 0
        self.node_times.clear()

    def record(self, node, seconds):
        self.node_times[node.name] += seconds
        self.node_types[node.name] = node.op_type

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


clock = time.perf_counter
