# Spatial sampling kernels for float32, as compiled steps of the run plan (see
# pplpy/runtime/step.pxd).  Written once, included by _spatial_fp32_{avx512,fma,sse}.pyx.
#
#   make_grid_sample_step        y[n, c, o] = X[n, c] interpolated at grid[n, o] (GridSample)
#   make_affine_grid_step        grid[n, o] = theta[n] @ (regular grid position of o, 1)
#   make_col2im_step             y[n, c] = sum of the column blocks of x put back in place
#   make_deform_sample_step      cols[n, c, k, o] = mask * X[n, c] sampled at the kernel tap k
#                                of output o moved by its offset (DeformConv's first phase;
#                                the GEMM family multiplies W into the columns)
#
# The coordinates are data (grid, theta, offsets), so the steps compute every sample when
# they run.  Interpolation is separable: each spatial dim gives a few taps (an index and a
# weight), and a sample is the tensor product of the taps of its dims.  Every index a step
# reads is clamped or checked against its dim first, whatever the data holds (NaN, inf,
# 1e30), so no step reads outside its input: a NaN coordinate gives a NaN sample, and so
# does an infinite one under reflection padding (infinity has no reflection).
#
# GridSample follows onnx.reference (which follows PyTorch): the normalised coordinate is
# mapped to pixels in float32, nearest rounds half to even before the padding mode applies,
# border clamps and reflection folds a coordinate outside [lo, hi] (the pixel edges, or the
# pixel centres with align_corners), and each tap outside the image is then a zero, the
# nearest edge pixel or its reflection.  Cubic is Keys' kernel with a = -0.75.
#
# Work items depend on the shape only, never on the team size, so every thread count gives
# the same bytes.

from libc.math cimport NAN, floor, floorf, fmod, isnan, rintf
from libc.string cimport memset
from pplpy.runtime.step cimport Step, new_step, ppl_partition

cdef enum:
    # Multiply-adds below which a step runs serially: a fork and join cost more than they save.
    PARALLEL_MIN = 65536
    # GridSample and DeformConv sample up to 3 spatial dims (4 ** 3 cubic taps per sample).
    MAX_SPATIAL = 3
    MAX_TAPS = 64
    # Col2Im folds any rank up to this.
    MAX_RANK = 8
    NEAREST = 0
    LINEAR = 1
    CUBIC = 2
    PAD_ZEROS = 0
    PAD_BORDER = 1
    PAD_REFLECTION = 2

MODES = {"nearest": NEAREST, "linear": LINEAR, "cubic": CUBIC}
PADDINGS = {"zeros": PAD_ZEROS, "border": PAD_BORDER, "reflection": PAD_REFLECTION}


def _sizes(what, values, int limit):
    values = [int(v) for v in values]
    if len(values) > limit:
        raise ValueError(f"{what}: {len(values)} dims, more than the {limit} pplpy handles")
    if any(v < 0 for v in values):
        raise ValueError(f"{what}: negative size in {values}")
    return values


def _prod(values):
    cdef Py_ssize_t p = 1
    for v in values:
        p *= v
    return p


# ---------------------------------------------------------------------------------------
# GridSample

cdef struct GridSampleArgs:
    const float* x          # (N, C, *dims)
    const float* grid       # (N, points, rank), coordinates in reverse dim order (x first)
    float* y                # (N, C, points)
    Py_ssize_t n, c, rank, points, plane
    Py_ssize_t dims[MAX_SPATIAL]
    Py_ssize_t strides[MAX_SPATIAL]   # element strides of one (n, c) plane of x
    int mode, padding
    bint align_corners


cdef inline double _reflect(double v, double lo, double hi) noexcept nogil:
    """v folded into [lo, hi] by reflecting at its ends, as onnx.reference does (NaN stays)."""
    cdef double span = hi - lo, dist, turns, rest
    if span <= 0:
        return lo
    if v < lo:
        dist = lo - v
        turns = floor(dist / span)
        rest = dist - turns * span
        v = lo + rest if fmod(turns, 2.0) == 0 else hi - rest
    elif v > hi:
        dist = v - hi
        turns = floor(dist / span)
        rest = dist - turns * span
        v = hi - rest if fmod(turns, 2.0) == 0 else lo + rest
    # Rounding at huge distances must not leave the range.
    if v < lo:
        v = lo
    if v > hi:
        v = hi
    return v


