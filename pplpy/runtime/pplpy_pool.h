/* pplpy's thread team: persistent worker threads that run a plan with the calling thread.
 *
 * Why not an OpenMP parallel region per run: a region ends with a barrier, so the caller
 * waits for every thread of the team, including one that has not even woken up yet.  On a
 * virtual machine a worker whose vCPU went idle between two runs can take a host scheduler
 * tick (4 ms measured on our 2-vCPU guests) to run again; a 7 ms network then took 8-20 ms at
 * two threads.  Here the caller (thread 0) never waits for a worker that has not started:
 *
 *   publish   the caller copies the plan's steps into a job slot, opens it and bumps the
 *             pool's generation, waking sleeping workers
 *   run       the caller and every worker that has entered the slot claim shares of each
 *             parallel step from the step's counter (pplpy_step.h's rules); the caller runs
 *             the serial units; a worker that arrives late finds the shares taken and only
 *             catches up
 *   close     once the last step is done the caller closes the slot and returns; a worker
 *             still walking the finished steps reads only the slot, which the pool owns
 *
 * Two slots alternate, so the next run never waits for a straggler of the previous one (a
 * slot is reused two runs later, after the workers inside it have left).  A run starts
 * only when the pool is free: a second caller at the same moment (a Python step that runs
 * another plan on the same pool) runs its plan on its own thread instead.
 *
 * Waiting: a worker spins with a pause for PPL_WAIT_SPIN_NS in a run and PPL_IDLE_SPIN_NS
 * between runs, then sleeps on a futex (Linux; a short nanosleep elsewhere), so an idle
 * runtime leaves its cores idle.  After fork() the pool notices the new process and starts
 * new workers.
 *
 * Binding (ppl_pool_bind): each worker may run on one CPU only.  Unbound, a worker woken
 * after an idle spell was often queued on the caller's own CPU while the other stayed idle
 * (perf sched on our 2-vCPU guests: the two threads took turns on one CPU for the whole
 * run), so in about half the processes two threads ran SqueezeNet slower than one (7-10 ms
 * against 5.7; bound: 3.4-3.5 ms in every process).  Workers are bound along an order that
 * the creator gives (pplpy/common/cpu_topology.py: one CPU of every physical core before
 * any core's second hyper-thread), with each CPU's core, so a team no larger than the
 * cores gets one core per thread.  The caller is never bound: it is the user's thread.  The
 * scheduler does not reliably move it off a bound worker's CPU either, so as each run starts
 * a worker on the caller's current CPU or core moves to a free one (ppl_pool_avoid_caller).
 */
#ifndef PPLPY_POOL_H
#define PPLPY_POOL_H

#include "pplpy_step.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

#ifndef CPU_SETSIZE /* no per-thread affinity (PPL_CAN_BIND below): only the pure helpers */
#define CPU_SETSIZE 1024
#endif

#define PPL_WAIT_SPIN_NS 1000000LL /* in a run: longer than most steps and serial units */
#define PPL_IDLE_SPIN_NS 1000000LL /* between runs: a service calling back to back stays hot */
/* Bounds on one sleep (a wake ends it sooner; the bound only guards against a lost wake) */
#define PPL_WAIT_SLEEP_NS 1000000LL
#define PPL_IDLE_SLEEP_NS 100000000LL
#if defined(__linux__) && defined(_GNU_SOURCE) /* Python.h defines it on Linux */
#define PPL_CAN_BIND 1
#endif
#define PPL_SLOT_OPEN (1ULL << 31)
#define PPL_SLOT_COUNT 0x7fffffffULL

static inline long long ppl_now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static inline void ppl_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Sleep while *word == expected, for at most bound_ns (a wake ends it sooner). */
static inline void ppl_sleep_on(int *word, int expected, long long bound_ns) {
#ifdef __linux__
    struct timespec limit = {(time_t)(bound_ns / 1000000000LL), (long)(bound_ns % 1000000000LL)};
    syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, expected, &limit, NULL, 0);
#else
    struct timespec nap = {0, 50000};
    (void)word;
    (void)expected;
    (void)bound_ns;
    nanosleep(&nap, NULL);
#endif
}

static inline void ppl_wake_all(int *word) {
#ifdef __linux__
    syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
#else
    (void)word;
#endif
}

