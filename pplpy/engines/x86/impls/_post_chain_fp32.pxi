# Cython side of the post-op chains of _post_chain_fp32.h: their declarations, and the two
# helpers every producer with an epilogue shares (GEMM, direct and Winograd convolution):
# filling a chain from the Python entries a kernel passes, and splitting it between the
# brgemm epilogue's registers and the pass over the stored tile.  Included by
# _brgemm_fp32.pxi (the including .pyx defines PPL_VLEN first).
#
# A chain entry, as make_*_step takes it: (kind, alg, p0, p1, address, broadcast) with the
# PostOpKind, BinaryAlg / PostOp code and Broadcast of post_ops.py; address is the operand's
# (0 for eltwise).  A select entry adds (cond_address, cond_broadcast): its condition, bool
# bytes; the 6-tuple form has none.  The legacy (post_op, p0, p1) arguments are a one-entry
# eltwise chain.

cdef extern from "_brgemm_fp32.h" nogil:
    enum:
        PPL_MAX_POST_OPS
        PPL_PO_ELTWISE
        PPL_PO_SUM
        PPL_PO_BINARY
        PPL_PO_PRELU
        PPL_PO_SELECT
        PPL_BC_SCALAR
        PPL_BC_CHANNEL
        PPL_BC_ELEMENT
        PPL_POST_RELU
        PPL_POST_LEAKY_RELU
        PPL_POST_CLIP

    ctypedef struct ppl_post_op:
        int kind
        int alg
        int bcast
        float p0
        float p1
        const float *src
        const unsigned char *cond
        int cbcast

    ctypedef struct ppl_post_chain:
        int len
        Py_ssize_t nchan
        const float *dst
        ppl_post_op ops[32]  # PPL_MAX_POST_OPS (checked in _fill_post_chain)

    void ppl_post_chain_tile(const ppl_post_chain *ch, int first, float *c, Py_ssize_t ldc,
                             Py_ssize_t cbs, Py_ssize_t M, Py_ssize_t n_valid,
                             Py_ssize_t col0)
    void ppl_post_chain_range(const ppl_post_chain *ch, int first, Py_ssize_t start,
                              Py_ssize_t n, Py_ssize_t cstride, int blocked)

from pplpy.engines.x86.impls.post_ops import (MAX_POST_OPS, BinaryAlg, Broadcast, PostOp,
                                              PostOpKind)

_ACTIVATION_CODES = frozenset(int(code) for code in PostOp if code != PostOp.NONE)
_BINARY_ALGS = frozenset(int(a) for a in BinaryAlg)
_BROADCASTS = frozenset(int(b) for b in Broadcast)


def _full_chain(int post_op, float p0, float p1, post_chain):
    """The legacy single post-op followed by post_chain, as one list of entries."""
    head = [(int(PostOpKind.ELTWISE), post_op, p0, p1, 0, 0, 0, 0)] if post_op else []
    return head + [tuple(e) for e in post_chain]