cdef inline Py_ssize_t _tap_index(Py_ssize_t i, Py_ssize_t d, int padding, double lo,
                                  double hi) noexcept nogil:
    """Pixel read for tap i of a dim of d pixels under the padding mode, or -1 for a zero."""
    if padding == PAD_ZEROS:
        return i if 0 <= i < d else -1
    if padding == PAD_REFLECTION:
        i = <Py_ssize_t>_reflect(<double>i, lo, hi)
    if i < 0:
        return 0
    if i >= d:
        return d - 1
    return i


cdef inline void _cubic_weights(float t, float* w) noexcept nogil:
    """Keys' cubic convolution weights (a = -0.75) of the taps at -1, 0, 1, 2 from t in [0, 1)."""
    cdef float a = -0.75, one = 1, two = 2, five = 5, eight = 8, four = 4, three = 3
    cdef float s = t + one, u = one - t, v = two - t
    w[0] = ((a * s - five * a) * s + eight * a) * s - four * a
    w[1] = ((a + two) * t - (a + three)) * t * t + one
    w[2] = ((a + two) * u - (a + three)) * u * u + one
    w[3] = ((a * v - five * a) * v + eight * a) * v - four * a


cdef int _axis_taps(float g, Py_ssize_t d, int mode, int padding, bint align,
                    Py_ssize_t* index, float* weight) noexcept nogil:
    """The taps of one spatial dim (d >= 1 pixels) for normalised coordinate g: their count,
    pixel indices (-1 for a zero) and weights."""
    cdef float one = 1, two = 2, fd = <float>d, last = <float>(d - 1), v, t
    cdef float margin = 8
    cdef double lo, hi
    cdef Py_ssize_t base, k
    if align:
        v = (g + one) / two * last
        lo = 0.0
        hi = d - 1.0
    else:
        v = ((g + one) * fd - one) / two
        lo = -0.5
        hi = d - 0.5
    if mode == NEAREST:
        v = rintf(v)
    if v < lo or v > hi:
        if padding == PAD_BORDER:
            v = 0 if v < 0 else (last if v > last else v)
        elif padding == PAD_REFLECTION:
            v = <float>_reflect(v, lo, hi)
    if isnan(v):
        index[0] = 0
        weight[0] = v
        return 1
    # Far outside (zeros padding only) every tap is a zero either way: keep indices small.
    if v < -margin:
        v = -margin
    elif v > fd + margin:
        v = fd + margin
    if mode == NEAREST:
        index[0] = _tap_index(<Py_ssize_t>v, d, padding, lo, hi)
        weight[0] = one
        return 1
    base = <Py_ssize_t>floorf(v)
    t = v - <float>base
    if mode == LINEAR:
        index[0] = _tap_index(base, d, padding, lo, hi)
        index[1] = _tap_index(base + 1, d, padding, lo, hi)
        weight[0] = one - t
        weight[1] = t
        return 2
    _cubic_weights(t, weight)
    for k in range(4):
        index[k] = _tap_index(base - 1 + k, d, padding, lo, hi)
    return 4


cdef void _grid_sample_step(const void* a, int tid, int nthreads) noexcept nogil:
    """One (n, output point) per item: its taps once, then every channel."""
    cdef const GridSampleArgs* p = <const GridSampleArgs*>a
    cdef Py_ssize_t begin, end, item, b, q, i, j, k, ch, taps, off
    cdef Py_ssize_t rank = p.rank
    cdef Py_ssize_t index[MAX_SPATIAL][4]
    cdef float weight[MAX_SPATIAL][4]
    cdef int count[MAX_SPATIAL]
    cdef int pos[MAX_SPATIAL]
    cdef Py_ssize_t offsets[MAX_TAPS]
    cdef float weights[MAX_TAPS]
    cdef float w, acc, one = 1
    cdef bint zero
    cdef const float* g
    cdef const float* src
    cdef float* dst
    ppl_partition(p.n * p.points, tid, nthreads, &begin, &end)
    for item in range(begin, end):
        b = item // p.points
        q = item - b * p.points
        g = p.grid + item * rank
        for i in range(rank):
            count[i] = _axis_taps(g[rank - 1 - i], p.dims[i], p.mode, p.padding,
                                  p.align_corners, &index[i][0], &weight[i][0])
            pos[i] = 0
        # The tensor product of the taps (last dim fastest), zeros left out.
        taps = 0
        while True:
            off = 0
            w = one
            zero = False
            for i in range(rank):
                j = index[i][pos[i]]
                if j < 0:
                    zero = True
                    break
                off = off + j * p.strides[i]
                w = w * weight[i][pos[i]]
            if not zero:
                offsets[taps] = off
                weights[taps] = w
                taps = taps + 1
            i = rank - 1
            while i >= 0:
                pos[i] = pos[i] + 1
                if pos[i] < count[i]:
                    break
                pos[i] = 0
                i = i - 1
            if i < 0:
                break
        src = p.x + b * p.c * p.plane
        dst = p.y + b * p.c * p.points + q
        for ch in range(p.c):
            acc = 0
            for k in range(taps):
                acc = acc + weights[k] * src[offsets[k]]
            dst[ch * p.points] = acc
            src = src + p.plane


