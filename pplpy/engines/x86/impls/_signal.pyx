# Discrete Fourier transforms along one axis, for DFT and STFT (float32 / float64 tensors,
# computed in double).
#
#     make_dft_step(...) -> Step
#
# The tensor is seen as lines: line (o, j), o < n_outer, j < n_inner, starts at element
# o * in_outer + j * in_inner of x and reads its samples every in_step elements; its result
# starts at o * out_outer + j * out_inner of y, one value every out_step elements.  A DFT
# along an axis is lines (before-axis, after-axis); an STFT is lines (batch, frame) whose
# frames overlap in x.  Each sample is 1 value (real) or 2 (real, imaginary).
#
# A line is loaded into a complex buffer z of the transform length n (zero-padded or cut,
# times the window if any), transformed (radix-2 FFT when n is a power of two, otherwise the
# direct O(n^2) sum, with twiddles e^(-2 pi i j / n) computed once, in double, by the
# caller), scaled by 1/n for an inverse, and the first n_out values stored.  An inverse
# one-sided transform (IRFFT) first rebuilds the Hermitian spectrum from its first n/2 + 1
# values, ignoring the imaginary parts of the DC and Nyquist bins as numpy.fft.irfft does,
# and stores real parts only.
#
# Lines are split between threads; each thread has its own two buffers of n complex values.

from libc.stdint cimport int64_t

import numpy as np

from pplpy.runtime.step cimport Step, new_step, ppl_partition
from pplpy.runtime.step import run_steps

include "_onnx_types.pxi"

cdef enum:
    # Below this many complex multiply-adds a step is serial: a fork and join cost more.
    PARALLEL_WORK = 65536

MODES = {"forward": 0, "inverse": 1, "irfft": 2}

ctypedef fused real_t:
    float
    double


cdef struct DftArgs:
    const char *x
    char *y
    const char *window       # n_read values of x's type, or NULL
    const double *tw         # n complex twiddles e^(-2 pi i j / n)
    double *scratch          # per thread: 4 n doubles
    int is_double
    int mode
    int in_complex
    int out_complex
    int pow2
    Py_ssize_t n
    Py_ssize_t n_read
    Py_ssize_t n_out
    Py_ssize_t n_outer
    Py_ssize_t n_inner
    Py_ssize_t in_outer
    Py_ssize_t in_inner
    Py_ssize_t in_step
    Py_ssize_t out_outer
    Py_ssize_t out_inner
    Py_ssize_t out_step


cdef double _log2(Py_ssize_t n):
    cdef double r = 1.0
    while n > 2:
        n >>= 1
        r += 1.0
    return r


cdef void _fft(double *z, const double *tw, Py_ssize_t n, double conj) noexcept nogil:
    """In-place radix-2 FFT of n (a power of two) interleaved complex values; conj = 1 for
    the forward transform (twiddles e^(-i...)), -1 for the inverse (their conjugates)."""
    cdef Py_ssize_t i, j = 0, bit, half, size, start, k, stride
    cdef double tr, ti, wr, wi, ur, ui, vr, vi
    for i in range(1, n):          # bit-reversal permutation
        bit = n >> 1
        while j & bit:
            j ^= bit
            bit >>= 1
        j |= bit
        if i < j:
            tr = z[2 * i]
            ti = z[2 * i + 1]
            z[2 * i] = z[2 * j]
            z[2 * i + 1] = z[2 * j + 1]
            z[2 * j] = tr
            z[2 * j + 1] = ti
    size = 2
    while size <= n:
        half = size >> 1
        stride = n // size
        start = 0
        while start < n:
            for k in range(half):
                wr = tw[2 * k * stride]
                wi = conj * tw[2 * k * stride + 1]
                ur = z[2 * (start + k)]
                ui = z[2 * (start + k) + 1]
                vr = z[2 * (start + k + half)] * wr - z[2 * (start + k + half) + 1] * wi
                vi = z[2 * (start + k + half)] * wi + z[2 * (start + k + half) + 1] * wr
                z[2 * (start + k)] = ur + vr
                z[2 * (start + k) + 1] = ui + vi
                z[2 * (start + k + half)] = ur - vr
                z[2 * (start + k + half) + 1] = ui - vi
            start += size
        size <<= 1