/* Wait until *word != value: spin for spin_ns, then sleep counted in *sleepers (seq-cst on
 * both sides with the waker, which changes *word and then wakes if it sees a sleeper), each
 * sleep bounded by sleep_ns. */
static inline int ppl_wait_change(int *word, int value, int *sleepers, long long spin_ns,
                                  long long sleep_ns) {
    long long until = -1;
    unsigned spins = 0;
    int seen;
    while ((seen = __atomic_load_n(word, __ATOMIC_ACQUIRE)) == value) {
        if ((++spins & 63) != 0) {
            ppl_pause();
            continue;
        }
        if (until < 0) until = ppl_now_ns() + spin_ns;
        if (ppl_now_ns() < until) continue;
        __atomic_fetch_add(sleepers, 1, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(word, __ATOMIC_SEQ_CST) == value) ppl_sleep_on(word, value, sleep_ns);
        __atomic_fetch_sub(sleepers, 1, __ATOMIC_SEQ_CST);
    }
    return seen;
}

/* One step's progress: shares handed out, shares finished and threads asleep waiting for
 * them, on a cache line of its own. */
typedef struct {
    int claimed;
    int done;
    int sleepers;
    char pad[64 - 3 * sizeof(int)];
} ppl_step_sync;

/* Mark one more share of the step (or its serial unit) done and wake the sleepers. */
static inline void ppl_done(ppl_step_sync *sy) {
    __atomic_fetch_add(&sy->done, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&sy->sleepers, __ATOMIC_SEQ_CST)) ppl_wake_all(&sy->done);
}

/* Wait until the step's done count reaches target; acquire: what the shares wrote is
 * visible. */
static inline void ppl_wait_done(ppl_step_sync *sy, int target) {
    int seen = __atomic_load_n(&sy->done, __ATOMIC_ACQUIRE);
    while (seen < target)
        seen = ppl_wait_change(&sy->done, seen, &sy->sleepers, PPL_WAIT_SPIN_NS,
                               PPL_WAIT_SLEEP_NS);
}

/* A published run: the pool's own copy of the steps and their progress counters. */
typedef struct {
    uint64_t state; /* generation << 32 | PPL_SLOT_OPEN | workers inside */
    ppl_plan_step *steps;
    ppl_step_sync *sync;
    ptrdiff_t n, capacity;
    uint64_t plan_id; /* the plan whose steps are in `steps` (0: none) */
    int nthreads;
    int error; /* set by the caller after a failed serial unit; every thread stops there */
    long long *trace; /* NULL, or where each share of each parallel step is recorded
                         (ppl_trace_share; the profiler's, Plan.run_profiled) */
} ppl_job_slot;

/* What a traced run records per share k of parallel step s, at (s * nthreads + k) *
 * PPL_TRACE_FIELDS: when the share started and ended (CLOCK_MONOTONIC ns), the CPU it ran
 * on and the thread (Linux tid) that ran it.  A share a thread runs for another that came
 * late starts late: the profiler tells idle workers from uneven shares by these. */
#define PPL_TRACE_FIELDS 4

static inline void ppl_trace_share(long long *at, long long start) {
    at[0] = start;
    at[1] = ppl_now_ns();
#ifdef __linux__
    at[2] = sched_getcpu();
    at[3] = (long long)syscall(SYS_gettid);
#else
    at[2] = at[3] = -1;
#endif
}

typedef struct {
    int generation; /* futex word: bumped when a run is published */
    int idle_sleepers;
    int shutdown;
    int nworkers;
    int bind;       /* 1: bind each worker to one CPU (ppl_pool_bind) */
    int *cpu;       /* the CPU worker i is bound to, or -1 */
    int *order;     /* the CPUs to bind along, as the creator gave them (NULL: numeric) */
    int *order_core; /* order_core[k]: the physical core of order[k] */
    int norder;
    int *cpus;      /* the order's CPUs still in the process's set when the workers were */
    int *core_of;   /* bound (NULL: unbound); core_of[c]: CPU c's core, -1 outside cpus */
    int ncpus;
    pid_t pid; /* the process the workers were started in */
    pthread_mutex_t run_lock;
    pthread_t *threads;
    ppl_job_slot slots[2];
} ppl_pool;