def make_grid_sample_step(size_t x, size_t grid, size_t y, x_dims, Py_ssize_t points,
                          str mode, str padding_mode, bint align_corners, keep=None):
    """The step y = GridSample(x, grid) for x of dims (N, C, *S) (1 to 3 spatial dims, none
    empty), grid (N, points, len(S)) and y (N, C, points); mode nearest / linear / cubic,
    padding_mode zeros / border / reflection."""
    dims = _sizes("x", x_dims, MAX_SPATIAL + 2)
    if len(dims) < 3:
        raise ValueError(f"x has dims {dims}: expected (N, C, and 1 to 3 spatial dims)")
    if mode not in MODES or padding_mode not in PADDINGS:
        raise ValueError(f"mode {mode!r} / padding_mode {padding_mode!r}: expected one of "
                         f"{list(MODES)} / {list(PADDINGS)}")
    n, c, spatial = dims[0], dims[1], dims[2:]
    if points < 0:
        raise ValueError(f"negative point count {points}")
    work = n * c * points
    if work > 0 and (min(spatial) == 0 or x == 0 or grid == 0 or y == 0):
        raise ValueError("x, grid and y must be valid, and x must have pixels to sample")
    cdef Step step = new_step(_grid_sample_step, sizeof(GridSampleArgs),
                              work * (4 ** len(spatial)) >= PARALLEL_MIN, keep)
    cdef GridSampleArgs* args = <GridSampleArgs*>step.args
    cdef Py_ssize_t i, stride = 1
    args.x = <const float*>x
    args.grid = <const float*>grid
    args.y = <float*>y
    args.n = n if work > 0 else 0
    args.c = c
    args.rank = len(spatial)
    args.points = points
    for i in range(len(spatial) - 1, -1, -1):
        args.dims[i] = spatial[i]
        args.strides[i] = stride
        stride *= spatial[i]
    args.plane = stride
    args.mode = MODES[mode]
    args.padding = PADDINGS[padding_mode]
    args.align_corners = align_corners
    return step


# ---------------------------------------------------------------------------------------
# AffineGrid

cdef struct AffineGridArgs:
    const float* theta      # (N, rank, rank + 1)
    float* y                # (N, *dims, rank), coordinates in reverse dim order (x first)
    Py_ssize_t n, rank, points
    Py_ssize_t dims[MAX_SPATIAL]
    bint align_corners


cdef inline double _grid_position(Py_ssize_t i, Py_ssize_t d, bint align) noexcept nogil:
    """Normalised position of pixel i of d: centres span [-1, 1] with align_corners, else
    [-1 + 1/d, 1 - 1/d] (pixel edges at -1 and 1).  One pixel with align_corners sits at -1,
    as in onnx.reference."""
    cdef double step
    if align:
        if d == 1:
            return -1.0
        return -1.0 + i * (2.0 / (d - 1))
    step = 2.0 / d
    return (-1.0 + step / 2.0) + i * step


cdef void _affine_grid_step(const void* a, int tid, int nthreads) noexcept nogil:
    """One (n, output point) per item, in double as onnx.reference."""
    cdef const AffineGridArgs* p = <const AffineGridArgs*>a
    cdef Py_ssize_t begin, end, item, b, q, i, j, rest, rank = p.rank
    cdef double position[MAX_SPATIAL]
    cdef double acc
    cdef const float* theta
    cdef float* out
    ppl_partition(p.n * p.points, tid, nthreads, &begin, &end)
    for item in range(begin, end):
        b = item // p.points
        rest = item - b * p.points
        # position[j]: component j of the grid point, j = 0 for the last dim (x).
        for i in range(rank - 1, -1, -1):
            q = rest % p.dims[i]
            rest = rest // p.dims[i]
            position[rank - 1 - i] = _grid_position(q, p.dims[i], p.align_corners)
        theta = p.theta + b * rank * (rank + 1)
        out = p.y + item * rank
        for j in range(rank):
            acc = theta[j * (rank + 1) + rank]
            for i in range(rank):
                acc = acc + theta[j * (rank + 1) + i] * position[i]
            out[j] = <float>acc


