/* Post-op chains (oneDNN's post-ops, reference/000): what a GEMM or convolution applies to its
 * output tile after the product, in order, up to PPL_MAX_POST_OPS entries.
 *
 *   eltwise  x = f(x)                      f an activation code of _activation_fp32.h
 *   sum      x = p0 * other + x            other a tensor of the output's shape and layout
 *   binary   x = x (+ * max min) operand   operand per tensor, per channel or per element
 *   prelu    x = x < 0 ? slope * x : x     slope per tensor, per channel or per element
 *   select   x = cond ? x : other          (alg 1: cond ? other : x) ONNX Where after the
 *                                          chain (oneDNN's Select): cond a bool tensor and
 *                                          other a float, each broadcast on its own
 *
 * A chain is plain data (a struct array) that nogil code walks.  Operands are other values of
 * the graph, read at run time by address:
 *   per tensor   src[0]
 *   per channel  src[ch] for output channel ch < nchan (the conv's C axis, the GEMM's
 *                column); channels past nchan (N16CX padding lanes) read 0
 *   per element  src + (position - dst): laid out like the output itself (N16CX for an
 *                N16CX output), so the offset of an output float is the operand's offset.
 *
 * ppl_post_chain_tile applies entries [first, len) to a tile already stored in the output
 * (still in L1): entry by entry, each with its own loop in which the entry's kind, algorithm
 * and broadcast are constants, so that an activation's constants stay in registers across
 * the whole tile and no switch is left inside a loop.  The brgemm epilogue applies the cheap
 * prefix of a chain (a sum, then relu / leaky relu / clip) on the accumulators themselves and
 * leaves the rest to this function (see _brgemm_fp32.h).
 *
 * The including file defines PPL_VLEN and includes _activation_fp32.h first.
 */
#ifndef PPL_POST_CHAIN_FP32_H
#define PPL_POST_CHAIN_FP32_H

#ifndef PPL_ACTIVATION_FP32_H
#error "include _activation_fp32.h before _post_chain_fp32.h"
#endif

#define PPL_MAX_POST_OPS 32

/* Must match post_ops.py (PostOpKind, BinaryAlg, Broadcast); a test checks. */
enum { PPL_PO_ELTWISE = 0, PPL_PO_SUM = 1, PPL_PO_BINARY = 2, PPL_PO_PRELU = 3,
       PPL_PO_SELECT = 4 };
enum { PPL_BIN_ADD = 0, PPL_BIN_MUL = 1, PPL_BIN_MAX = 2, PPL_BIN_MIN = 3 };
enum { PPL_BC_SCALAR = 0, PPL_BC_CHANNEL = 1, PPL_BC_ELEMENT = 2 };

typedef struct {
    int kind;          /* PPL_PO_* */
    int alg;           /* eltwise: activation code; binary: PPL_BIN_* */
    int bcast;         /* PPL_BC_* of src (sum: element) */
    float p0, p1;      /* eltwise parameters; sum: p0 is the scale */
    const float *src;  /* the operand (NULL for eltwise; select: other) */
    const unsigned char *cond;  /* select: the condition (bool bytes), else NULL */
    int cbcast;        /* select: PPL_BC_* of cond */
} ppl_post_op;

typedef struct ppl_post_chain_s {
    int len;
    ptrdiff_t nchan;     /* channels of per-channel operands */
    const float *dst;    /* the output's first float: per-element operands at src + (p - dst) */
    ppl_post_op ops[PPL_MAX_POST_OPS];
} ppl_post_chain;

#define PPL_PC_INLINE static inline __attribute__((always_inline))

/* The operand vector of output floats [off, off + nv) at channel ch. */
PPL_PC_INLINE ppl_vf ppl_chain_operand(const int bcast, const float *src, ptrdiff_t eoff,
                                       ptrdiff_t ch, ptrdiff_t nchan, ptrdiff_t nv,
                                       ppl_vf scalar) {
    if (bcast == PPL_BC_SCALAR) return scalar;
    if (bcast == PPL_BC_CHANNEL) {
        ptrdiff_t cnt = nchan - ch;
        if (cnt > nv) cnt = nv;
        if (cnt >= PPL_VLEN) return ppl_act_load(src + ch);
        return cnt > 0 ? ppl_act_load_partial(src + ch, cnt) : ppl_act_splat(0.0f);
    }
    return nv == PPL_VLEN ? ppl_act_load(src + eoff) : ppl_act_load_partial(src + eoff, nv);
}

