"""pplpy's exceptions.  Every failure a user can cause ends in one of these, with a message
that names what was wrong and what to do about it (see docs/errors.md).

    PplError
      ModelError           the model file or graph is invalid (names node/op/attribute/input)
      UnsupportedOpError   no parser, opset range, type or kernel for some nodes
      ShapeError           shape inference failed (node, op, input shapes)
      InputError           a run() feed is wrong (input, expected, given)
      RegistryError        an op or parser registration is wrong (what to fix)
      PluginError          a plugin's code raised (node, plugin package, original error)
      InternalError        a bug in pplpy itself: please report it with the traceback

``pplpy.load``, ``RuntimeBuilder``, ``Runtime.run`` and ``InferenceSession`` raise nothing
else: a Python built-in exception from inside is wrapped (see ``guard``), the original kept
as ``__cause__``.
"""


class PplError(Exception):
    """Base class of every pplpy error."""


class ModelError(PplError):
    """The model file is unreadable or invalid, or its external data escapes its folder."""


class UnsupportedOpError(PplError):
    """One or more nodes have no parser or no engine that implements them.

    ``nodes`` lists (node name, domain, op_type, opset) for every unsupported node, so a user
    sees all of them at once instead of one per attempt.
    """

    def __init__(self, message, nodes=()):
        super().__init__(message)
        self.nodes = list(nodes)


class ShapeError(PplError):
    """Shape or type inference failed for a node: the message names the node, op and input
    shapes."""


class InputError(PplError):
    """A run() feed is wrong: unknown or missing name, wrong dtype, rank or shape."""


class RegistryError(PplError):
    """A registration is wrong: duplicate key, overlapping versions, a param class that is not
    a dataclass, an op context that is not an X86OptKernel, a built-in replaced without
    ``override=True``."""


class PluginError(PplError):
    """Code from a plugin package (an op context's inference, a kernel) raised an exception.

    ``node`` is the node's name, ``plugin`` the top-level package of the code that raised;
    the original exception is ``__cause__``."""

    def __init__(self, message, node=None, plugin=None):
        super().__init__(message)
        self.node = node
        self.plugin = plugin


class InternalError(PplError):
    """pplpy itself failed where it should not have; the original exception is
    ``__cause__``.  Please report it with the traceback (``pplnn --debug`` prints it)."""


# -- wrapping foreign exceptions -----------------------------------------------------------


def _is_pplpy_module(module):
    return module == "pplpy" or module.startswith("pplpy.")


def _culprit(exc):
    """(node, plugin package) of the innermost frame of ``exc`` that runs a method of an op
    context or kernel (any object with a ``node`` that has ``describe``); plugin is None when
    that code is pplpy's own."""
    found = None
    tb = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        owner = frame.f_locals.get("self")
        node = getattr(owner, "node", None)
        if node is not None and hasattr(node, "describe"):
            module = frame.f_globals.get("__name__", "")
            plugin = None if _is_pplpy_module(module) else module.split(".")[0]
            if found is None or plugin is not None:
                found = (node, plugin)
        tb = tb.tb_next
    return found


# What an out-of-memory error suggests, by default (a run: the feeds' shapes decide).
RUN_MEMORY_HINT = "check the model's and the inputs' shapes"


def wrap_exception(exc, memory_error=None, where="pplpy", memory_hint=RUN_MEMORY_HINT):
    """The PplError to raise for a non-pplpy exception ``exc``.

    Raised by a plugin's code -> PluginError naming the node and the package; MemoryError
    -> ``memory_error`` (a PplError class) when given, its message ending in
    ``memory_hint``; anything else -> InternalError (with the node when one is on the
    stack)."""
    culprit = _culprit(exc)
    detail = f"{type(exc).__name__}: {exc}"
    if culprit is not None and culprit[1] is not None:
        node, plugin = culprit
        return PluginError(f"{node.describe()}: plugin {plugin!r} raised {detail}",
                           node=node.name, plugin=plugin)
    if isinstance(exc, MemoryError) and memory_error is not None:
        return memory_error(f"{where}: out of memory ({detail or 'MemoryError'}); "
                            f"{memory_hint}")
    at = f" at {culprit[0].describe()}" if culprit is not None else ""
    return InternalError(f"{where}: internal error{at}: {detail} (please report this with "
                         f"the traceback)")


class guard:
    """``with guard(where, memory_error):`` lets PplErrors through and turns any other
    Exception into a PplError (see ``wrap_exception``); KeyboardInterrupt and SystemExit pass
    untouched.  A class, not a generator context manager: the generator's frame kept the
    wrapped exception while raising the new one, a reference cycle through the traceback
    that held the failed run's frames (its feeds, up to gigabytes) until the garbage
    collector ran."""

    __slots__ = ("where", "memory_error", "memory_hint")

    def __init__(self, where, memory_error=None, memory_hint=RUN_MEMORY_HINT):
        self.where = where
        self.memory_error = memory_error
        self.memory_hint = memory_hint

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc is None or isinstance(exc, PplError) or not isinstance(exc, Exception):
            return False
        try:
            raise wrap_exception(exc, self.memory_error, self.where,
                                 self.memory_hint) from exc
        finally:
            exc = tb = None  # this frame, in the new error's traceback, holds neither
