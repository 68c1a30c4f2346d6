# N16CX channel maps of float tensors whose output blocks gather lanes from many source
# blocks (ChannelShuffle; any channel map whose lane runs are mostly one lane long), as
# permutes of whole 16-lane pixels (_chmap_fp32.h).
#
# Written once and included by _chmap_fp32_{avx512,fma,sse}.pyx.  _copy's
# make_channel_map_n16cx_step does the same job for any element size, as lane runs: fast
# when the runs are long (a concat, a split on the 16-lane grid), but a shuffle's runs are
# single lanes and its per-run bookkeeping then costs 10-20 times a copy.  The tables are
# built here per output block: each distinct source block it reads, paired two by two, is
# one permute op (two source blocks, a 16-lane index into their 32 lanes, the output lanes
# it writes).
#
# The step splits (batch, pixel tile) over the team with ppl_partition, so a tensor of few
# blocks still uses every thread; a task fills the tile's pixels of every output block,
# each source pixel loaded from memory once and re-read from L1 by the other blocks.

from libc.stdint cimport int32_t, uint32_t

import numpy as np

from pplpy.engines.x86.impls import _copy
from pplpy.runtime.step cimport Step, new_step, ppl_partition
from pplpy.runtime.step import run_steps


cdef extern from "_chmap_fp32.h" nogil:
    int PPL_CHMAP_PERMUTES
    void ppl_chmap_block_fp32(float *dst, const float *const *a, const float *const *b,
                              const int32_t *idx, const uint32_t *mask, int nops,
                              Py_ssize_t s0, Py_ssize_t s1)


# True where a pixel is moved by vector permutes (AVX-512).  The other tiers copy lane by
# lane, measured 0.8-1.0x the speed of _copy's lane runs, so the ops use those there; the
# variants still share one API and results (the tests compare them).
PERMUTES = bool(PPL_CHMAP_PERMUTES)


cdef enum:
    LANES = 16
    # the most permute ops one output block can need: 16 lanes from 16 blocks, paired
    MAX_OPS = 8
    # each op's entry in the Py_ssize_t table: input a, block a, input b, block b
    OP_FIELDS = 4
    # A task moves a tile of TILE pixels through every output block, so the source pixels
    # it reads again and again (each feeds several output blocks) are still in cache.
    # Measured on ShuffleNet's shapes (7-17 blocks): 36-64 pixels best, 8 or 256+ up to
    # 1.6x slower.
    TILE = 64


cdef struct ChmapArgs:
    float *dst
    Py_ssize_t batch
    Py_ssize_t out_blocks
    Py_ssize_t pixels
    Py_ssize_t tile                   # pixels a task moves in every output block
    const char **srcs                 # input i's data
    const Py_ssize_t *in_blocks       # input i's channel blocks
    const Py_ssize_t *first_op        # ops of output block ob: [first_op[ob], first_op[ob+1])
    const Py_ssize_t *ops             # OP_FIELDS per op
    const int32_t *idx                # LANES per op
    const uint32_t *mask              # one per op


cdef void chmap_fp32_step(const void *a, int tid, int nthreads) noexcept nogil:
    cdef const ChmapArgs *args = <const ChmapArgs *>a
    cdef Py_ssize_t b, e, u, n, tile, ob, s0, s1, k, k0, nops, pixels = args.pixels
    cdef Py_ssize_t block = pixels * LANES, tiles = (pixels + args.tile - 1) // args.tile
    cdef const Py_ssize_t *op
    cdef const float *pa[MAX_OPS]
    cdef const float *pb[MAX_OPS]
    ppl_partition(args.batch * tiles, tid, nthreads, &b, &e)
    for u in range(b, e):
        n = u // tiles
        tile = u - n * tiles
        s0 = tile * args.tile
        s1 = min(pixels, s0 + args.tile)
        for ob in range(args.out_blocks):
            k0 = args.first_op[ob]
            nops = args.first_op[ob + 1] - k0
            for k in range(nops):
                op = &args.ops[(k0 + k) * OP_FIELDS]
                pa[k] = (<const float *>args.srcs[op[0]]
                         + (n * args.in_blocks[op[0]] + op[1]) * block)
                pb[k] = (<const float *>args.srcs[op[2]]
                         + (n * args.in_blocks[op[2]] + op[3]) * block)
            ppl_chmap_block_fp32(args.dst + (n * args.out_blocks + ob) * block, pa, pb,
                                 &args.idx[k0 * LANES], &args.mask[k0], <int>nops, s0, s1)


