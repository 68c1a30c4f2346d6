"""PlanCache: the plans one runtime keeps, least recently used first out.

A plan owns its arena, so every plan kept is memory held; a runtime bounds them by
``plan_cache_size``.  It keeps two such caches: the plans by input signature (input shapes
and the values of value-deciding feeds), and the rest plans of all its StagedPlans (keyed by
the StagedPlan and the signature of what crossed its cut; see staged_plan.py).
"""

from collections import OrderedDict


class PlanCache:
    """A mapping key -> plan of at most ``size`` plans: ``get`` marks a plan used, ``put``
    lets the least recently used go when full."""

    def __init__(self, size):
        self.size = size
        self._plans = OrderedDict()

    def get(self, key):
        plan = self._plans.get(key)
        if plan is not None:
            self._plans.move_to_end(key)
        return plan

    def put(self, key, plan):
        self._plans[key] = plan
        self._plans.move_to_end(key)
        while len(self._plans) > self.size:
            self._plans.popitem(last=False)

    def plans(self):
        """The plans held, least recently used first."""
        return list(self._plans.values())

    def __len__(self):
        return len(self._plans)
