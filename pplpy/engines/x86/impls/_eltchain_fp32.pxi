# An element-wise chain (pplpy::EltwiseChain) as one step: y = f_k(... f_2(f_1(x)) ...), each
# f an activation of the table (_activation_fp32.h) or a binary op with an operand
# (_eltchain_fp32.h), in ONE pass over memory instead of one pass per node.
#
# Written once and included by _eltchain_fp32_{avx512,fma,sse}.pyx, which define PPL_VLEN.
#
# The output is cut into tiles of at most TILE floats (4 KiB).  The first entry reads the
# tile of x and writes the tile of y; every later entry works on y's tile in place while it
# sits in L1, so x is read once and y written once whatever the chain's length (the
# intermediate values live in L1 rather than in registers: one code path per entry, called
# once per tile, instead of a switch per vector).  Threads split the output at multiples of
# 16 floats (ppl_partition); a tile never crosses an N16CX channel block, so a per-channel
# operand is one 16-lane pattern per tile.
#
# Operand kinds (make_chain_step's entries):
#     NONE      an activation, no operand
#     SCALAR    b[0], read when the step runs (a constant, or a one-value tensor)
#     SELF      the running value itself (x * x inside a chain)
#     FULL      b[i], a tensor with the output's physical layout
#     BLOCK     b[(i / inner) % m], NDARRAY: an operand whose non-1 dims are one contiguous
#               run of the output's axes (a last-axis bias: inner 1; a per-channel vector
#               [C, 1, 1]: inner H*W; a [S, H] tensor on [B, S, H]: inner 1, m S*H)
#     CHANNEL   b[c] on N16CX (c < m; padding lanes read 0)
#
# On N16CX with a channel count that is not a multiple of 16, the padding lanes of the last
# channel block are written 0 after the chain: a chain with Log or Div may make them inf or
# NaN on the way, but the next op (a Conv's reduction) reads zeros, as after a Conv.
#
#     make_chain_step(x, y, n, entries, run=0, blocks=1, channels=0, keep=None)

from libc.math cimport NAN
from pplpy.runtime.step cimport Step, new_step, ppl_partition

import numpy as np

from pplpy.runtime.step import run_steps


cdef extern from "_eltchain_fp32.h" nogil:
    enum:
        PPL_VLEN
        PPL_ACT_NONE
        PPL_ACT_CLIP
        PPL_ACT_SWISH
        PPL_CHAIN_ADD
        PPL_CHAIN_SUB
        PPL_CHAIN_RSUB
        PPL_CHAIN_MUL
        PPL_CHAIN_DIV
        PPL_CHAIN_RDIV
        PPL_CHAIN_MAX
        PPL_CHAIN_MIN
        PPL_CHAIN_POW
        PPL_CHAIN_RPOW
        PPL_CHAIN_PRELU
        PPL_CHAIN_LAST
    void ppl_activation(const float *x, float *y, Py_ssize_t n, int code, float p0, float p1)
    void ppl_chain_binary_vec(int op, const float *a, const float *b, float *y, Py_ssize_t n)
    void ppl_chain_binary_scalar(int op, const float *a, float s, float *y, Py_ssize_t n)
    void ppl_chain_binary_lanes(int op, const float *a, const float *pat16, float *y,
                                Py_ssize_t npix)


cdef enum:
    OPD_NONE = 0
    OPD_SCALAR = 1
    OPD_SELF = 2
    OPD_FULL = 3
    OPD_BLOCK = 4
    OPD_CHANNEL = 5
    # Floats per tile: 4 KiB of y, and as much of x and of each operand, stay in L1.
    TILE = 1024
    PARALLEL_MIN = 65536
    SPLIT = 16

# For Python callers.
VLEN = PPL_VLEN
NONE, SCALAR, SELF, FULL, BLOCK, CHANNEL = (OPD_NONE, OPD_SCALAR, OPD_SELF, OPD_FULL,
                                            OPD_BLOCK, OPD_CHANNEL)
BINARY = {"ADD": PPL_CHAIN_ADD, "SUB": PPL_CHAIN_SUB, "RSUB": PPL_CHAIN_RSUB,
          "MUL": PPL_CHAIN_MUL, "DIV": PPL_CHAIN_DIV, "RDIV": PPL_CHAIN_RDIV,
          "MAX": PPL_CHAIN_MAX, "MIN": PPL_CHAIN_MIN, "POW": PPL_CHAIN_POW,
          "RPOW": PPL_CHAIN_RPOW, "PRELU": PPL_CHAIN_PRELU}
