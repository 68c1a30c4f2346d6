# TensorScatter (opset 24) as a compiled step: the KV-cache update of decoder models,
#
#     present = past;  present[o, (write_indices[b] + s) (mod M), :] = update[o, s, :]
#
# over the cache viewed as (outer, M, inner): outer = the dims before the sequence axis
# (batch first, b = o // (outer / B)), M = max_sequence_length, inner = the bytes of the
# dims after it.  Data moves by bytes, so every element type is one code path.  One module,
# baseline flags.
#
# A parallel step splits the outer rows: each thread copies its rows of past and writes the
# updates that land in them, so no barrier is needed.  Write indices are read from memory
# when the step runs and never trusted: in linear mode a negative index counts from the end
# (numpy's indexing, as the reference does) and a row that lands outside [0, M) is skipped,
# and the run then raises an InputError naming the index (a ppl_fault, as pplpy_step.h says).

from libc.stdint cimport int64_t, uint8_t
from libc.string cimport memcpy

import numpy as np

from pplpy.runtime.step cimport (Step, new_step, ppl_fault, ppl_fault_record, ppl_partition,
                                 set_fault)
from pplpy.runtime.step import run_steps

cdef enum:
    PARALLEL_BYTES = 262144


cdef struct ScatterArgs:
    const uint8_t *past
    const uint8_t *update
    const int64_t *indices      # NULL: every write starts at 0
    uint8_t *present
    Py_ssize_t outer, per_batch, M, S, inner
    bint circular
    ppl_fault fault             # a linear write index whose rows leave the cache


cdef void _tensor_scatter_step(const void *p, int tid, int nthreads) noexcept nogil:
    cdef const ScatterArgs *a = <const ScatterArgs *>p
    cdef Py_ssize_t o0, o1, o, s, start, row
    cdef uint8_t *dst
    ppl_partition(a.outer, tid, nthreads, &o0, &o1)
    for o in range(o0, o1):
        dst = a.present + o * a.M * a.inner
        if <const uint8_t *>dst != a.past + o * a.M * a.inner:
            memcpy(dst, a.past + o * a.M * a.inner, a.M * a.inner)
        start = a.indices[o // a.per_batch] if a.indices != NULL else 0
        for s in range(a.S):
            row = start + s
            if a.circular:
                row = row % a.M
                if row < 0:
                    row += a.M
            elif row < 0:
                row += a.M
            if row < 0 or row >= a.M:
                ppl_fault_record(<ppl_fault *>&a.fault, start)
                continue
            memcpy(dst + row * a.inner, a.update + (o * a.S + s) * a.inner, a.inner)


def make_tensor_scatter_step(size_t past, size_t update, size_t indices, size_t present,
                             Py_ssize_t batch, Py_ssize_t outer, Py_ssize_t M, Py_ssize_t S,
                             Py_ssize_t inner_bytes, bint circular, keep=None):
    """Step of TensorScatter on a cache of (outer, M, inner_bytes) bytes, outer a multiple of
    ``batch``; update is (outer, S, inner_bytes); indices: 0 or ``batch`` int64 write
    indices.  ``present`` may be ``past`` (an in-place update)."""
    cdef Step step
    cdef ScatterArgs *a
    if min(batch, outer, M, S, inner_bytes) < 0 or (batch and outer % batch):
        raise ValueError(f"tensor scatter dims batch={batch} outer={outer} M={M} S={S} "
                         f"inner={inner_bytes}")
    if S > M and not circular:
        raise ValueError(f"{S} update rows do not fit a linear cache of {M}")
    if outer * M * inner_bytes and (past == 0 or present == 0):
        raise ValueError("past and present must be given")
    if outer * S * inner_bytes and update == 0:
        raise ValueError("update must be given")
    step = new_step(_tensor_scatter_step, sizeof(ScatterArgs),
                    outer > 1 and outer * M * inner_bytes > PARALLEL_BYTES, keep)
    a = <ScatterArgs *>step.args
    a.past, a.update = <const uint8_t *>past, <const uint8_t *>update
    a.indices = <const int64_t *>indices
    a.present = <uint8_t *>present
    a.outer, a.M, a.S, a.inner = outer, M, S, inner_bytes
    a.per_batch = outer // batch if batch else 1
    a.circular = circular
    step.label = "tensor scatter"
    if indices != 0 and not circular:
        set_fault(step, &a.fault, f"write index {{value}} puts rows of the {S}-row update "
                  f"outside the cache of {M} rows (valid: -{M} to {M - S})")
    return step


def tensor_scatter(past, update, write_indices=None, int axis=-2, bint circular=False,
                   int num_threads=1):
    """Test wrapper: present = TensorScatter(past, update, write_indices) on numpy arrays."""
    past = np.ascontiguousarray(past)
    update = np.ascontiguousarray(update, past.dtype)
    axis = axis % past.ndim
    present = past.copy()
    lens = None if write_indices is None else np.ascontiguousarray(write_indices, np.int64)
    outer = int(np.prod(past.shape[:axis]))
    inner = int(np.prod(past.shape[axis + 1:])) * past.itemsize
    step = make_tensor_scatter_step(
        past.ctypes.data, update.ctypes.data, 0 if lens is None else lens.ctypes.data,
        present.ctypes.data, past.shape[0], outer, past.shape[axis], update.shape[axis], inner,
        circular, (past, update, lens, present))
    run_steps([step], num_threads)
    return present
