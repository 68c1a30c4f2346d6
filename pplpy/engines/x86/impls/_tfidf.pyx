# TfIdfVectorizer over integer tokens as a compiled step of the run plan.
#
#     y[r, t] = weight(count of the n-grams of row r whose output index is t)
#
# An n-gram of row r is x[r, s], x[r, s + d], ..., x[r, s + (n - 1) d] for a skip distance
# d = 1 .. max_skip + 1 and min_gram <= n <= max_gram; unigrams are counted once, not once
# per distance.  The pool is one table per n-gram length, its n-grams sorted
# lexicographically (rows of n int64), each with its output index: a lookup is a binary
# search.  Modes: TF y = count; IDF y = weight (or 1) where count > 0; TFIDF y = count *
# weight (or count).  Rows split over threads.  Baseline flags: one module for every tier.

from libc.stdint cimport int32_t, int64_t
from libc.string cimport memset

import numpy as np

from pplpy.runtime.step cimport Step, new_step, ppl_partition

include "_onnx_types.pxi"

cdef enum:
    MODE_TF = 1
    MODE_IDF = 2
    MODE_TFIDF = 3
    PARALLEL_WORK = 65536

MODES = {"TF": MODE_TF, "IDF": MODE_IDF, "TFIDF": MODE_TFIDF}

ctypedef fused tok_t:
    int32_t
    int64_t


cdef struct TfIdfArgs:
    const void *x
    float *y
    int xtype, mode
    Py_ssize_t rows, cols, out_size
    Py_ssize_t min_gram, max_gram, max_skip
    const int64_t *grams        # the tables of every length, one after the other
    const int64_t *table_at     # [n]: where length n's table starts in grams (elements)
    const int64_t *table_len    # [n]: how many n-grams it holds
    const int64_t *target_at    # [n]: where its output indices start in target
    const int64_t *target
    const float *weights        # NULL, or out_size values


cdef Py_ssize_t _find(const TfIdfArgs *a, const tok_t *x, Py_ssize_t d,
                      Py_ssize_t n) noexcept nogil:
    """Output index of the n-gram x[0], x[d], ..., x[(n - 1) d], or -1."""
    cdef const int64_t *table = a.grams + a.table_at[n]
    cdef Py_ssize_t lo = 0, hi = a.table_len[n], mid, j
    cdef int64_t v, t
    while lo < hi:
        mid = (lo + hi) // 2
        for j in range(n):
            v = <int64_t>x[j * d]
            t = table[mid * n + j]
            if v != t:
                break
        else:
            return a.target[a.target_at[n] + mid]
        if t < v:
            lo = mid + 1
        else:
            hi = mid
    return -1


cdef void _count_row(const TfIdfArgs *a, const tok_t *x, float *y) noexcept nogil:
    cdef Py_ssize_t d, s, n, first = a.min_gram, t
    memset(y, 0, a.out_size * sizeof(float))
    for d in range(1, a.max_skip + 2):
        for s in range(a.cols):
            if s + d * (first - 1) >= a.cols:
                break
            for n in range(first, a.max_gram + 1):
                if s + d * (n - 1) >= a.cols:
                    break
                t = _find(a, x + s, d, n)
                if t >= 0:
                    y[t] += 1
        if first == 1:  # unigrams do not depend on the distance: count them once
            first = 2
            if first > a.max_gram:
                break


cdef void _weigh_row(const TfIdfArgs *a, float *y) noexcept nogil:
    cdef Py_ssize_t t
    if a.mode == MODE_IDF:
        for t in range(a.out_size):
            if y[t] > 0:
                y[t] = a.weights[t] if a.weights != NULL else 1
    elif a.mode == MODE_TFIDF and a.weights != NULL:
        for t in range(a.out_size):
            y[t] = y[t] * a.weights[t]


cdef void _tfidf_rows(const TfIdfArgs *a, const tok_t *x, Py_ssize_t r0,
                      Py_ssize_t r1) noexcept nogil:
    cdef Py_ssize_t r
    for r in range(r0, r1):
        _count_row(a, x + r * a.cols, a.y + r * a.out_size)
        _weigh_row(a, a.y + r * a.out_size)


cdef void _tfidf_step(const void *p, int tid, int nthreads) noexcept nogil:
    cdef const TfIdfArgs *a = <const TfIdfArgs *>p
    cdef Py_ssize_t r0, r1
    ppl_partition(a.rows, tid, nthreads, &r0, &r1)
    if a.xtype == T_INT32:
        _tfidf_rows(a, <const int32_t *>a.x, r0, r1)
    else:
        _tfidf_rows(a, <const int64_t *>a.x, r0, r1)