/* Run the steps of a slot on this thread until the last one is done (tid 0: the caller). */
static inline void ppl_slot_run(ppl_job_slot *slot, int tid, volatile int *caller_error) {
    const ppl_plan_step *steps = slot->steps;
    const ptrdiff_t n = slot->n;
    const int nt = slot->nthreads;
    ptrdiff_t s = 0, e, j;
    int k;
    while (s < n) {
        ppl_step_sync *sy = &slot->sync[s];
        if (steps[s].parallel) {
            while ((k = __atomic_fetch_add(&sy->claimed, 1, __ATOMIC_RELAXED)) < nt) {
                if (slot->trace != NULL) {
                    const long long start = ppl_now_ns();
                    steps[s].fn(steps[s].args, k, nt);
                    ppl_trace_share(slot->trace + ((size_t)s * nt + k) * PPL_TRACE_FIELDS, start);
                } else {
                    steps[s].fn(steps[s].args, k, nt);
                }
                ppl_done(sy);
            }
            ppl_wait_done(sy, nt);
            e = s + 1;
        } else {
            for (e = s; e < n && !steps[e].parallel; e++) {
            }
            if (tid == 0) {
                for (j = s; j < e && !*caller_error; j++) steps[j].fn(steps[j].args, 0, 1);
                if (*caller_error) slot->error = 1; /* written before ppl_done publishes it */
                ppl_done(sy);
            } else {
                ppl_wait_done(sy, 1);
            }
        }
        /* only serial units fail: every thread reads the same value here */
        if (slot->error) break;
        s = e;
    }
}

static void *ppl_worker_main(void *arg) {
    ppl_pool *pool = (ppl_pool *)arg;
    int seen = 0; /* the generation ppl_pool_start set: a run or a shutdown published before
                     this thread got here is seen as a change */
    for (;;) {
        ppl_job_slot *slot;
        uint64_t st;
        uint32_t g;
        seen = ppl_wait_change(&pool->generation, seen, &pool->idle_sleepers, PPL_IDLE_SPIN_NS,
                               PPL_IDLE_SLEEP_NS);
        if (__atomic_load_n(&pool->shutdown, __ATOMIC_ACQUIRE)) break;
        g = (uint32_t)seen;
        slot = &pool->slots[g & 1];
        st = __atomic_load_n(&slot->state, __ATOMIC_ACQUIRE);
        for (;;) { /* enter the run of generation g if it is still open */
            if ((uint32_t)(st >> 32) != g || !(st & PPL_SLOT_OPEN)) break;
            if (__atomic_compare_exchange_n(&slot->state, &st, st + 1, 0, __ATOMIC_ACQ_REL,
                                            __ATOMIC_ACQUIRE)) {
                static const int no_error = 0;
                ppl_slot_run(slot, 1, (volatile int *)&no_error);
                __atomic_fetch_sub(&slot->state, 1, __ATOMIC_RELEASE);
                break;
            }
        }
    }
    return NULL;
}

/* Where the next pool's workers start in the list of allowed CPUs: successive pools
 * rotate, so that several runtimes' workers spread over the machine. */
static unsigned ppl_bind_rotation = 0;

/* Bind worker i to the (1 + rotation + i)-th CPU of the bind order (modulo its length;
 * index 0 is left to the caller when one pool runs alone).  The order is the creator's
 * (pool->order) less any CPU the process may no longer use, or else the process's CPU set
 * in numeric order with each CPU its own core.  Nothing is bound when the team is larger
 * than that list (binding would stack threads that could spread) or where the system has no
 * per-thread affinity; pool->cpu[i] says what each worker got. */