def n16cx_permute_ops(sources):
    """For each output block of a channel map (``sources[c]`` = (input, channel) output
    channel c copies), its permute ops: (input a, block a, input b, block b, 16 indices
    into the pair's 32 lanes, mask of the output lanes written).  Padding lanes are in no
    mask."""
    blocks = []
    for ob in range(0, len(sources), LANES):
        lanes = [(i, j // LANES, j % LANES) for i, j in sources[ob:ob + LANES]]
        keys = list(dict.fromkeys((i, k) for i, k, _ in lanes))    # first-seen order
        ops = []
        for p in range(0, len(keys), 2):
            pair = keys[p:p + 2]
            idx, mask = [0] * LANES, 0
            for l, (i, k, j) in enumerate(lanes):
                if (i, k) in pair:
                    idx[l] = pair.index((i, k)) * LANES + j
                    mask |= 1 << l
            ops.append((*pair[0], *pair[len(pair) - 1], idx, mask))
        blocks.append(ops)
    return blocks


def make_channel_map_fp32_step(size_t dst, srcs, channels, sources, Py_ssize_t batch,
                               Py_ssize_t pixels):
    """Step: float channel c of the N16CX output at ``dst`` is channel sources[c][1] of the
    N16CX input sources[c][0] (inputs at ``srcs``, ``channels`` channels each); the
    output's padding lanes become 0.  The same contract as _copy's
    make_channel_map_n16cx_step for es == 4."""
    _copy.check_channel_map(srcs, channels, sources, batch, pixels, 4)
    cdef Py_ssize_t n = len(srcs)
    blocks = n16cx_permute_ops(sources)
    out_blocks = len(blocks)
    nops = sum(len(ops) for ops in blocks)
    table = np.zeros(nops * OP_FIELDS + out_blocks + 1 + 2 * n, np.intp)
    lanes = np.zeros(nops * (LANES + 1) + 1, np.uint32)     # idx, then masks
    first, k = [], 0
    for ops in blocks:
        first.append(k)
        for ia, ka, ib, kb, idx, mask in ops:
            table[k * OP_FIELDS:(k + 1) * OP_FIELDS] = (ia, ka, ib, kb)
            lanes[k * LANES:(k + 1) * LANES] = idx
            lanes[nops * LANES + k] = mask
            k += 1
    first.append(k)
    pos = nops * OP_FIELDS
    table[pos:pos + out_blocks + 1] = first
    table[pos + out_blocks + 1:pos + out_blocks + 1 + n] = [(c + LANES - 1) // LANES
                                                            for c in channels]
    table[pos + out_blocks + 1 + n:] = [<Py_ssize_t>s for s in srcs]
    cdef Py_ssize_t[::1] t = table
    cdef uint32_t[::1] u = lanes
    cdef Step step = new_step(chmap_fp32_step, sizeof(ChmapArgs),
                              _copy._parallel(batch * out_blocks * pixels * LANES * 4),
                              (table, lanes))
    cdef ChmapArgs *args = <ChmapArgs *>step.args
    args.dst = <float *>dst
    args.batch = batch if out_blocks > 0 else 0
    args.out_blocks = out_blocks
    args.pixels = pixels
    args.tile = TILE if PERMUTES else 4 * TILE
    args.ops = &t[0]
    args.first_op = &t[pos]
    args.in_blocks = &t[pos + out_blocks + 1]
    args.srcs = <const char **>&t[pos + out_blocks + 1 + n]
    args.idx = <const int32_t *>&u[0]
    args.mask = &u[nops * LANES]
    return step


def channel_map_n16cx(xs, channels, sources, y, int num_threads=1):
    """y's channel c = channel sources[c][1] of xs[sources[c][0]], all blocked float32
    (N, ceil(c/16), S, 16) arrays (tests)."""
    for x in list(xs) + [y]:
        if x.dtype != np.float32 or not x.flags.c_contiguous:
            raise ValueError("every array must be C-contiguous float32")
    run_steps([make_channel_map_fp32_step(y.__array_interface__["data"][0],
                                          [x.__array_interface__["data"][0] for x in xs],
                                          list(channels), list(sources), y.shape[0],
                                          y.shape[2])], num_threads)