/* The condition of a select as a lane mask, for output floats [off, off + nv) at channel ch
 * (broadcast as ppl_chain_operand's); lanes past nv are false.  Bytes, so lane by lane. */
PPL_PC_INLINE ppl_vi ppl_chain_cond(const int bcast, const unsigned char *src, ptrdiff_t eoff,
                                    ptrdiff_t ch, ptrdiff_t nchan, ptrdiff_t nv) {
    float t[PPL_VLEN];
    for (int l = 0; l < PPL_VLEN; l++) {
        unsigned char v = 0;
        if (l < nv) {
            if (bcast == PPL_BC_SCALAR) v = src[0];
            else if (bcast == PPL_BC_CHANNEL) v = ch + l < nchan ? src[ch + l] : 0;
            else v = src[eoff + l];
        }
        t[l] = v ? 1.0f : 0.0f;
    }
    return ppl_act_load(t) != ppl_act_splat(0.0f);
}

/* One vector through one entry; kind and alg are constants after inlining. */
PPL_PC_INLINE ppl_vf ppl_chain_apply(const int kind, const int alg, ppl_vf x, ppl_vf o,
                                     float p0, float p1) {
    switch (kind) {
    case PPL_PO_ELTWISE: return ppl_activation_inline(x, alg, p0, p1);
    case PPL_PO_SUM: return ppl_act_splat(p0) * o + x;
    case PPL_PO_PRELU: return ppl_act_select(x < ppl_act_splat(0.0f), x * o, x);
    default: break;
    }
    switch (alg) {
    case PPL_BIN_ADD: return x + o;
    case PPL_BIN_MUL: return x * o;
    /* numpy.maximum / minimum: a NaN on either side gives NaN */
    case PPL_BIN_MAX:
        return ppl_act_select(o != o, o, ppl_act_select(x < o, o, x));
    default:
        return ppl_act_select(o != o, o, ppl_act_select(x > o, o, x));
    }
}

/* Entry e over the M x n_valid tile at c: row r at c + r * ldc, column j at
 * (j / 16) * cbs + j % 16 (cbs 16: plain rows), tile column 0 is channel col0, and c sits
 * at offset base of the output. */
PPL_PC_INLINE void ppl_chain_entry_tile(const int kind, const int alg, const int bcast,
                                        const ppl_post_op *e, ptrdiff_t nchan, float *c,
                                        ptrdiff_t base, ptrdiff_t ldc, ptrdiff_t cbs,
                                        ptrdiff_t M, ptrdiff_t n_valid, ptrdiff_t col0) {
    const float p0 = e->p0, p1 = e->p1;
    const ppl_vf scalar = (kind != PPL_PO_ELTWISE && bcast == PPL_BC_SCALAR)
                              ? ppl_act_splat(e->src[0]) : ppl_act_splat(0.0f);
    ptrdiff_t jf = 0; /* the first column the loop below takes */
    if (kind == PPL_PO_ELTWISE && ldc == 16) {
        /* The rows side by side in each 16-column block (a convolution's run of pixels):
         * every full block is one flat loop, which overlaps the vectors of a long
         * activation better than the loop over rows below (EfficientNet-B0's swish on the
         * fma tier, `perf`) */
        for (; jf + 16 <= n_valid; jf += 16)
            ppl_activation_loop(alg, c + (jf / 16) * cbs, c + (jf / 16) * cbs, M * 16, p0, p1);
    }
    for (ptrdiff_t r = 0; r < M; r++) {
        for (ptrdiff_t j0 = jf; j0 < n_valid; j0 += PPL_VLEN) {
            const ptrdiff_t nv = n_valid - j0 < PPL_VLEN ? n_valid - j0 : PPL_VLEN;
            const ptrdiff_t off = r * ldc + (j0 / 16) * cbs + j0 % 16;
            float *p = c + off;
            ppl_vf x = nv == PPL_VLEN ? ppl_act_load(p) : ppl_act_load_partial(p, nv);
            ppl_vf o = ppl_act_splat(0.0f);
            if (kind != PPL_PO_ELTWISE)
                o = ppl_chain_operand(bcast, e->src, base + off, col0 + j0, nchan, nv, scalar);
            if (kind == PPL_PO_SELECT) {
                const ppl_vi m = ppl_chain_cond(e->cbcast, e->cond, base + off, col0 + j0,
                                                nchan, nv);
                x = alg == 0 ? ppl_act_select(m, x, o) : ppl_act_select(m, o, x);
            } else {
                x = ppl_chain_apply(kind, alg, x, o, p0, p1);
            }
            if (nv == PPL_VLEN)
                ppl_act_store(p, x);
            else
                ppl_act_store_partial(p, x, nv);
        }
    }
}