def make_affine_grid_step(size_t theta, size_t y, Py_ssize_t n, dims, bint align_corners,
                          keep=None):
    """The step y = AffineGrid(theta): theta (n, r, r + 1), y (n, *dims, r), r = len(dims)
    in {2, 3}."""
    spatial = _sizes("size", dims, MAX_SPATIAL)
    if len(spatial) not in (2, 3) or n < 0:
        raise ValueError(f"{n} matrices, output dims {spatial}: expected 2 or 3 dims")
    points = _prod(spatial)
    if n * points > 0 and (theta == 0 or y == 0):
        raise ValueError("theta and y must be valid")
    cdef Step step = new_step(_affine_grid_step, sizeof(AffineGridArgs),
                              n * points * 16 >= PARALLEL_MIN, keep)
    cdef AffineGridArgs* args = <AffineGridArgs*>step.args
    cdef Py_ssize_t i
    args.theta = <const float*>theta
    args.y = <float*>y
    args.n = n if points > 0 else 0
    args.rank = len(spatial)
    args.points = points
    for i in range(len(spatial)):
        args.dims[i] = spatial[i]
    args.align_corners = align_corners
    return step


# ---------------------------------------------------------------------------------------
# Col2Im

cdef struct Col2ImArgs:
    const float* x          # (planes, kernel, cols)
    float* y                # (planes, image)
    Py_ssize_t planes, rank, kernel, cols, image
    Py_ssize_t image_dims[MAX_RANK]
    Py_ssize_t image_strides[MAX_RANK]
    Py_ssize_t block[MAX_RANK]
    Py_ssize_t col_dims[MAX_RANK]
    Py_ssize_t strides[MAX_RANK]
    Py_ssize_t dilations[MAX_RANK]
    Py_ssize_t pads[MAX_RANK]     # leading pads


cdef void _col2im_step(const void* a, int tid, int nthreads) noexcept nogil:
    """One (n, c) image per item: zero it, then add every column entry where it lands, one
    row of block positions (the last dim) at a time over the span that lands inside."""
    cdef const Col2ImArgs* p = <const Col2ImArgs*>a
    cdef Py_ssize_t begin, end, item, k, row, rows, i, j, j0, j1, rest, off, coord
    cdef Py_ssize_t rank = p.rank, last = p.rank - 1
    cdef Py_ssize_t width = p.col_dims[last], step = p.strides[last], size = p.image_dims[last]
    cdef Py_ssize_t origin[MAX_RANK]
    cdef Py_ssize_t pos[MAX_RANK]
    cdef bint inside
    cdef const float* src
    cdef float* dst
    cdef float* line
    rows = p.cols // width if width > 0 else 0
    ppl_partition(p.planes, tid, nthreads, &begin, &end)
    for item in range(begin, end):
        dst = p.y + item * p.image
        memset(dst, 0, p.image * sizeof(float))
        for k in range(p.kernel):
            # Where block position k of column block 0 lands.
            rest = k
            for i in range(rank - 1, -1, -1):
                origin[i] = (rest % p.block[i]) * p.dilations[i] - p.pads[i]
                rest = rest // p.block[i]
                pos[i] = 0
            # Block positions j of a row land at origin + j * step: those in [j0, j1) inside.
            j0 = 0 if origin[last] >= 0 else (-origin[last] + step - 1) // step
            j1 = (size - origin[last] + step - 1) // step if size > origin[last] else 0
            if j1 > width:
                j1 = width
            src = p.x + (item * p.kernel + k) * p.cols
            for row in range(rows):
                off = 0
                inside = True
                for i in range(last):
                    coord = origin[i] + pos[i] * p.strides[i]
                    if coord < 0 or coord >= p.image_dims[i]:
                        inside = False
                        break
                    off = off + coord * p.image_strides[i]
                if inside:
                    line = dst + off + origin[last]
                    for j in range(j0, j1):
                        line[j * step] = line[j * step] + src[row * width + j]
                i = last - 1
                while i >= 0:
                    pos[i] = pos[i] + 1
                    if pos[i] < p.col_dims[i]:
                        break
                    pos[i] = 0
                    i = i - 1


