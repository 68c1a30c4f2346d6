/* pplpy's compiled-step ABI: what every compiled kernel hands to the run plan.
 *
 * A step is a C function and a pointer to its pre-bound arguments (arena addresses, shapes,
 * packed weights, post-ops), made once per input-shape signature.  A plan is an array of
 * steps that the run plan executes on one team of threads (pplpy_pool.h):
 *
 *   parallel step  fn(args, k, nthreads) is called once for each share k in [0, nthreads),
 *                  by whichever thread of the team claims it (ppl_partition(n, k, nthreads)
 *                  gives share k's work); per-share scratch indexed by k stays private, as
 *                  one thread at a time runs share k; the next step starts once every
 *                  share is done
 *   serial step    thread 0 alone calls fn(args, 0, 1); a run of consecutive serial steps
 *                  is one unit the other threads wait for, so a chain of small ops never
 *                  forks or joins
 *
 * Step functions must not fail: shapes and arguments are checked when the step is made.  The
 * one exception is a Python step (a plugin kernel written in Python), which takes the GIL,
 * may raise, and then sets *error so that every thread stops after that step.
 *
 * Plugins compile against it through pplpy.build (get_include(), extension()).
 */
#ifndef PPLPY_STEP_H
#define PPLPY_STEP_H

#include <stddef.h>
#include <stdlib.h>

typedef void (*ppl_step_fn)(const void *args, int tid, int nthreads);

typedef struct {
    ppl_step_fn fn;
    const void *args;
    int parallel; /* 1: every thread calls fn; 0: thread 0 only */
} ppl_plan_step;

/* Work items per thread of the team that a kernel cuts its output into where the output
 * allows: shares are contiguous runs of items, so with fewer than nthreads items some threads
 * idle, and with one or two per thread the slowest share sets the step's time. */
#define PPL_MIN_ITEMS_PER_THREAD 2

/* The contiguous share [*begin, *end) of n work items that thread tid of nthreads takes. */
static inline void ppl_partition(ptrdiff_t n, int tid, int nthreads, ptrdiff_t *begin,
                                 ptrdiff_t *end) {
    ptrdiff_t base, extra;
    if (nthreads <= 1) {
        *begin = 0;
        *end = n;
        return;
    }
    base = n / nthreads;
    extra = n % nthreads;
    *begin = tid * base + (tid < extra ? tid : extra);
    *end = *begin + base + (tid < extra ? 1 : 0);
}

#endif
