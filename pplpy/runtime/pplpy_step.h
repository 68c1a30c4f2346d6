/* pplpy's compiled-step ABI: what every compiled kernel hands to the run plan.
 *
 * A step is a C function and a pointer to its pre-bound arguments (arena addresses, shapes,
 * packed weights, post-ops), made once per input-shape signature.  A plan is an array of
 * steps that ppl_plan_run executes inside ONE OpenMP parallel region:
 *
 *   parallel step  every thread of the team calls fn(args, tid, nthreads) and takes its share
 *                  of the work (ppl_partition); a barrier follows
 *   serial step    thread 0 alone calls fn(args, 0, 1); a run of consecutive serial steps
 *                  costs one barrier in all, so a chain of small ops never forks or joins
 *
 * Step functions must not fail: shapes and arguments are checked when the step is made.  The
 * one exception is a Python step (a plugin kernel written in Python), which takes the GIL,
 * may raise, and then sets *error so that every thread stops after the next barrier.
 *
 * Plugins compile against it through pplpy.build (get_include(), extension()).
 */
#ifndef PPLPY_STEP_H
#define PPLPY_STEP_H

#include <stddef.h>
#ifdef _OPENMP
#include <omp.h>
#endif

typedef void (*ppl_step_fn)(const void *args, int tid, int nthreads);

typedef struct {
    ppl_step_fn fn;
    const void *args;
    int parallel; /* 1: every thread calls fn; 0: thread 0 only */
} ppl_plan_step;

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

/* Run steps [0, n) on a team of nthreads; returns *error (0 when every step succeeded). */
static inline int ppl_plan_run(const ppl_plan_step *steps, ptrdiff_t n, int nthreads,
                               volatile int *error) {
    int any_parallel = 0;
    ptrdiff_t i;
    *error = 0;
    for (i = 0; i < n; i++) any_parallel |= steps[i].parallel;
    if (nthreads <= 1 || !any_parallel) {
        for (i = 0; i < n && !*error; i++) steps[i].fn(steps[i].args, 0, 1);
        return *error;
    }
#ifdef _OPENMP
    {
        /* Thread 0 publishes "stop" just before each barrier, into one of two slots taken in
         * turn: a slot is written again only two barriers later, after every thread has read
         * it, so no thread can see a stop that the others miss. */
        volatile int stop[2] = {0, 0};
#pragma omp parallel num_threads(nthreads)
        {
            const int tid = omp_get_thread_num();
            const int nt = omp_get_num_threads();
            ptrdiff_t s = 0, e;
            unsigned k = 0;
            while (s < n) {
                if (steps[s].parallel) {
                    steps[s].fn(steps[s].args, tid, nt);
                    s++;
                } else {
                    for (e = s; e < n && !steps[e].parallel; e++) {
                    }
                    if (tid == 0)
                        for (; s < e && !*error; s++) steps[s].fn(steps[s].args, 0, 1);
                    s = e;
                }
                if (tid == 0) stop[k & 1] = *error;
#pragma omp barrier
                if (stop[k & 1]) break;
                k++;
            }
        }
    }
#else
    for (i = 0; i < n && !*error; i++) steps[i].fn(steps[i].args, 0, 1);
#endif
    return *error;
}

#endif
