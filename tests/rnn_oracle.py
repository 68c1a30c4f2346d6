"""A numpy oracle of the ONNX RNN, GRU and LSTM specs, for the attributes that
onnx.reference ignores (activations with alpha/beta, clip, input_forget, sequence_lens).

It follows ONNX Runtime's reading of the spec (checked against it in test_rnn_ops.py):
activation_alpha / activation_beta are consumed in order by the activations that take them;
clip bounds the input of every gate activation (not that of LSTM's h(C)); sequence entries
past sequence_lens[b] are not computed, Y is 0 there and Y_h / Y_c hold the state after the
last computed step (0 for an empty sequence).  Where ONNX Runtime departs from the spec, the
spec wins: an activation's alpha / beta not given default to those of the ONNX op of that
name (ONNX Runtime takes 0 for Affine, ThresholdedRelu and ScaledTanh).
"""

import numpy as np

ACTIVATIONS = {
    "relu": lambda x, a, b: np.maximum(x, 0),
    "tanh": lambda x, a, b: np.tanh(x),
    "sigmoid": lambda x, a, b: 1 / (1 + np.exp(-x)),
    "affine": lambda x, a, b: a * x + b,
    "leakyrelu": lambda x, a, b: np.where(x < 0, a * x, x),
    "thresholdedrelu": lambda x, a, b: np.where(x > a, x, 0),
    "scaledtanh": lambda x, a, b: a * np.tanh(b * x),
    "hardsigmoid": lambda x, a, b: np.clip(a * x + b, 0, 1),
    "elu": lambda x, a, b: np.where(x < 0, a * (np.exp(np.minimum(x, 0)) - 1), x),
    "softsign": lambda x, a, b: x / (1 + np.abs(x)),
    "softplus": lambda x, a, b: np.logaddexp(0, x),
}
# name -> (default alpha or None if it takes none, default beta or None)
ARGUMENTS = {
    "affine": (1.0, 0.0), "leakyrelu": (0.01, None), "thresholdedrelu": (1.0, None),
    "scaledtanh": (1.0, 1.0), "hardsigmoid": (0.2, 0.5), "elu": (1.0, None),
}
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
DEFAULT_ACTIVATIONS = {"RNN": ("Tanh",), "GRU": ("Sigmoid", "Tanh"),
                       "LSTM": ("Sigmoid", "Tanh", "Tanh")}


def resolve_activations(op_type, activations, alphas, betas, num_directions):
    """[(function, alpha, beta)] per direction and activation slot."""
    per = len(DEFAULT_ACTIVATIONS[op_type])
    names = list(activations) if activations else list(DEFAULT_ACTIVATIONS[op_type]) * num_directions
    alphas, betas = list(alphas or ()), list(betas or ())
    out = []
    for name in names:
        key = name.lower()
        da, db = ARGUMENTS.get(key, (None, None))
        a = b = 0.0
        if da is not None:
            a = alphas.pop(0) if alphas else da
        if db is not None:
            b = betas.pop(0) if betas else db
        out.append((ACTIVATIONS[key], a, b))
    return [out[d * per:(d + 1) * per] for d in range(num_directions)]


def rnn_oracle(op_type, X, W, R, B=None, sequence_lens=None, initial_h=None, initial_c=None,
               P=None, *, hidden_size=None, direction="forward", activations=None,
               activation_alpha=None, activation_beta=None, clip=None, input_forget=0,
               linear_before_reset=0, layout=0):
    """(Y, Y_h[, Y_c]) in float32, computed in float64."""
    X = np.asarray(X, np.float64)
    if layout:
        X = X.swapaxes(0, 1)
        initial_h = None if initial_h is None else np.swapaxes(initial_h, 0, 1)
        initial_c = None if initial_c is None else np.swapaxes(initial_c, 0, 1)
    seq, batch, _ = X.shape
    dirs = W.shape[0]
    H = R.shape[-1]
    G = GATES[op_type]
    W, R = np.asarray(W, np.float64), np.asarray(R, np.float64)
    B = np.zeros((dirs, 2 * G * H)) if B is None else np.asarray(B, np.float64)
    P = np.zeros((dirs, 3 * H)) if P is None else np.asarray(P, np.float64)
    lens = np.full(batch, seq) if sequence_lens is None else np.asarray(sequence_lens)
    h0 = np.zeros((dirs, batch, H)) if initial_h is None else np.asarray(initial_h, np.float64)
    c0 = np.zeros((dirs, batch, H)) if initial_c is None else np.asarray(initial_c, np.float64)
    acts = resolve_activations(op_type, activations, activation_alpha, activation_beta, dirs)
    Y = np.zeros((seq, dirs, batch, H))
    Yh = np.zeros((dirs, batch, H))
    Yc = np.zeros((dirs, batch, H))

    def act(slot, d, x):
        fn, a, b = acts[d][slot]
        if clip is not None:
            x = np.clip(x, -clip, clip)
        return fn(x, a, b)

    for d in range(dirs):
        reverse = direction == "reverse" or (direction == "bidirectional" and d == 1)
        Wb, Rb = B[d, :G * H], B[d, G * H:]
        for b in range(batch):
            h, c = h0[d, b].copy(), c0[d, b].copy()
            steps = range(lens[b] - 1, -1, -1) if reverse else range(lens[b])
            for t in steps:
                x = X[t, b]
                if op_type == "RNN":
                    h = act(0, d, W[d] @ x + R[d] @ h + Wb + Rb)
                elif op_type == "GRU":
                    xw = W[d] @ x + Wb
                    z = act(0, d, xw[:H] + R[d, :H] @ h + Rb[:H])
                    r = act(0, d, xw[H:2 * H] + R[d, H:2 * H] @ h + Rb[H:2 * H])
                    if linear_before_reset:
                        hh = act(1, d, xw[2 * H:] + r * (R[d, 2 * H:] @ h + Rb[2 * H:]))
                    else:
                        hh = act(1, d, xw[2 * H:] + R[d, 2 * H:] @ (r * h) + Rb[2 * H:])
                    h = (1 - z) * hh + z * h
                else:
                    g = W[d] @ x + R[d] @ h + Wb + Rb
                    pi, po, pf = P[d, :H], P[d, H:2 * H], P[d, 2 * H:]
                    i = act(0, d, g[:H] + pi * c)
                    f = 1 - i if input_forget else act(0, d, g[2 * H:3 * H] + pf * c)
                    cc = act(1, d, g[3 * H:])
                    c = f * c + i * cc
                    o = act(0, d, g[H:2 * H] + po * c)
                    fn, a, bb = acts[d][2]
                    h = o * fn(c, a, bb)  # clip bounds the gates' inputs, not h's
                Y[t, d, b] = h
            if lens[b] > 0:  # an empty sequence leaves zeros, as in ONNX Runtime
                Yh[d, b], Yc[d, b] = h, c
    if layout:
        Y, Yh, Yc = Y.transpose(2, 0, 1, 3), Yh.swapaxes(0, 1), Yc.swapaxes(0, 1)
    out = [Y.astype(np.float32), Yh.astype(np.float32)]
    if op_type == "LSTM":
        out.append(Yc.astype(np.float32))
    return out