static inline void ppl_pool_bind(ppl_pool *pool) {
    int i;
    for (i = 0; i < pool->nworkers; i++) pool->cpu[i] = -1;
    free(pool->cpus);
    free(pool->core_of);
    pool->cpus = NULL;
    pool->core_of = NULL;
    pool->ncpus = 0;
#ifdef PPL_CAN_BIND
    {
        int cpus[CPU_SETSIZE]; /* 4 KB: pools may be made on several threads at once */
        int cores[CPU_SETSIZE];
        cpu_set_t allowed, one, taken;
        int count = 0, c, k;
        unsigned base;
        if (!pool->bind || sched_getaffinity(0, sizeof allowed, &allowed) != 0) return;
        if (pool->norder > 0) {
            CPU_ZERO(&taken); /* a CPU the order names twice is taken once */
            for (k = 0; k < pool->norder; k++) {
                c = pool->order[k];
                if (c < 0 || c >= CPU_SETSIZE || !CPU_ISSET(c, &allowed) || CPU_ISSET(c, &taken))
                    continue;
                CPU_SET(c, &taken);
                cpus[count] = c;
                cores[count++] = pool->order_core[k];
            }
        } else {
            for (c = 0; c < CPU_SETSIZE; c++)
                if (CPU_ISSET(c, &allowed)) {
                    cpus[count] = c;
                    cores[count++] = c;
                }
        }
        if (pool->nworkers + 1 > count) return;
        pool->cpus = (int *)malloc((size_t)count * sizeof(int));
        pool->core_of = (int *)malloc(CPU_SETSIZE * sizeof(int));
        if (pool->cpus == NULL || pool->core_of == NULL) { /* no memory: leave them free */
            free(pool->cpus);
            free(pool->core_of);
            pool->cpus = pool->core_of = NULL;
            return;
        }
        memcpy(pool->cpus, cpus, (size_t)count * sizeof(int));
        for (c = 0; c < CPU_SETSIZE; c++) pool->core_of[c] = -1;
        for (k = 0; k < count; k++) pool->core_of[cpus[k]] = cores[k];
        pool->ncpus = count;
        base = __atomic_fetch_add(&ppl_bind_rotation, (unsigned)pool->nworkers, __ATOMIC_RELAXED);
        for (i = 0; i < pool->nworkers; i++) {
            c = cpus[(1 + base + (unsigned)i) % (unsigned)count];
            CPU_ZERO(&one);
            CPU_SET(c, &one);
            if (pthread_setaffinity_np(pool->threads[i], sizeof one, &one) == 0) pool->cpu[i] = c;
        }
    }
#endif
}

/* Where worker `w` should move to when the caller runs on CPU `here` (a CPU of `cpus`, or
 * one outside them): the first CPU of the list on a core that neither the caller nor any
 * other worker uses; failing that, if w is on `here` itself, the first CPU no thread is on;
 * -1 to stay.  core_of maps a CPU to its core (-1 outside the list); wcpu[i] is worker i's
 * CPU (-1: unbound).  A pure function of its arguments, so tests can give it any topology. */
static inline int ppl_pool_move_target(const int *cpus, const int *core_of, int ncpus,
                                       const int *wcpu, int nworkers, int w, int here) {
    int here_core = here >= 0 && here < CPU_SETSIZE ? core_of[here] : -1;
    int k, j, c, taken;
    for (k = 0; k < ncpus; k++) { /* a free core */
        c = cpus[k];
        taken = c == here || (here_core >= 0 && core_of[c] == here_core);
        for (j = 0; j < nworkers && !taken; j++)
            taken = j != w && wcpu[j] >= 0 && core_of[wcpu[j]] == core_of[c];
        if (!taken) return c;
    }
    if (wcpu[w] != here) return -1; /* a sibling of the caller's CPU, and no core is free */
    for (k = 0; k < ncpus; k++) { /* a free CPU */
        c = cpus[k];
        taken = c == here;
        for (j = 0; j < nworkers && !taken; j++) taken = j != w && wcpu[j] == c;
        if (!taken) return c;
    }
    return -1;
}

/* As a run starts: a bound worker on the caller's current CPU would be queued behind the
 * caller for the whole run (the scheduler did not always move the free caller off it: in a
 * benchmark process where every other pool's worker landed on the caller's CPU, SqueezeNet at
 * two threads took 7.6 ms against 5.6 at one), and one on a hyper-thread of the caller's core
 * shares its FMA units; that worker moves (ppl_pool_move_target).  One sched_getcpu() and a
 * look at each worker's core when nothing moves. */