#define PPL_PC_TILE(kind, alg, bcast) \
    ppl_chain_entry_tile(kind, alg, bcast, e, ch->nchan, c, base, ldc, cbs, M, n_valid, col0)
#define PPL_PC_ACT(name) \
    case PPL_ACT_##name: PPL_PC_TILE(PPL_PO_ELTWISE, PPL_ACT_##name, 0); break;
#define PPL_PC_BC(kind, alg)                                                  \
    switch (e->bcast) {                                                       \
    case PPL_BC_SCALAR: PPL_PC_TILE(kind, alg, PPL_BC_SCALAR); break;         \
    case PPL_BC_CHANNEL: PPL_PC_TILE(kind, alg, PPL_BC_CHANNEL); break;       \
    default: PPL_PC_TILE(kind, alg, PPL_BC_ELEMENT); break;                   \
    }

/* Entries [first, ch->len) of the chain over the stored M x n_valid tile at c (see
 * ppl_chain_entry_tile for the geometry), c pointing into the output ch->dst. */
static __attribute__((noinline, unused)) void ppl_post_chain_tile(
        const ppl_post_chain *ch, int first, float *c, ptrdiff_t ldc, ptrdiff_t cbs,
        ptrdiff_t M, ptrdiff_t n_valid, ptrdiff_t col0) {
    const ptrdiff_t base = c - ch->dst;
    for (int i = first; i < ch->len; i++) {
        const ppl_post_op *e = &ch->ops[i];
        switch (e->kind) {
        case PPL_PO_ELTWISE:
            switch (e->alg) {
            PPL_FOR_EACH_ACTIVATION(PPL_PC_ACT)
            default: break;
            }
            break;
        case PPL_PO_SUM: PPL_PC_TILE(PPL_PO_SUM, 0, PPL_BC_ELEMENT); break;
        case PPL_PO_PRELU: PPL_PC_BC(PPL_PO_PRELU, 0) break;
        case PPL_PO_SELECT:
            if (e->alg == 0) {
                PPL_PC_BC(PPL_PO_SELECT, 0)
            } else {
                PPL_PC_BC(PPL_PO_SELECT, 1)
            }
            break;
        case PPL_PO_BINARY:
            switch (e->alg) {
            case PPL_BIN_ADD: PPL_PC_BC(PPL_PO_BINARY, PPL_BIN_ADD) break;
            case PPL_BIN_MUL: PPL_PC_BC(PPL_PO_BINARY, PPL_BIN_MUL) break;
            case PPL_BIN_MAX: PPL_PC_BC(PPL_PO_BINARY, PPL_BIN_MAX) break;
            default: PPL_PC_BC(PPL_PO_BINARY, PPL_BIN_MIN) break;
            }
            break;
        default: break;
        }
    }
}
/* Entries [first, ch->len) over n contiguous floats at c that all belong to channel
 * `channel` (an NDARRAY output's channel plane: a transposed convolution's, a pool's): a
 * per-channel operand is that channel's one value there, so a copy of the chain reads it
 * per tensor, and ppl_post_chain_tile does the work. */