cdef void _direct(const double *z, double *w, const double *tw, Py_ssize_t n,
                  Py_ssize_t n_out, double conj) noexcept nogil:
    """w[k] = sum_t z[t] e^(-+2 pi i k t / n) for k < n_out (conj as in _fft), the twiddle
    index k t mod n kept by addition (no overflow, no division)."""
    cdef Py_ssize_t k, t, idx
    cdef double sr, si, wr, wi
    for k in range(n_out):
        sr = 0.0
        si = 0.0
        idx = 0
        for t in range(n):
            wr = tw[2 * idx]
            wi = conj * tw[2 * idx + 1]
            sr = sr + z[2 * t] * wr - z[2 * t + 1] * wi
            si = si + z[2 * t] * wi + z[2 * t + 1] * wr
            idx = idx + k
            if idx >= n:
                idx = idx - n
        w[2 * k] = sr
        w[2 * k + 1] = si


cdef void _line(const DftArgs *a, const real_t *x, real_t *y, const real_t *window,
                double *z, double *w, Py_ssize_t o, Py_ssize_t j) noexcept nogil:
    cdef Py_ssize_t n = a.n, t, k, half
    cdef const real_t *src = x + o * a.in_outer + j * a.in_inner
    cdef real_t *dst = y + o * a.out_outer + j * a.out_inner
    cdef double re, im, scale, conj = -1.0 if a.mode != 0 else 1.0
    cdef double *res
    for t in range(2 * n):
        z[t] = 0.0
    for t in range(a.n_read):
        re = src[t * a.in_step]
        im = src[t * a.in_step + 1] if a.in_complex else 0.0
        if window != NULL:
            re = re * window[t]
            im = im * window[t]
        z[2 * t] = re
        z[2 * t + 1] = im
    if a.mode == 2:               # IRFFT: the Hermitian spectrum of the first n/2 + 1 bins
        z[1] = 0.0
        half = n // 2
        if n % 2 == 0:
            z[2 * half + 1] = 0.0
        for k in range(1, (n + 1) // 2):
            z[2 * (n - k)] = z[2 * k]
            z[2 * (n - k) + 1] = -z[2 * k + 1]
    if a.pow2:
        _fft(z, a.tw, n, conj)
        res = z
    else:
        _direct(z, w, a.tw, n, a.n_out, conj)
        res = w
    scale = 1.0 / n if a.mode != 0 else 1.0
    for k in range(a.n_out):
        dst[k * a.out_step] = <real_t>(res[2 * k] * scale)
        if a.out_complex:
            dst[k * a.out_step + 1] = <real_t>(res[2 * k + 1] * scale)


cdef void _dft_step(const void *p, int tid, int nthreads) noexcept nogil:
    cdef const DftArgs *a = <const DftArgs *>p
    cdef Py_ssize_t b, e, line, o, j
    cdef double *z = a.scratch + tid * 4 * a.n
    cdef double *w = z + 2 * a.n
    ppl_partition(a.n_outer * a.n_inner, tid, nthreads, &b, &e)
    for line in range(b, e):
        o = line // a.n_inner
        j = line - o * a.n_inner
        if a.is_double:
            _line(a, <const double *>a.x, <double *>a.y, <const double *>a.window, z, w, o, j)
        else:
            _line(a, <const float *>a.x, <float *>a.y, <const float *>a.window, z, w, o, j)


def twiddles(Py_ssize_t n):
    """e^(-2 pi i j / n), j < n, as interleaved float64 (real, imaginary)."""
    angle = -2.0 * np.pi * np.arange(n, dtype=np.float64) / n
    out = np.empty(2 * n, np.float64)
    out[0::2] = np.cos(angle)
    out[1::2] = np.sin(angle)
    return out


def make_dft_step(size_t y, size_t x, int elem_type, str mode, Py_ssize_t n,
                  Py_ssize_t n_read, Py_ssize_t n_out, bint in_complex, bint out_complex,
                  Py_ssize_t n_outer, Py_ssize_t n_inner, Py_ssize_t in_outer,
                  Py_ssize_t in_inner, Py_ssize_t in_step, Py_ssize_t out_outer,
                  Py_ssize_t out_inner, Py_ssize_t out_step, size_t window=0,
                  int num_threads=1, keep=None):
    """Step: transform every line (see the top of this file) of length-``n`` DFTs; ``mode``
    is "forward", "inverse" or "irfft"; ``n_read`` samples are read per line (the rest of
    the n are zeros), ``n_out`` results written; offsets and steps count elements of x's
    type (float32 or float64), ``window`` is the address of n_read values or 0."""
    if elem_type not in (T_FLOAT, T_DOUBLE):
        raise ValueError(f"DFT needs float32 or float64, got ONNX type {elem_type}")
    if mode not in MODES:
        raise ValueError(f"mode {mode!r}: expected one of {sorted(MODES)}")
    if n < 1 or not 0 <= n_read <= n or not 0 <= n_out <= n:
        raise ValueError(f"need 1 <= n and 0 <= n_read, n_out <= n; got n={n}, "
                         f"n_read={n_read}, n_out={n_out}")
    if mode == "irfft" and out_complex:
        raise ValueError("irfft writes real values (out_complex must be False)")
    if n_outer < 0 or n_inner < 0 or num_threads < 1:
        raise ValueError(f"bad line counts {n_outer} x {n_inner} or threads {num_threads}")
    tw = twiddles(n)
    scratch = np.zeros(num_threads * 4 * n, np.float64)
    cdef double[::1] tv = tw
    cdef double[::1] sv = scratch
    cdef bint pow2 = (n & (n - 1)) == 0
    cdef Py_ssize_t lines = n_outer * n_inner
    cdef double work = <double>lines * n * (_log2(n) if pow2 else n_out)
    cdef Step step = new_step(_dft_step, sizeof(DftArgs), work > PARALLEL_WORK,
                              (tw, scratch, keep))
    cdef DftArgs *a = <DftArgs *>step.args
    a.x = <const char *>x
    a.y = <char *>y
    a.window = <const char *>window
    a.tw = &tv[0]
    a.scratch = &sv[0]
    a.is_double = elem_type == T_DOUBLE
    a.mode = MODES[mode]
    a.in_complex = in_complex
    a.out_complex = out_complex
    a.pow2 = pow2
    a.n = n
    a.n_read = n_read
    a.n_out = n_out
    a.n_outer = n_outer
    a.n_inner = n_inner
    a.in_outer = in_outer
    a.in_inner = in_inner
    a.in_step = in_step
    a.out_outer = out_outer
    a.out_inner = out_inner
    a.out_step = out_step
    return step


def dft(x, int n, str mode, bint out_complex, y, int num_threads=1):
    """Test wrapper: y[b, k, c] = the transform of each line x[b, :, c'] (x of shape
    (lines, length, 1 or 2), C-contiguous; y (lines, n_out, 1 or 2))."""
    lines, length, cin = x.shape
    n_out = y.shape[1]
    n_read = min(length, n // 2 + 1 if mode == "irfft" else n)
    code = T_DOUBLE if x.dtype == np.float64 else T_FLOAT
    step = make_dft_step(y.ctypes.data, x.ctypes.data, code, mode, n, n_read, n_out,
                         cin == 2, out_complex, lines, 1, length * cin, 0, cin,
                         n_out * y.shape[2], 0, y.shape[2], 0, num_threads, (x, y))
    run_steps([step], num_threads)