static inline void ppl_pool_avoid_caller(ppl_pool *pool) {
#ifdef PPL_CAN_BIND
    cpu_set_t one;
    int here, here_core, w, c;
    if (pool->ncpus == 0) return;
    here = sched_getcpu();
    if (here < 0 || here >= CPU_SETSIZE) return;
    here_core = pool->core_of[here];
    for (w = 0; w < pool->nworkers; w++) {
        c = pool->cpu[w];
        if (c == here || (here_core >= 0 && c >= 0 && pool->core_of[c] == here_core)) break;
    }
    if (w == pool->nworkers) return;
    c = ppl_pool_move_target(pool->cpus, pool->core_of, pool->ncpus, pool->cpu, pool->nworkers,
                             w, here);
    if (c < 0) return;
    CPU_ZERO(&one);
    CPU_SET(c, &one);
    if (pthread_setaffinity_np(pool->threads[w], sizeof one, &one) == 0) pool->cpu[w] = c;
#else
    (void)pool;
#endif
}

/* Start the workers (in a new pool, or again in a forked child, where they do not exist). */
static inline void ppl_pool_start(ppl_pool *pool) {
    sigset_t all, old;
    int i;
    pool->generation = 0;
    pool->idle_sleepers = 0;
    pool->shutdown = 0;
    pool->slots[0].state = pool->slots[1].state = 0;
    pool->pid = getpid();
    pthread_mutex_init(&pool->run_lock, NULL);
    /* workers block every signal: Python handles them on its own threads */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    for (i = 0; i < pool->nworkers; i++) {
        if (pthread_create(&pool->threads[i], NULL, ppl_worker_main, pool) != 0) break;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pool->nworkers = i; /* fewer threads than asked for still run every plan correctly */
    ppl_pool_bind(pool);
}

/* A pool of nthreads - 1 workers (the caller is the team's thread 0), each bound to a CPU
 * if bind, along order[0..norder) whose physical cores are order_core (norder 0: the
 * process's CPU set in numeric order); NULL if out of memory. */
static inline ppl_pool *ppl_pool_create(int nthreads, int bind, const int *order,
                                        const int *order_core, int norder) {
    ppl_pool *pool = (ppl_pool *)calloc(1, sizeof(ppl_pool));
    size_t order_bytes = (size_t)(norder > 0 ? norder : 1) * sizeof(int);
    if (pool == NULL) return NULL;
    pool->nworkers = nthreads > 1 ? nthreads - 1 : 0;
    pool->bind = bind;
    pool->threads = (pthread_t *)calloc((size_t)(pool->nworkers + 1), sizeof(pthread_t));
    pool->cpu = (int *)calloc((size_t)(pool->nworkers + 1), sizeof(int));
    pool->order = (int *)malloc(order_bytes);
    pool->order_core = (int *)malloc(order_bytes);
    if (pool->threads == NULL || pool->cpu == NULL || pool->order == NULL ||
        pool->order_core == NULL) {
        free(pool->threads);
        free(pool->cpu);
        free(pool->order);
        free(pool->order_core);
        free(pool);
        return NULL;
    }
    if (norder > 0) {
        memcpy(pool->order, order, (size_t)norder * sizeof(int));
        memcpy(pool->order_core, order_core, (size_t)norder * sizeof(int));
        pool->norder = norder;
    }
    ppl_pool_start(pool);
    return pool;
}

static inline void ppl_pool_destroy(ppl_pool *pool) {
    int i;
    if (pool == NULL) return;
    if (pool->pid == getpid()) { /* a forked child has no workers to join */
        __atomic_store_n(&pool->shutdown, 1, __ATOMIC_SEQ_CST);
        __atomic_fetch_add(&pool->generation, 1, __ATOMIC_SEQ_CST);
        ppl_wake_all(&pool->generation);
        for (i = 0; i < pool->nworkers; i++) pthread_join(pool->threads[i], NULL);
    }
    for (i = 0; i < 2; i++) {
        free(pool->slots[i].steps);
        free(pool->slots[i].sync);
    }
    free(pool->threads);
    free(pool->cpu);
    free(pool->order);
    free(pool->order_core);
    free(pool->cpus);
    free(pool->core_of);
    free(pool);
}

static inline int ppl_run_here(const ppl_plan_step *steps, ptrdiff_t n, volatile int *error) {
    ptrdiff_t i;
    for (i = 0; i < n && !*error; i++) steps[i].fn(steps[i].args, 0, 1);
    return *error;
}

/* Wake workers asleep after an idle spell, ahead of a run: from a futex sleep a worker took
 * about 100 us to start (`pplnn --enable-profiling` at 2 threads: the first step of each run
 * began its second share that late, so the caller ran both), which the caller spends
 * checking and copying its inputs instead.  A new generation with no run in it: each worker
 * wakes, finds no open slot and spins for PPL_IDLE_SPIN_NS, where the run then finds it.
 * Only while nothing runs on the pool (its lock; a run in progress keeps its generation) and
 * only when some worker sleeps.  Returns 1 when it woke them. */
static inline int ppl_pool_prewake(ppl_pool *pool) {
    if (pool == NULL || pool->nworkers == 0 || pool->pid != getpid()) return 0;
    if (!__atomic_load_n(&pool->idle_sleepers, __ATOMIC_SEQ_CST)) return 0;
    if (pthread_mutex_trylock(&pool->run_lock) != 0) return 0;
    __atomic_fetch_add(&pool->generation, 1, __ATOMIC_SEQ_CST);
    ppl_wake_all(&pool->generation);
    pthread_mutex_unlock(&pool->run_lock);
    return 1;
}

/* Run steps [0, n) of plan `plan_id` (a number no other plan has; 0: copy the steps again)
 * on the pool with nthreads shares per parallel step; returns *error (0: every step
 * succeeded).  trace: NULL, or n * nthreads * PPL_TRACE_FIELDS values where each share run
 * on the pool is recorded (ppl_trace_share; left as they are for a run on the caller alone). */
static inline int ppl_pool_run(ppl_pool *pool, uint64_t plan_id, const ppl_plan_step *steps,
                               ptrdiff_t n, int nthreads, volatile int *error,
                               long long *trace) {
    ppl_job_slot *slot;
    uint32_t g;
    int any_parallel = 0;
    ptrdiff_t i;
    *error = 0;
    for (i = 0; i < n; i++) any_parallel |= steps[i].parallel;
    if (pool == NULL || pool->nworkers == 0 || nthreads <= 1 || !any_parallel)
        return ppl_run_here(steps, n, error);
    if (pool->pid != getpid()) ppl_pool_start(pool); /* forked: the workers stayed behind */
    if (pthread_mutex_trylock(&pool->run_lock) != 0) return ppl_run_here(steps, n, error);
    ppl_pool_avoid_caller(pool);

    g = (uint32_t)pool->generation + 1;
    slot = &pool->slots[g & 1];
    /* workers still inside this slot's previous run (two runs ago) are finishing its walk */
    while (__atomic_load_n(&slot->state, __ATOMIC_ACQUIRE) & PPL_SLOT_COUNT) sched_yield();
    if (slot->capacity < n) {
        ppl_plan_step *st = (ppl_plan_step *)malloc((size_t)n * sizeof(ppl_plan_step));
        ppl_step_sync *sy = (ppl_step_sync *)malloc((size_t)n * sizeof(ppl_step_sync));
        if (st == NULL || sy == NULL) { /* no memory for the run's counters: run here */
            free(st);
            free(sy);
            pthread_mutex_unlock(&pool->run_lock);
            return ppl_run_here(steps, n, error);
        }
        free(slot->steps);
        free(slot->sync);
        slot->steps = st;
        slot->sync = sy;
        slot->capacity = n;
        slot->plan_id = 0;
    }
    if (plan_id == 0 || slot->plan_id != plan_id || slot->n != n) {
        memcpy(slot->steps, steps, (size_t)n * sizeof(ppl_plan_step));
        slot->plan_id = plan_id;
    }
    memset(slot->sync, 0, (size_t)n * sizeof(ppl_step_sync));
    slot->n = n;
    slot->nthreads = nthreads;
    slot->error = 0;
    slot->trace = trace;
    __atomic_store_n(&slot->state, ((uint64_t)g << 32) | PPL_SLOT_OPEN, __ATOMIC_RELEASE);
    __atomic_store_n(&pool->generation, (int)g, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&pool->idle_sleepers, __ATOMIC_SEQ_CST)) ppl_wake_all(&pool->generation);

    ppl_slot_run(slot, 0, error);

    __atomic_fetch_and(&slot->state, ~PPL_SLOT_OPEN, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&pool->run_lock);
    return *error;
}

#endif
