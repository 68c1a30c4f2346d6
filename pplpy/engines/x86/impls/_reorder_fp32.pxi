# Reorders between NDARRAY (N, C, S) and N16CX (N, ceil(C/16), S, 16) float32, as steps of
# the run plan (make_reorder_step); the two wrappers below run one such step, for tests.
#
# Written once and included by _reorder_fp32_{avx512,fma,sse}.pyx.  A reorder is a
# transpose of each 16-channel block between (16, S) and (S, 16); it is done a tile of
# PIXEL_TILE pixels at a time, so the 16 source (or destination) rows being walked stay
# in L1 while each side is read or written in whole cache lines, in 4 x 4 register blocks
# (_transpose_fp32.h; element by element the compiler's loops moved 6-14 GB/s).

from libc.string cimport memset

from pplpy.runtime.step cimport Step, new_step, ppl_partition
from pplpy.runtime.step import run_steps

include "_kernel_support.pxi"

cdef extern from "_transpose_fp32.h" nogil:
    void ppl_transpose_block(const float *x, Py_ssize_t ldx, float *y, Py_ssize_t ldy,
                             Py_ssize_t rows, Py_ssize_t cols)
    void ppl_transpose_block_by_x_rows(const float *x, Py_ssize_t ldx, float *y, Py_ssize_t ldy,
                                       Py_ssize_t rows, Py_ssize_t cols)


cdef enum:
    LANES = 16
    PIXEL_TILE = 64
    # A reorder moving fewer bytes runs as a serial step (see pplpy_step.h).
    PARALLEL_BYTES = 262144


cdef void _to_n16cx_tile(const float* x, float* y, Py_ssize_t S, Py_ssize_t w,
                         int lanes) noexcept nogil:
    """y[j * 16 + l] = x[l * S + j] for j < w, l < lanes; lanes [lanes, 16) are set to 0."""
    cdef Py_ssize_t j
    ppl_transpose_block_by_x_rows(x, S, y, LANES, w, lanes)
    if lanes < LANES:
        for j in range(w):
            memset(y + j * LANES + lanes, 0, (LANES - lanes) * sizeof(float))


cdef void _from_n16cx_tile(const float* x, float* y, Py_ssize_t S, Py_ssize_t w,
                           int lanes) noexcept nogil:
    """y[l * S + j] = x[j * 16 + l] for j < w, l < lanes (padding lanes dropped)."""
    ppl_transpose_block(x, LANES, y, S, lanes, w)


cdef void _reorder_task(const float* x, float* y, Py_ssize_t C, Py_ssize_t blocks,
                        Py_ssize_t S, bint to_n16cx, const Tasks2D* tasks,
                        Py_ssize_t task) noexcept nogil:
    cdef Py_ssize_t r0, r1, c0, c1, r, n, cb, b, j, w, plain, blocked
    cdef int lanes
    task_range(tasks, task, &r0, &r1, &c0, &c1)
    for r in range(r0, r1):    # r = n * blocks + cb
        n = r // blocks
        cb = r % blocks
        lanes = <int>min(LANES, C - cb * LANES)
        for b in range(ceil_div(c1 - c0, PIXEL_TILE)):
            j = c0 + b * PIXEL_TILE
            w = min(PIXEL_TILE, c1 - j)
            plain = (n * C + cb * LANES) * S + j      # x[n, cb * 16, j] in NDARRAY
            blocked = (r * S + j) * LANES             # x[n, cb, j, 0] in N16CX
            if to_n16cx:
                _to_n16cx_tile(x + plain, y + blocked, S, w, lanes)
            else:
                _from_n16cx_tile(x + blocked, y + plain, S, w, lanes)


cdef struct ReorderArgs:
    const float *x
    float *y
    Py_ssize_t C
    Py_ssize_t blocks
    Py_ssize_t S
    bint to_n16cx
    Tasks2D tasks


cdef void _reorder_step(const void *a, int tid, int nthreads) noexcept nogil:
    cdef const ReorderArgs *args = <const ReorderArgs *>a
    cdef Py_ssize_t b, e, t
    ppl_partition(args.tasks.count, tid, nthreads, &b, &e)
    for t in range(b, e):
        _reorder_task(args.x, args.y, args.C, args.blocks, args.S, args.to_n16cx, &args.tasks,
                      t)


def make_reorder_step(size_t x, size_t y, Py_ssize_t N, Py_ssize_t C, Py_ssize_t S,
                      bint to_n16cx):
    """Step: NDARRAY (N, C, S) at x -> N16CX (N, ceil(C/16), S, 16) at y (to_n16cx), or back;
    float32.  Threads split (n, channel block) rows and long pixel runs."""
    if min(N, C, S) < 0:
        raise ValueError(f"negative dims (N, C, S) = {(N, C, S)}")
    cdef Py_ssize_t blocks = ceil_div(C, LANES)
    cdef Step step = new_step(_reorder_step, sizeof(ReorderArgs),
                              N * blocks * S * LANES * 4 >= PARALLEL_BYTES)
    cdef ReorderArgs *args = <ReorderArgs *>step.args
    args.x = <const float *>x
    args.y = <float *>y
    args.C = C
    args.blocks = blocks
    args.S = S
    args.to_n16cx = to_n16cx
    args.tasks = split_2d(N * blocks, S, GRAIN // LANES)
    return step


cdef int _check_shapes(const float[:, :, ::1] plain, const float[:, :, :, ::1] blocked) except -1:
    cdef Py_ssize_t N = plain.shape[0], C = plain.shape[1], S = plain.shape[2]
    cdef tuple want = (N, ceil_div(C, LANES), S, LANES)
    cdef tuple got = (blocked.shape[0], blocked.shape[1], blocked.shape[2], blocked.shape[3])
    if got != want:
        raise ValueError(f"NDARRAY {(N, C, S)} needs N16CX {want}, got {got}")
    return 0


def ndarray_to_n16cx_fp32(const float[:, :, ::1] x, float[:, :, :, ::1] y, int num_threads):
    """y[n, c // 16, s, c % 16] = x[n, c, s]; padding lanes c >= C set to 0."""
    _check_shapes(x, y)
    if x.shape[0] * x.shape[1] * x.shape[2] > 0:
        run_steps([make_reorder_step(<size_t>&x[0, 0, 0], <size_t>&y[0, 0, 0, 0], x.shape[0],
                                     x.shape[1], x.shape[2], True)], num_threads)


def n16cx_to_ndarray_fp32(const float[:, :, :, ::1] x, float[:, :, ::1] y, int num_threads):
    """y[n, c, s] = x[n, c // 16, s, c % 16]; padding lanes dropped."""
    _check_shapes(y, x)
    if y.shape[0] * y.shape[1] * y.shape[2] > 0:
        run_steps([make_reorder_step(<size_t>&x[0, 0, 0, 0], <size_t>&y[0, 0, 0], y.shape[0],
                                     y.shape[1], y.shape[2], False)], num_threads)