static __attribute__((noinline, unused)) void ppl_post_chain_plane(
        const ppl_post_chain *ch, int first, float *c, ptrdiff_t n, ptrdiff_t channel) {
    static const float zero = 0.0f;
    static const unsigned char no = 0;
    ppl_post_chain one;
    one.len = ch->len;
    one.nchan = ch->nchan;
    one.dst = ch->dst;
    for (int i = first; i < ch->len; i++) {
        one.ops[i] = ch->ops[i];
        if (one.ops[i].kind != PPL_PO_ELTWISE && one.ops[i].bcast == PPL_BC_CHANNEL) {
            one.ops[i].bcast = PPL_BC_SCALAR;
            one.ops[i].src = channel < ch->nchan ? ch->ops[i].src + channel : &zero;
        }
        if (one.ops[i].kind == PPL_PO_SELECT && one.ops[i].cbcast == PPL_BC_CHANNEL) {
            one.ops[i].cbcast = PPL_BC_SCALAR;
            one.ops[i].cond = channel < ch->nchan ? ch->ops[i].cond + channel : &no;
        }
    }
    ppl_post_chain_tile(&one, first, c, n, 16, 1, n, 0);
}

/* Entries [first, ch->len) over the output floats [start, start + n) of ch->dst, for a
 * producer that writes its output in runs rather than GEMM tiles (a reduction, a resize).
 * The output's layout: NDARRAY (blocked 0), float i of channel (i / cstride) % nchan
 * (cstride: the floats after the channel axis); or N16CX (blocked 1), float i in lane i % 16
 * of channel block (i / cstride) % ceil(nchan / 16) (cstride: 16 x the spatial size).  The
 * run is cut where the channel changes (NDARRAY planes), at row ends of nchan channels
 * (NDARRAY, cstride 1) or at block ends (N16CX: whole 16-lane rows as one tile, padding
 * lanes left as they are), and each piece goes to ppl_post_chain_tile / _plane; an NDARRAY
 * run whose chain reads nothing per channel is one piece. */
static __attribute__((noinline, unused)) void ppl_post_chain_range(
        const ppl_post_chain *ch, int first, ptrdiff_t start, ptrdiff_t n, ptrdiff_t cstride,
        int blocked) {
    float *const y = (float *)ch->dst;
    const ptrdiff_t end = start + n;
    const ptrdiff_t nchan = ch->nchan > 0 ? ch->nchan : 1;
    const ptrdiff_t nblk = (nchan + 15) / 16;
    int per_channel = 0;
    for (int i = first; i < ch->len; i++)
        per_channel |= (ch->ops[i].kind != PPL_PO_ELTWISE && ch->ops[i].bcast == PPL_BC_CHANNEL)
                       || (ch->ops[i].kind == PPL_PO_SELECT && ch->ops[i].cbcast == PPL_BC_CHANNEL);
    if (!blocked && !per_channel) {
        if (n > 0) ppl_post_chain_tile(ch, first, y + start, 0, 16, 1, n, 0);
        return;
    }
    if (cstride < 1) cstride = 1;
    while (start < end) {
        ptrdiff_t stop;
        if (!blocked && cstride == 1) {
            const ptrdiff_t c = start % nchan;
            stop = start + (nchan - c) < end ? start + (nchan - c) : end;
            ppl_post_chain_tile(ch, first, y + start, 0, 16, 1, stop - start, c);
        } else if (!blocked) {
            stop = (start / cstride + 1) * cstride;
            if (stop > end) stop = end;
            ppl_post_chain_plane(ch, first, y + start, stop - start, (start / cstride) % nchan);
        } else {
            const ptrdiff_t c0 = ((start / cstride) % nblk) * 16, lane = start % 16;
            stop = (start / cstride + 1) * cstride;
            if (stop > end) stop = end;
            if (lane == 0 && stop - start >= 16) {
                const ptrdiff_t rows = (stop - start) / 16;
                ppl_post_chain_tile(ch, first, y + start, 16, 16, rows,
                                    nchan - c0 < 16 ? nchan - c0 : 16, c0);
                stop = start + rows * 16;
            } else {
                ptrdiff_t valid;
                if (stop > start - lane + 16) stop = start - lane + 16;
                valid = nchan - (c0 + lane);
                if (valid > stop - start) valid = stop - start;
                if (valid > 0)
                    ppl_post_chain_tile(ch, first, y + start, 16, 16, 1, valid, c0 + lane);
            }
        }
        start = stop;
    }
}

#undef PPL_PC_TILE
#undef PPL_PC_ACT
#undef PPL_PC_BC

#endif /* PPL_POST_CHAIN_FP32_H */