def make_col2im_step(size_t x, size_t y, Py_ssize_t planes, image_shape, block_shape,
                     col_dims, strides, dilations, pads, keep=None):
    """The step y = Col2Im(x): x (planes, prod(block_shape), prod(col_dims)), y (planes,
    *image_shape); ``pads`` the leading pad of each dim; col_dims the block count per dim."""
    image = _sizes("image_shape", image_shape, MAX_RANK)
    block = _sizes("block_shape", block_shape, MAX_RANK)
    cols = _sizes("column blocks", col_dims, MAX_RANK)
    rank = len(image)
    if not (len(block) == len(cols) == len(strides) == len(dilations) == len(pads) == rank):
        raise ValueError("image_shape, block_shape, col_dims, strides, dilations and pads "
                         "must have one entry per image dim")
    if rank == 0 or planes < 0 or min(strides) < 1 or min(dilations) < 1:
        raise ValueError(f"rank {rank}, {planes} planes, strides {list(strides)}, dilations "
                         f"{list(dilations)}: expected rank >= 1, positive strides/dilations")
    work = planes * _prod(image)
    if work > 0 and (x == 0 or y == 0):
        raise ValueError("x and y must be valid")
    cdef Step step = new_step(_col2im_step, sizeof(Col2ImArgs),
                              planes * _prod(block) * _prod(cols) >= PARALLEL_MIN, keep)
    cdef Col2ImArgs* args = <Col2ImArgs*>step.args
    cdef Py_ssize_t i, stride = 1
    args.x = <const float*>x
    args.y = <float*>y
    args.planes = planes if work > 0 else 0
    args.rank = rank
    args.kernel = _prod(block)
    args.cols = _prod(cols)
    for i in range(rank - 1, -1, -1):
        args.image_dims[i] = image[i]
        args.image_strides[i] = stride
        stride *= image[i]
        args.block[i] = block[i]
        args.col_dims[i] = cols[i]
        args.strides[i] = strides[i]
        args.dilations[i] = dilations[i]
        args.pads[i] = pads[i]
    args.image = stride
    return step


# ---------------------------------------------------------------------------------------
# DeformConv's first phase: the input sampled at the moved kernel taps, as columns

cdef struct DeformSampleArgs:
    const float* x          # (N, C, *dims)
    const float* offset     # (N, groups * kernel * rank, points)
    const float* mask       # NULL or (N, groups * kernel, points)
    float* cols             # (N, C, kernel, points)
    Py_ssize_t n, c, groups, rank, kernel, points, plane
    Py_ssize_t dims[MAX_SPATIAL]
    Py_ssize_t x_strides[MAX_SPATIAL]
    Py_ssize_t kdims[MAX_SPATIAL]
    Py_ssize_t out_dims[MAX_SPATIAL]
    Py_ssize_t strides[MAX_SPATIAL]
    Py_ssize_t dilations[MAX_SPATIAL]
    Py_ssize_t pads[MAX_SPATIAL]