_ACTIVATIONS = frozenset(range(PPL_ACT_NONE + 1, PPL_ACT_SWISH + 1))
_BINARY = frozenset(BINARY.values())
# The operand of a Clip entry with a NaN bound, which becomes y * NaN.
cdef float[::1] _NAN_VALUE = np.full(1, NAN, np.float32)


cdef struct _Entry:
    int code            # an activation code (post_ops.PostOp) or a PPL_CHAIN_* op
    int kind            # OPD_*
    float p0, p1        # the activation's parameters
    const float *b      # the operand
    Py_ssize_t m        # BLOCK: values of the operand's run; CHANNEL: channels it holds
    Py_ssize_t inner    # BLOCK: output elements per operand value


cdef struct _ChainArgs:
    const float *x
    float *y
    Py_ssize_t n            # output floats (N16CX: the padded physical size)
    Py_ssize_t nentries
    const _Entry *entries
    Py_ssize_t run          # N16CX: floats of one (n, channel block); 0: NDARRAY
    Py_ssize_t blocks       # N16CX: channel blocks
    Py_ssize_t channels     # N16CX: real channels; lanes past them in the last block -> 0


cdef void _block_operand(const _Entry *ent, const float *src, float *dst, Py_ssize_t i,
                         Py_ssize_t n) noexcept nogil:
    """dst = src op b[(i + k) / inner % m] for k < n: contiguous stretches of b (inner 1) or
    runs of one value of b."""
    cdef Py_ssize_t pos = 0, cnt, j, q, r
    if ent.inner == 1:
        j = i % ent.m
        while pos < n:
            cnt = min(ent.m - j, n - pos)
            ppl_chain_binary_vec(ent.code, src + pos, ent.b + j, dst + pos, cnt)
            pos += cnt
            j = 0
    else:
        q = i // ent.inner
        r = i - q * ent.inner
        while pos < n:
            cnt = min(ent.inner - r, n - pos)
            ppl_chain_binary_scalar(ent.code, src + pos, ent.b[q % ent.m], dst + pos, cnt)
            pos += cnt
            r = 0
            q += 1


