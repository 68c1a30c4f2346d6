# The compiled-step ABI for Cython: cimport this to turn a kernel into a step of the run plan.
#
#     from pplpy.runtime.step cimport Step, new_step, ppl_partition
#
#     cdef struct ReluArgs:
#         const float *x
#         float *y
#         Py_ssize_t n
#
#     cdef void relu_step(const void *a, int tid, int nthreads) noexcept nogil:
#         cdef const ReluArgs *args = <const ReluArgs *>a
#         cdef Py_ssize_t b, e, i
#         ppl_partition(args.n, tid, nthreads, &b, &e)
#         for i in range(b, e): ...
#
# (A kernel whose threads may not run alike hands its items out as the step runs instead:
# a ppl_item_queue in its args and ``while ppl_next_items(...)``; see pplpy_step.h.)
#
#     def make_relu_step(size_t x, size_t y, Py_ssize_t n):
#         cdef Step step = new_step(relu_step, sizeof(ReluArgs), n > 65536)
#         cdef ReluArgs *args = <ReluArgs *>step.args
#         ...
#         return step
#
# See pplpy/runtime/pplpy_step.h for the rules a step function follows.

cdef extern from "pplpy_step.h" nogil:
    ctypedef void (*ppl_step_fn)(const void *args, int tid, int nthreads) noexcept nogil
    ctypedef struct ppl_plan_step:
        ppl_step_fn fn
        const void *args
        int parallel
    void ppl_partition(Py_ssize_t n, int tid, int nthreads, Py_ssize_t *begin, Py_ssize_t *end)
    enum: PPL_MIN_ITEMS_PER_THREAD  # work items per thread a kernel aims at where it can
    ctypedef struct ppl_item_queue:  # items handed out as the step runs (in its args)
        pass
    Py_ssize_t ppl_claim_size(Py_ssize_t n, int nthreads)
    Py_ssize_t ppl_claim_now(Py_ssize_t left, Py_ssize_t chunk, int nthreads)
    int ppl_next_items(ppl_item_queue *q, Py_ssize_t n, Py_ssize_t chunk, int tid,
                       int nthreads, int *calls, Py_ssize_t *begin, Py_ssize_t *end)
    ctypedef struct ppl_fault:  # bad data met at run time (in its args; see set_fault)
        int hit
        long long value
    void ppl_fault_record(ppl_fault *f, long long value)


cdef class Step:
    cdef ppl_step_fn fn
    cdef void *args            # the function's arguments
    cdef bint owns_args        # args came from new_step and are freed with the step
    cdef readonly bint parallel
    cdef public str label      # shown by the profiler and --dump-graph
    cdef public Py_ssize_t work_items  # independent work items a parallel step is cut into,
                                       # shown by the profiler (0: not reported)
    cdef public object keep    # Python objects whose memory the args point into
    cdef Py_ssize_t fault_offset  # where its ppl_fault lies in args (-1: it has none)
    cdef public str fault_message  # the error's text; "{value}" is the recorded value


cdef Step new_step(ppl_step_fn fn, size_t args_size, bint parallel, object keep=*)
cdef int set_fault(Step step, ppl_fault *fault, str message) except -1