cdef void _deform_sample_step(const void* a, int tid, int nthreads) noexcept nogil:
    """One (n, offset group, kernel tap) per item: for each output point, the multilinear
    taps of the moved position (zeros outside the input), then every channel of the group."""
    cdef const DeformSampleArgs* p = <const DeformSampleArgs*>a
    cdef Py_ssize_t begin, end, item, b, g, k, q, i, ch, rest, corner, taps, off, j
    cdef Py_ssize_t rank = p.rank, per_group = p.c // p.groups
    cdef Py_ssize_t tap[MAX_SPATIAL]
    cdef Py_ssize_t pos[MAX_SPATIAL]
    cdef Py_ssize_t low[MAX_SPATIAL]
    cdef float frac[MAX_SPATIAL]
    cdef Py_ssize_t offsets[8]
    cdef float weights[8]
    cdef double v
    cdef float w, m, acc, one = 1
    cdef bint outside, nan
    cdef const float* off_row
    cdef const float* mask_row
    cdef const float* src
    cdef float* dst
    ppl_partition(p.n * p.groups * p.kernel, tid, nthreads, &begin, &end)
    for item in range(begin, end):
        b = item // (p.groups * p.kernel)
        rest = item - b * p.groups * p.kernel
        g = rest // p.kernel
        k = rest - g * p.kernel
        rest = k
        for i in range(rank - 1, -1, -1):
            tap[i] = (rest % p.kdims[i]) * p.dilations[i] - p.pads[i]
            rest = rest // p.kdims[i]
            pos[i] = 0
        off_row = p.offset + item * rank * p.points
        mask_row = p.mask + item * p.points if p.mask != NULL else NULL
        src = p.x + (b * p.c + g * per_group) * p.plane
        dst = p.cols + ((b * p.c + g * per_group) * p.kernel + k) * p.points
        for q in range(p.points):
            outside = False
            nan = False
            for i in range(rank):
                v = <double>(tap[i] + pos[i] * p.strides[i]) + off_row[i * p.points + q]
                if isnan(v):
                    nan = True
                elif not (v > -1.0 and v < <double>p.dims[i]):
                    outside = True  # every tap is a zero
                else:
                    low[i] = <Py_ssize_t>floor(v)
                    frac[i] = <float>(v - <double>low[i])
            m = mask_row[q] if mask_row != NULL else one
            taps = 0
            if nan:
                offsets[0] = 0
                weights[0] = NAN
                taps = 1
            elif not outside:
                for corner in range(1 << rank):
                    off = 0
                    w = m
                    for i in range(rank):
                        j = low[i] + ((corner >> (rank - 1 - i)) & 1)
                        if j < 0 or j >= p.dims[i]:
                            w = 0
                            break
                        off = off + j * p.x_strides[i]
                        w = w * (frac[i] if j > low[i] else one - frac[i])
                    if w != 0:
                        offsets[taps] = off
                        weights[taps] = w
                        taps = taps + 1
            for ch in range(per_group):
                acc = 0
                for j in range(taps):
                    acc = acc + weights[j] * src[ch * p.plane + offsets[j]]
                dst[ch * p.kernel * p.points + q] = acc
            i = rank - 1
            while i >= 0:
                pos[i] = pos[i] + 1
                if pos[i] < p.out_dims[i]:
                    break
                pos[i] = 0
                i = i - 1


def make_deform_sample_step(size_t x, size_t offset, size_t mask, size_t cols, x_dims,
                            kernel_shape, out_dims, strides, dilations, pads,
                            Py_ssize_t offset_groups, keep=None):
    """Phase 1 of DeformConv: cols (N, C, prod(kernel_shape), prod(out_dims)) from x (N, C,
    *S), offset (N, offset_groups * prod(kernel_shape) * len(S), *out_dims) and mask (0 for
    none, else (N, offset_groups * prod(kernel_shape), *out_dims)); ``pads`` the leading pad
    of each dim."""
    dims = _sizes("x", x_dims, MAX_SPATIAL + 2)
    kdims = _sizes("kernel_shape", kernel_shape, MAX_SPATIAL)
    odims = _sizes("output", out_dims, MAX_SPATIAL)
    rank = len(dims) - 2
    if rank < 1 or not (len(kdims) == len(odims) == len(strides) == len(dilations)
                        == len(pads) == rank):
        raise ValueError(f"x dims {dims}: expected 1 to 3 spatial dims, and one kernel, "
                         f"output, stride, dilation and pad entry per spatial dim")
    n, c = dims[0], dims[1]
    if offset_groups < 1 or c % offset_groups or min(strides) < 1 or min(dilations) < 1:
        raise ValueError(f"{c} channels, {offset_groups} offset groups, strides "
                         f"{list(strides)}, dilations {list(dilations)}: expected channels "
                         f"divisible by groups, positive strides and dilations")
    kernel, points = _prod(kdims), _prod(odims)
    work = n * c * kernel * points
    if work > 0 and (x == 0 or offset == 0 or cols == 0):
        raise ValueError("x, offset and cols must be valid")
    cdef Step step = new_step(_deform_sample_step, sizeof(DeformSampleArgs),
                              work * (1 << rank) >= PARALLEL_MIN, keep)
    cdef DeformSampleArgs* args = <DeformSampleArgs*>step.args
    cdef Py_ssize_t i, stride = 1
    args.x = <const float*>x
    args.offset = <const float*>offset
    args.mask = <const float*>mask
    args.cols = <float*>cols
    args.n = n if work > 0 else 0
    args.c = c
    args.groups = offset_groups
    args.rank = rank
    args.kernel = kernel
    args.points = points
    for i in range(rank - 1, -1, -1):
        args.dims[i] = dims[2 + i]
        args.x_strides[i] = stride
        stride *= dims[2 + i]
        args.kdims[i] = kdims[i]
        args.out_dims[i] = odims[i]
        args.strides[i] = strides[i]
        args.dilations[i] = dilations[i]
        args.pads[i] = pads[i]
    args.plane = stride
    return step
