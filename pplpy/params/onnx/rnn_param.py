"""Attributes of the recurrent ops RNN, GRU and LSTM (opset 7 on; ``layout`` from 14)."""

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class RNNParam:
    hidden_size: int | None = None      # optional in the spec: R's last dim
    direction: str = "forward"          # forward | reverse | bidirectional
    # () means the op's default (Tanh) for each direction.  The schema's default is
    # ["Tanh", "Tanh"], the bidirectional list even for one direction, which would read as
    # two activations for a forward RNN: a factory keeps the schema check off this field.
    activations: tuple = field(default_factory=tuple)
    activation_alpha: tuple = ()
    activation_beta: tuple = ()
    clip: float | None = None
    layout: int = 0                     # 1: X, Y, initial_h and Y_h are batch-major (14 on)


@dataclass(frozen=True, slots=True)
class GRUParam:
    hidden_size: int | None = None
    direction: str = "forward"
    activations: tuple = ()
    activation_alpha: tuple = ()
    activation_beta: tuple = ()
    clip: float | None = None
    linear_before_reset: int = 0
    layout: int = 0


@dataclass(frozen=True, slots=True)
class LSTMParam:
    hidden_size: int | None = None
    direction: str = "forward"
    activations: tuple = ()
    activation_alpha: tuple = ()
    activation_beta: tuple = ()
    clip: float | None = None
    input_forget: int = 0
    layout: int = 0