cdef int _fill_post_chain(ppl_post_chain *ch, entries, size_t dst, Py_ssize_t nchan,
                          str who) except -1:
    """ch = entries (see above) for an output at dst with nchan channels; ValueError naming
    the entry when one is malformed, so that the step never meets a bad chain."""
    if PPL_MAX_POST_OPS != MAX_POST_OPS or len(entries) > MAX_POST_OPS:
        raise ValueError(f"{who}: a chain has at most {MAX_POST_OPS} post-ops, got "
                         f"{len(entries)}")
    ch.len = len(entries)
    ch.nchan = nchan
    ch.dst = <const float *>dst
    cdef int i
    for i, entry in enumerate(entries):
        if len(entry) not in (6, 8):
            raise ValueError(f"{who}: post-op {i} must be (kind, alg, p0, p1, address, "
                             f"broadcast[, cond_address, cond_broadcast]), got {entry!r}")
        kind, alg, p0, p1, address, bcast = entry[:6]
        cond, cbcast = (int(entry[6]), int(entry[7])) if len(entry) == 8 else (0, 0)
        kind, alg, address, bcast = int(kind), int(alg), int(address), int(bcast)
        if kind == PostOpKind.ELTWISE:
            ok = alg in _ACTIVATION_CODES and address == 0
        elif kind == PostOpKind.SUM:
            ok = address != 0 and bcast == Broadcast.ELEMENT
        elif kind == PostOpKind.BINARY:
            ok = alg in _BINARY_ALGS and address != 0 and bcast in _BROADCASTS
        elif kind == PostOpKind.PRELU:
            ok = address != 0 and bcast in _BROADCASTS
        elif kind == PostOpKind.SELECT:
            ok = (alg in (0, 1) and address != 0 and bcast in _BROADCASTS and cond != 0
                  and cbcast in _BROADCASTS)
        else:
            ok = False
        ok = ok and (kind == PostOpKind.SELECT or cond == 0)
        if not ok:
            raise ValueError(f"{who}: post-op {i} {entry!r} is not a valid (kind, alg, p0, "
                             f"p1, address, broadcast) entry (post_ops.PostOpKind)")
        ch.ops[i].kind = kind
        ch.ops[i].alg = alg
        ch.ops[i].bcast = bcast
        ch.ops[i].p0 = p0
        ch.ops[i].p1 = p1
        ch.ops[i].src = <const float *><size_t>address
        ch.ops[i].cond = <const unsigned char *><size_t>cond
        ch.ops[i].cbcast = cbcast
    return 0


cdef void _split_post_chain(const ppl_post_chain *ch, ppl_epilogue *ep, bint inline_sum,
                            bint any_eltwise) noexcept nogil:
    """The chain's prefix that ep applies on registers (a leading sum when inline_sum, then
    one activation: relu, leaky relu or clip, or any when any_eltwise), the rest as ep.chain
    over the stored tile.  ep's other fields are left as they are."""
    cdef int i = 0
    ep.dst = ch.dst
    ep.sum = NULL
    ep.post_op = 0
    if inline_sum and ch.len > 0 and ch.ops[0].kind == PPL_PO_SUM:
        ep.sum = ch.ops[0].src
        ep.sum_scale = ch.ops[0].p0
        i = 1
    if i < ch.len and ch.ops[i].kind == PPL_PO_ELTWISE and (
            any_eltwise or ch.ops[i].alg == PPL_POST_RELU
            or ch.ops[i].alg == PPL_POST_LEAKY_RELU or ch.ops[i].alg == PPL_POST_CLIP):
        ep.post_op = ch.ops[i].alg
        ep.p0 = ch.ops[i].p0
        ep.p1 = ch.ops[i].p1
        i += 1
    ep.chain = ch if i < ch.len else NULL
    ep.chain_first = i


# -- producers that write their output in runs (reductions, Resize) -----------------------

cdef struct RunChain:
    ppl_post_chain chain   # len 0: none
    Py_ssize_t cstride     # the output's layout, as ppl_post_chain_range takes it
    int blocked


cdef int _fill_run_chain(RunChain *rc, post_chain, size_t y, Py_ssize_t channels,
                         Py_ssize_t cstride, bint blocked, str who) except -1:
    """rc = make_*_step's post_chain (entries as above) for the output at y: ``channels``
    its channel count, ``cstride`` and ``blocked`` its layout (ppl_post_chain_range)."""
    entries = [tuple(e) for e in post_chain]
    if entries and (channels < 1 or cstride < 1):
        raise ValueError(f"{who}: a post-op chain needs channels >= 1 and cstride >= 1, got "
                         f"{channels} and {cstride}")
    _fill_post_chain(&rc.chain, entries, y, max(channels, 1), who)
    rc.cstride = max(cstride, 1)
    rc.blocked = blocked
    return 0


cdef inline void _run_chain(const RunChain *rc, Py_ssize_t start, Py_ssize_t n) noexcept nogil:
    """The chain (if any) over output floats [start, start + n), just written."""
    if rc.chain.len > 0 and n > 0:
        ppl_post_chain_range(&rc.chain, 0, start, n, rc.cstride, rc.blocked)
