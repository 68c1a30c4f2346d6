"""Engine-independent graph passes.

    Graph --PassManager(pipeline)--> Graph
    pipeline = ordered [(pass, once | fixed_point)], default in pass_manager.DEFAULT_PIPELINE

Rules target op types and report what they changed; whole-graph passes (DCE, folding)
return change counts.  Engine-specific work (formats, reorders, fusion) lives in the engine.
"""

from pplpy.optimizer.pass_base import PassContext
from pplpy.optimizer.pass_manager import DEFAULT_PIPELINE, PASSES, PassManager, load_pipeline

__all__ = ["DEFAULT_PIPELINE", "PASSES", "PassContext", "PassManager", "load_pipeline"]
