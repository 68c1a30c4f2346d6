/* pplpy's compiled-step ABI: what every compiled kernel hands to the run plan.
 *
 * A step is a C function and a pointer to its pre-bound arguments (arena addresses, shapes,
 * packed weights, post-ops), made once per input-shape signature.  A plan is an array of
 * steps that ppl_plan_run executes inside ONE OpenMP parallel region:
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
#if defined(__unix__) || defined(__APPLE__)
#include <sched.h>
#endif
#ifdef __linux__
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#endif
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

#ifdef _OPENMP
/* How often a waiting thread polls with a pause before it sleeps: tens to a hundred
 * microseconds, longer than most steps, so a team that keeps up never sleeps.  A thread that
 * waits longer (on a thread descheduled on a busy machine) sleeps on the step's counter and
 * leaves its core idle, where the scheduler can move the late thread. */
#define PPL_SPINS 4096

/* One step's progress: shares handed out, shares finished and threads asleep waiting for
 * them, on a cache line of its own. */
typedef struct {
    int claimed;
    int done;
    int sleepers;
    char pad[64 - 3 * sizeof(int)];
} ppl_step_sync;

/* Mark one more share of the step (or its serial unit) done and wake the sleepers.
 * Seq-cst on both sides: a waiter counts itself among the sleepers before it sleeps, and its
 * futex wait returns at once if done changed, so no wake is lost. */
static inline void ppl_done(ppl_step_sync *sy) {
    __atomic_fetch_add(&sy->done, 1, __ATOMIC_SEQ_CST);
#ifdef __linux__
    if (__atomic_load_n(&sy->sleepers, __ATOMIC_SEQ_CST))
        syscall(SYS_futex, &sy->done, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
#endif
}

/* Wait until the step's done count reaches target; acquire: what the shares wrote is
 * visible. */
static inline void ppl_wait_done(ppl_step_sync *sy, int target) {
    unsigned spins = 0;
    int seen;
    while ((seen = __atomic_load_n(&sy->done, __ATOMIC_ACQUIRE)) < target) {
        if (spins < PPL_SPINS) {
            ++spins;
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#endif
        } else {
#ifdef __linux__
            struct timespec limit = {0, 1000000}; /* 1 ms: a bound, not a schedule */
            __atomic_fetch_add(&sy->sleepers, 1, __ATOMIC_SEQ_CST);
            syscall(SYS_futex, &sy->done, FUTEX_WAIT_PRIVATE, seen, &limit, NULL, 0);
            __atomic_fetch_sub(&sy->sleepers, 1, __ATOMIC_SEQ_CST);
#elif defined(__unix__) || defined(__APPLE__)
            sched_yield();
#endif
        }
    }
}
#endif

/* Run steps [0, n) on a team of nthreads; returns *error (0 when every step succeeded).
 *
 * There is no team barrier.  A parallel step has nthreads shares (fn(args, k, nthreads), k in
 * [0, nthreads)); each thread claims shares from the step's counter until none is left, then
 * waits until every share is done.  A thread that is late (woken slowly, descheduled on a
 * busy machine) finds the shares taken by the others and only catches up, instead of holding
 * every other thread at a barrier: the team goes as fast as the threads that run.  Share k is
 * run by one thread at a time, so per-share scratch indexed by k stays private.  A run of
 * serial steps is one unit that thread 0 runs (Python steps take the GIL on the caller's
 * thread) while the others wait for it. */
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
        ppl_step_sync *sync = (ppl_step_sync *)calloc((size_t)n, sizeof(ppl_step_sync));
        if (sync == NULL) { /* no memory for the counters: run on this thread */
            for (i = 0; i < n && !*error; i++) steps[i].fn(steps[i].args, 0, 1);
            return *error;
        }
#pragma omp parallel num_threads(nthreads)
        {
            const int tid = omp_get_thread_num();
            const int nt = omp_get_num_threads();
            ptrdiff_t s = 0, e, j;
            int k;
            while (s < n) {
                ppl_step_sync *sy = &sync[s];
                if (steps[s].parallel) {
                    while ((k = __atomic_fetch_add(&sy->claimed, 1, __ATOMIC_RELAXED)) < nt) {
                        steps[s].fn(steps[s].args, k, nt);
                        ppl_done(sy);
                    }
                    ppl_wait_done(sy, nt);
                    e = s + 1;
                } else {
                    for (e = s; e < n && !steps[e].parallel; e++) {
                    }
                    if (tid == 0) {
                        for (j = s; j < e && !*error; j++) steps[j].fn(steps[j].args, 0, 1);
                        ppl_done(sy);
                    } else {
                        ppl_wait_done(sy, 1);
                    }
                }
                /* only serial steps fail, and their error is written before ppl_done: every
                 * thread reads the same value here and stops at the same step */
                if (*error) break;
                s = e;
            }
        }
        free(sync);
    }
#else
    for (i = 0; i < n && !*error; i++) steps[i].fn(steps[i].args, 0, 1);
#endif
    return *error;
}

#endif