cdef void _tile(const _ChainArgs *args, Py_ssize_t i, Py_ssize_t n) noexcept nogil:
    """Output floats [i, i + n): every entry in order, the first from x, the rest in place."""
    cdef const float *src = args.x + i
    cdef float *dst = args.y + i
    cdef const _Entry *ent
    cdef Py_ssize_t k, cb = 0, p, c0
    cdef int l
    cdef float pat[16]
    if args.run:
        cb = (i // args.run) % args.blocks
    for k in range(args.nentries):
        ent = &args.entries[k]
        if ent.kind == OPD_NONE:
            ppl_activation(src, dst, n, ent.code, ent.p0, ent.p1)
        elif ent.kind == OPD_SCALAR:
            ppl_chain_binary_scalar(ent.code, src, ent.b[0], dst, n)
        elif ent.kind == OPD_SELF:
            ppl_chain_binary_vec(ent.code, src, src, dst, n)
        elif ent.kind == OPD_FULL:
            ppl_chain_binary_vec(ent.code, src, ent.b + i, dst, n)
        elif ent.kind == OPD_BLOCK:
            _block_operand(ent, src, dst, i, n)
        else:
            for l in range(16):
                pat[l] = ent.b[cb * 16 + l] if cb * 16 + l < ent.m else 0
            ppl_chain_binary_lanes(ent.code, src, pat, dst, n // 16)
        src = dst
    c0 = args.channels - cb * 16
    if args.run and c0 < 16:
        for p in range(n // 16):
            for l in range(c0, 16):
                dst[p * 16 + l] = 0


cdef void _chain_step(const void *a, int tid, int nthreads) noexcept nogil:
    cdef const _ChainArgs *args = <const _ChainArgs *>a
    cdef Py_ssize_t b, e, i, cnt
    ppl_partition((args.n + SPLIT - 1) // SPLIT, tid, nthreads, &b, &e)
    b = min(b * SPLIT, args.n)
    e = min(e * SPLIT, args.n)
    i = b
    while i < e:
        cnt = min(<Py_ssize_t>TILE, e - i)
        if args.run:
            cnt = min(cnt, args.run - i % args.run)
        _tile(args, i, cnt)
        i += cnt


def make_chain_step(size_t x, size_t y, Py_ssize_t n, entries, Py_ssize_t run=0,
                    Py_ssize_t blocks=1, Py_ssize_t channels=0, keep=None):
    """y = the chain ``entries`` applied to x, n floats.

    Each entry is (code, kind, p0, p1, b, m, inner): ``code`` an activation code
    (post_ops.PostOp, kind NONE) or an op of BINARY; ``b`` the operand's address (SCALAR,
    FULL, BLOCK, CHANNEL), m and inner as the module comment says.  ``run`` > 0 means N16CX:
    n is the padded size, run = pixels * 16 floats per (n, channel block), ``blocks`` blocks
    per image and ``channels`` real channels.  The addresses must stay valid while the step
    lives (``keep``).  x == y is allowed only when no entry reads x as an operand.
    """
    cdef Py_ssize_t k, count = len(entries)
    if count == 0:
        raise ValueError("make_chain_step: the chain has no entries")
    if n < 0:
        raise ValueError(f"n = {n}: expected a non-negative element count")
    if n > 0 and (x == 0 or y == 0):
        raise ValueError("x and y must be valid addresses")
    if run:
        if run < 0 or run % 16 or blocks <= 0 or n % run or not 0 < channels <= blocks * 16:
            raise ValueError(f"N16CX run {run}, blocks {blocks}, channels {channels}, n {n}: "
                             "expected run a positive multiple of 16 dividing n and "
                             "0 < channels <= 16 * blocks")
    table = np.zeros(count * sizeof(_Entry), np.uint8)
    cdef unsigned char[::1] t = table
    cdef _Entry *ents = <_Entry *>&t[0]
    cdef _Entry *ent
    for k, (code, kind, p0, p1, b, m, inner) in enumerate(entries):
        ent = &ents[k]
        ent.code, ent.kind, ent.p0, ent.p1 = code, kind, p0, p1
        ent.b, ent.m, ent.inner = <const float *><size_t>b, m, inner
        if kind == OPD_NONE:
            if code not in _ACTIVATIONS:
                raise ValueError(f"entry {k}: activation code {code} is not one of "
                                 f"{sorted(_ACTIVATIONS)}")
            if code == PPL_ACT_CLIP and (p0 != p0 or p1 != p1):
                # A NaN Clip bound gives NaN everywhere, as np.clip: x * NaN.
                ent.code, ent.kind = PPL_CHAIN_MUL, OPD_SCALAR
                ent.b = <const float *>&_NAN_VALUE[0]
            continue
        if code not in _BINARY:
            raise ValueError(f"entry {k}: binary op {code} is not one of {BINARY}")
        if kind == OPD_SELF:
            continue
        if kind not in (OPD_SCALAR, OPD_FULL, OPD_BLOCK, OPD_CHANNEL) or b == 0:
            raise ValueError(f"entry {k}: operand kind {kind} at address {b}: expected a "
                             "known kind and a valid address")
        if kind == OPD_BLOCK and (m <= 0 or inner <= 0 or run):
            raise ValueError(f"entry {k}: BLOCK operand needs m, inner > 0 and NDARRAY")
        if kind == OPD_CHANNEL and (not run or m <= 0):
            raise ValueError(f"entry {k}: CHANNEL operand needs N16CX and m > 0")
    cdef Step step = new_step(_chain_step, sizeof(_ChainArgs), n >= PARALLEL_MIN, (table, keep))
    cdef _ChainArgs *args = <_ChainArgs *>step.args
    args.x, args.y, args.n = <const float *>x, <float *>y, n
    args.nentries, args.entries = count, ents
    args.run, args.blocks, args.channels = run, blocks, channels
    step.label = "eltwise chain"
    return step


def chain_fp32(const float[::1] x, float[::1] y, entries, int num_threads, Py_ssize_t run=0,
               Py_ssize_t blocks=1, Py_ssize_t channels=0):
    """make_chain_step run once (tests)."""
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"x has {x.shape[0]} elements but y has {y.shape[0]}")
    if x.shape[0] == 0:
        return
    run_steps([make_chain_step(<size_t>&x[0], <size_t>&y[0], x.shape[0], entries, run, blocks,
                               channels)], num_threads)
