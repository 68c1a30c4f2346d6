"""Running a built model.

    RuntimeBuilder (parse, optimise, engine passes, kernels; shared packed weights)
        -> Runtime.run(feeds): input-shape signature -> cached ExecutionPlan (shapes, host
           values, one arena planned by live intervals, a compiled step array) -> one nogil
           call on the runtime's thread team -> outputs copied out

    step.pyx / step.pxd   the compiled-step ABI: Step, PythonStep, Plan
    plan.py               ExecutionPlan: everything that depends on the input shapes
    staged_plan.py        StagedPlan: a plan cut where a value the run computes decides a
                          shape, the rest planned once that value is known
    memory_planner.py     offsets in one arena for values whose lifetimes do not overlap
    runtime.py            Runtime: feeds, plan cache, the lock that serialises calls
    builder.py            RuntimeBuilder: model file -> engine result -> Runtimes

The public names are imported lazily: kernels cimport ``step`` while the engine is still
being imported.
"""

__all__ = ["Runtime", "RuntimeBuilder", "Tensor"]


def __getattr__(name):
    if name == "RuntimeBuilder":
        from pplpy.runtime.builder import RuntimeBuilder

        return RuntimeBuilder
    if name == "Runtime":
        from pplpy.runtime.runtime import Runtime

        return Runtime
    if name == "Tensor":
        from pplpy.runtime.tensor import Tensor

        return Tensor
    raise AttributeError(f"module 'pplpy.runtime' has no attribute {name!r}")
