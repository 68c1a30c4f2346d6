/* pplpy's compiled-step ABI: what every compiled kernel hands to the run plan.
 *
 * A step is a C function and a pointer to its pre-bound arguments (arena addresses, shapes,
 * packed weights, post-ops), made once per input-shape signature.  A plan is an array of
 * steps that the run plan executes on one team of threads (pplpy_pool.h):
 *
 *   parallel step  fn(args, k, nthreads) is called once for each share k in [0, nthreads),
 *                  by whichever thread of the team claims it; share k's work is its fixed
 *                  run ppl_partition(n, k, nthreads), or the items it claims as the step runs
 *                  (ppl_next_items); per-share scratch indexed by k stays private, as
 *                  one thread at a time runs share k; the next step starts once every
 *                  share is done
 *   serial step    thread 0 alone calls fn(args, 0, 1); a run of consecutive serial steps
 *                  is one unit the other threads wait for, so a chain of small ops never
 *                  forks or joins
 *
 * Step functions must not fail: shapes and arguments are checked when the step is made.  The
 * one exception is a Python step (a plugin kernel written in Python), which takes the GIL,
 * may raise, and then sets *error so that every thread stops after that step.  Data that
 * only the run can check (an index computed at run time) a step meets with a safe result
 * (a zero row, a skipped update) and a ppl_fault record, which the plan's caller turns
 * into an error after the run.
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

/* Items handed out as a step runs, for a kernel whose items cost alike but whose threads may
 * not run alike: a thread that shares its core with another (a hyper-thread sibling the
 * guest does not show, a noisy neighbour on the host) takes as long over a fixed share as
 * two others, and every other thread waits for it at the step's end.  Claimed a few items
 * at a time, the slow thread takes fewer.  Each item is computed as it would be in any
 * share, so the bits stay those of every other thread count.
 *
 * The queue lives in the step's arguments (zeroed by new_step) on cache lines of its own,
 * since the arguments around it are read by every thread in their inner loops.  Every
 * share of a run calls ppl_next_items until it returns 0; the last share to get its 0
 * empties the queue for the next run (the pool's wait on the step's shares orders that
 * before any later claim). */
typedef struct {
    char before[64];
    ptrdiff_t next; /* the first item not claimed yet in this run */
    int finished;   /* shares of this run that have found the queue empty */
    char after[64];
} ppl_item_queue;

/* Claims each share aims at making in a step whose items are handed out as it runs: a
 * thread running at half speed then still takes its part, at the price of a claim (one
 * atomic add on a shared line) every quarter share. */
#define PPL_CLAIMS_PER_THREAD 4

/* Items per claim for n items on a team of nthreads (at least 1). */
static inline ptrdiff_t ppl_claim_size(ptrdiff_t n, int nthreads) {
    ptrdiff_t per = n / ((ptrdiff_t)PPL_CLAIMS_PER_THREAD * (nthreads > 1 ? nthreads : 1));
    return per > 1 ? per : 1;
}

/* Items a claim takes when `left` are left: chunk, or fewer as they run out (at most half of
 * an even split of what is left, as OpenMP's "guided" schedule: a slow thread's last claim
 * is then small, not a quarter share the others wait for); at least 1. */
static inline ptrdiff_t ppl_claim_now(ptrdiff_t left, ptrdiff_t chunk, int nthreads) {
    ptrdiff_t fair = (left + 2 * (ptrdiff_t)nthreads - 1) / (2 * (ptrdiff_t)nthreads);
    if (fair < chunk) chunk = fair;
    return chunk > 1 ? chunk : 1;
}

/* The next run of items [*begin, *end) of n for share tid of nthreads; *calls starts at 0
 * in each share.  chunk > 0 (and a team): the next items no share has claimed
 * (ppl_claim_now of them); else the share's fixed ppl_partition run, once.  Returns 0 when
 * the share has no more. */
static inline int ppl_next_items(ppl_item_queue *q, ptrdiff_t n, ptrdiff_t chunk, int tid,
                                 int nthreads, int *calls, ptrdiff_t *begin, ptrdiff_t *end) {
    ptrdiff_t b;
    if (chunk <= 0 || nthreads <= 1) {
        if ((*calls)++ > 0) return 0;
        ppl_partition(n, tid, nthreads, begin, end);
        return *begin < *end;
    }
    ++*calls;
    chunk = ppl_claim_now(n - __atomic_load_n(&q->next, __ATOMIC_RELAXED), chunk, nthreads);
    b = __atomic_fetch_add(&q->next, chunk, __ATOMIC_RELAXED);
    if (b < n) {
        *begin = b;
        *end = b + chunk < n ? b + chunk : n;
        return 1;
    }
    if (__atomic_add_fetch(&q->finished, 1, __ATOMIC_ACQ_REL) == nthreads) {
        __atomic_store_n(&q->next, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&q->finished, 0, __ATOMIC_RELAXED);
    }
    return 0;
}

/* A step's record of bad data met at run time: a ppl_fault in its args, registered when the
 * step is made (set_fault in step.pxd).  The step still never reads or writes outside its
 * tensors; it records the first bad value (any thread's) and goes on, and Plan.run raises a
 * pplpy InputError with it after the run (the outputs are never handed out), clearing the
 * record for the next run. */
typedef struct {
    int hit;
    long long value;
} ppl_fault;

static inline void ppl_fault_record(ppl_fault *f, long long value) {
    if (!__atomic_load_n(&f->hit, __ATOMIC_RELAXED)) {
        __atomic_store_n(&f->value, value, __ATOMIC_RELAXED);
        __atomic_store_n(&f->hit, 1, __ATOMIC_RELAXED);
    }
}

#endif