def pool_tables(pool, ngram_counts, ngram_indexes, Py_ssize_t min_gram, Py_ssize_t max_gram):
    """(grams, table_at, table_len, target_at, target) of an int64 pool: for each length n in
    [min_gram, max_gram] its n-grams sorted, each with its output index (a repeated n-gram
    keeps the later index, as the reference's map does).  Raises ValueError for a pool its
    counts do not describe."""
    pool = np.asarray(pool if pool is not None else (), np.int64).reshape(-1)
    indexes = np.asarray(ngram_indexes, np.int64).reshape(-1)
    starts = [int(c) for c in ngram_counts] + [pool.size]
    if any(b < a for a, b in zip(starts, starts[1:])) or (starts and starts[0] < 0):
        raise ValueError(f"ngram_counts {list(ngram_counts)} are not ascending offsets into "
                         f"the pool of {pool.size}")
    grams, targets = [], []
    table_at = np.zeros(max_gram + 1, np.int64)
    table_len = np.zeros(max_gram + 1, np.int64)
    target_at = np.zeros(max_gram + 1, np.int64)
    first_id, at, tat = 0, 0, 0
    for n, (begin, end) in enumerate(zip(starts, starts[1:]), start=1):
        count = (end - begin) // n
        if min_gram <= n <= max_gram and count:
            if first_id + count > indexes.size:
                raise ValueError(f"ngram_indexes has {indexes.size} entries, the pool more "
                                 "n-grams")
            rows = pool[begin:begin + count * n].reshape(count, n)
            table = {tuple(row): int(t) for row, t in
                     zip(rows.tolist(), indexes[first_id:first_id + count])}
            keys = sorted(table)
            grams.append(np.asarray(keys, np.int64).reshape(-1))
            targets.append(np.asarray([table[k] for k in keys], np.int64))
            table_at[n], table_len[n], target_at[n] = at, len(keys), tat
            at += len(keys) * n
            tat += len(keys)
        first_id += count
    grams = np.concatenate(grams) if grams else np.zeros(1, np.int64)
    target = np.concatenate(targets) if targets else np.zeros(1, np.int64)
    return grams, table_at, table_len, target_at, target


def make_tfidf_step(xdtype, size_t x, size_t y, Py_ssize_t rows, Py_ssize_t cols,
                    Py_ssize_t out_size, str mode, Py_ssize_t min_gram, Py_ssize_t max_gram,
                    Py_ssize_t max_skip, tables, weights=None, keep=None):
    """Step of TfIdfVectorizer: x (rows, cols) int32 or int64 tokens -> y (rows, out_size)
    float32; ``tables`` from pool_tables, ``weights`` None or out_size float32 values."""
    cdef Step step
    cdef TfIdfArgs *a
    dt = np.dtype(xdtype)
    if dt not in (np.dtype(np.int32), np.dtype(np.int64)):
        raise ValueError(f"TfIdfVectorizer tokens are {dt}: int32 or int64 only")
    if mode not in MODES:
        raise ValueError(f"mode {mode!r}: expected TF, IDF or TFIDF")
    if x == 0 or y == 0 or rows < 0 or cols < 0 or out_size < 1 or min_gram < 1 or \
            max_gram < min_gram or max_skip < 0:
        raise ValueError("tfidf: addresses or sizes")
    grams, table_at, table_len, target_at, target = (np.ascontiguousarray(t, np.int64)
                                                     for t in tables)
    if table_at.size != max_gram + 1 or (target.size and (target.min() < 0 or
                                                          target.max() >= out_size)):
        raise ValueError("tfidf: tables do not match max_gram or out_size")
    if weights is not None:
        weights = np.ascontiguousarray(weights, np.float32)
        if weights.size < out_size:
            raise ValueError(f"{weights.size} weights for {out_size} outputs")
    step = new_step(_tfidf_step, sizeof(TfIdfArgs),
                    rows * cols * (max_skip + 1) * max_gram > PARALLEL_WORK and rows > 1,
                    (keep, grams, table_at, table_len, target_at, target, weights))
    a = <TfIdfArgs *>step.args
    a.x, a.y = <const void *>x, <float *>y
    a.xtype = T_INT32 if dt == np.dtype(np.int32) else T_INT64
    a.mode = MODES[mode]
    a.rows, a.cols, a.out_size = rows, cols, out_size
    a.min_gram, a.max_gram, a.max_skip = min_gram, max_gram, max_skip
    a.grams = <const int64_t *><size_t>grams.ctypes.data
    a.table_at = <const int64_t *><size_t>table_at.ctypes.data
    a.table_len = <const int64_t *><size_t>table_len.ctypes.data
    a.target_at = <const int64_t *><size_t>target_at.ctypes.data
    a.target = <const int64_t *><size_t>target.ctypes.data
    a.weights = <const float *><size_t>weights.ctypes.data if weights is not None else NULL
    step.label = "tfidf"
    return step
