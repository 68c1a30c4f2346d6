"""pplpy's exceptions.  Every failure a user can cause ends in one of these, with a message
that names what was wrong and what to do about it."""


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
    """A registration conflicts with an existing one (duplicate key or overlapping versions)."""
