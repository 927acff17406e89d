/*
 * app.c: the program the end-to-end tests trace.
 *
 * It loads the CUDA runtime named by $FAKE_CUDART with dlopen(RTLD_NOW | RTLD_LOCAL),
 * the way Python loads an extension that links libcudart, and runs the scenario named
 * by argv[1]. Its stdout is deterministic (no pids, pointers or times), so a test can
 * compare it with and without the tracer. Exit status: 0 ok, 2 usage, 3 cannot load
 * the runtime, 4 a check failed (details on stderr, prefixed "app:").
 *
 * Scenarios (counts are what the tests expect; keep tests/tests/ in step):
 *   basic       see run_basic() below
 *   threads     4 threads x 25 launches of _Z6workerv, grid (t+1,1,1), block (64,1,1)
 *   fork        3 launches, fork a child that uses no CUDA and exits(0), 2 launches
 *   fork-cuda   fork first; the child makes 2 launches of _Z5childv, the parent,
 *               after the child exited, 3 launches of _Z6parentv
 *   waiters S   `spin S` beside threads that wait the ways a late load must not
 *               disturb: one with every signal blocked in poll(), one in epoll_wait(),
 *               one in a timed condition wait; a SIGSEGV handler installed. At the end
 *               it prints whether the handler and the first thread's mask are intact
 *               and how many EINTRs the waiters saw (none, untraced or not)
 *   exit-now CALL  3 launches of _Z6parentv, then ends through CALL (_exit, _Exit or
 *               quick_exit: no exit handler runs) with status 7
 *   fork-cuda-exit  fork-cuda whose child ends with _exit(5), as a multiprocessing
 *               child does; the parent prints the child's status
 *   spin S      batches of 50 launches of _Z4spinv, 1 ms apart, for S seconds
 *               (S = 0: until killed); no other CUDA call
 *   steady FILE launches of _Z6steadyv, 100 us apart, until killed; after every 10th
 *               it appends "N MONO_NS" to FILE (launches so far, CLOCK_MONOTONIC), so
 *               a test knows what was launched when (stdout stays free of times)
 *   profiler    plays torch.profiler taking CUPTI for a while: see run_profiler()
 *   profiler-early  the same session, started before the first CUDA call (the
 *               program loads libcupti itself first, as a framework linking it would);
 *               see run_profiler()
 *   hang N MODE FILE  N launches of _Z4stepv (grid (1,1,1), block (32,1,1)), one of
 *               _Z5stuckv on stream 1 (grid (7,1,1), block (128,1,1); with
 *               FAKE_CUDA_STUCK=_Z5stuckv it never completes), N more of _Z4stepv; then
 *               prints "hang: launched 2N" and writes "stuck" to FILE, and by MODE:
 *               `sync` waits in cudaDeviceSynchronize (forever when stuck); `handler`
 *               first installs a SIGINT handler of its own that calls exit(42), then
 *               the same; `abort` calls abort() 200 ms later; `segv` writes to an
 *               unmapped address 200 ms later
 *   exec        2 launches of _Z6beforev, then execs itself as `app basic`
 *   retcodes    checks the fake runtime's documented return values and errno
 *   pm WAIT     5 launches of _Z6streamv, a device sync; with WAIT=1 it then waits (at
 *               most 20 s, else exit 4) until the fake CUPTI's PM sampling has decoded
 *               samples or refused, so the tracer's sampler had its turn
 *   nocuda      prints a line, never loads CUDA
 *   idle        loads the runtime and never calls it
 * With APP_LOAD_CUPTI=1 in the environment the app first dlopens the libcupti next to
 * the runtime (RTLD_LOCAL), as a framework that links libcupti would have it loaded.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fake_cuda.h"

static struct {
    cudaError_t (*GetDeviceCount)(int *);
    cudaError_t (*StreamCreate)(cudaStream_t *);
    cudaError_t (*Malloc)(void **, size_t);
    cudaError_t (*Free)(void *);
    cudaError_t (*MallocHost)(void **, size_t);
    cudaError_t (*HostAlloc)(void **, size_t, unsigned int);
    cudaError_t (*FreeHost)(void *);
    cudaError_t (*Memcpy)(void *, const void *, size_t, int);
    cudaError_t (*MemcpyAsync)(void *, const void *, size_t, int, cudaStream_t);
    cudaError_t (*Memset)(void *, int, size_t);
    cudaError_t (*MemsetAsync)(void *, int, size_t, cudaStream_t);
    cudaError_t (*StreamSynchronize)(cudaStream_t);
    cudaError_t (*DeviceSynchronize)(void);
    cudaError_t (*LaunchKernel)(const void *, dim3, dim3, void **, size_t, cudaStream_t);
    cudaError_t (*GraphInstantiate)(void **, const void *, unsigned long long);
    cudaError_t (*GraphUpload)(const void *, cudaStream_t);
    cudaError_t (*GraphLaunch)(const void *, cudaStream_t);
    /* The driver API, called directly (as JAX/XLA and cuBLAS do). */
    int (*cuLaunchKernel)(const void *, unsigned, unsigned, unsigned, unsigned, unsigned,
                          unsigned, unsigned, cudaStream_t, void **, void **);
    int (*cuMemcpyHtoDAsync)(uintptr_t, const void *, size_t, cudaStream_t);
    int (*cuStreamSynchronize)(cudaStream_t);
    uint64_t (*nestedDriverCallbacks)(void); /* the fake's own counter */
} rt;

static int failures;

#define CHECK(cond, ...)                                                                   \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "app: check failed (%s:%d): ", __FILE__, __LINE__);            \
            fprintf(stderr, __VA_ARGS__);                                                  \
            fprintf(stderr, "\n");                                                         \
            failures++;                                                                    \
        }                                                                                  \
    } while (0)

#define OK(call) CHECK((call) == 0, "%s did not return 0", #call)

static void *must_sym(void *h, const char *name) {
    void *p = dlsym(h, name);
    if (!p) {
        fprintf(stderr, "app: %s: %s\n", name, dlerror());
        exit(3);
    }
    return p;
}

static const char *runtime_path(void) {
    const char *path = getenv("FAKE_CUDART");
    if (!path || !*path) {
        fprintf(stderr, "app: FAKE_CUDART is not set\n");
        exit(3);
    }
    return path;
}

/* Loads the libcupti next to the runtime, as a library linking libcupti would get it. */
static void *load_cupti(void) {
    const char *rt_path = runtime_path();
    const char *so = strstr(rt_path, "libcudart.so.");
    if (!so) {
        fprintf(stderr, "app: cannot tell the CUDA version of %s\n", rt_path);
        exit(3);
    }
    char path[4096];
    snprintf(path, sizeof path, "%.*slibcupti.so.%s", (int)(so - rt_path), rt_path,
             so + strlen("libcudart.so."));
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "app: dlopen %s: %s\n", path, dlerror());
        exit(3);
    }
    return h;
}

static void load_runtime(void) {
    const char *path = runtime_path();
    if (getenv("APP_LOAD_CUPTI"))
        (void)load_cupti();
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "app: dlopen %s: %s\n", path, dlerror());
        exit(3);
    }
    *(void **)&rt.GetDeviceCount = must_sym(h, "cudaGetDeviceCount");
    *(void **)&rt.StreamCreate = must_sym(h, "cudaStreamCreate");
    *(void **)&rt.Malloc = must_sym(h, "cudaMalloc");
    *(void **)&rt.Free = must_sym(h, "cudaFree");
    *(void **)&rt.MallocHost = must_sym(h, "cudaMallocHost");
    *(void **)&rt.HostAlloc = must_sym(h, "cudaHostAlloc");
    *(void **)&rt.FreeHost = must_sym(h, "cudaFreeHost");
    *(void **)&rt.Memcpy = must_sym(h, "cudaMemcpy");
    *(void **)&rt.MemcpyAsync = must_sym(h, "cudaMemcpyAsync");
    *(void **)&rt.Memset = must_sym(h, "cudaMemset");
    *(void **)&rt.MemsetAsync = must_sym(h, "cudaMemsetAsync");
    *(void **)&rt.StreamSynchronize = must_sym(h, "cudaStreamSynchronize");
    *(void **)&rt.DeviceSynchronize = must_sym(h, "cudaDeviceSynchronize");
    *(void **)&rt.LaunchKernel = must_sym(h, "cudaLaunchKernel");
    *(void **)&rt.GraphInstantiate = must_sym(h, "cudaGraphInstantiate");
    *(void **)&rt.GraphUpload = must_sym(h, "cudaGraphUpload");
    *(void **)&rt.GraphLaunch = must_sym(h, "cudaGraphLaunch");
    *(void **)&rt.cuLaunchKernel = must_sym(h, "cuLaunchKernel");
    *(void **)&rt.cuMemcpyHtoDAsync = must_sym(h, "cuMemcpyHtoDAsync_v2");
    *(void **)&rt.cuStreamSynchronize = must_sym(h, "cuStreamSynchronize");
    *(void **)&rt.nestedDriverCallbacks = must_sym(h, "fakeNestedDriverCallbacks");
}

/* A launch of the fake kernel `name` (the fake runtime reads the name from `func`). */
static cudaError_t launch(const char *name, dim3 grid, dim3 block, size_t smem, cudaStream_t s) {
    return rt.LaunchKernel(name, grid, block, NULL, smem, s);
}

static const char K_VECADD[] = "_Z6vecAddPKfS0_Pfi";
static const char K_RELU[] = "_Z4reluPfi";

/*
 * basic: known GPU work on the default stream (id 7) and one created stream (id 13).
 *   launches (8): vecAdd x5, grid (64,2,1) block (256,1,1) smem 0 stream 7;
 *                 relu x3, grid (10,1,1) block (128,1,1) smem 1024 stream 13;
 *                 order vecAdd vecAdd relu vecAdd relu vecAdd relu vecAdd
 *   cudaMemcpy, pageable host (4): HtoD 1024, DtoH 2048, HtoD 3000, DtoH 4096
 *   cudaMemcpyAsync, pinned host, stream 13 (3): HtoD 512 (cudaMallocHost memory),
 *                 DtoH 768 (same), HtoD 4096 (cudaHostAlloc memory)
 *   cudaMemset (d_a, 0, 65536); cudaMemsetAsync (d_b, 7, 1234, stream 13)
 *   cudaStreamSynchronize(stream 13); cudaDeviceSynchronize()
 *   cudaMalloc 1 MiB (d_a) and 64 KiB (d_b), freed at the end;
 *   cudaMallocHost 8192, cudaHostAlloc 4096, both freed
 *   untraced calls: cudaGetDeviceCount (corr 1), cudaStreamCreate (corr 2)
 */
static void run_basic(void) {
    int n = 0;
    OK(rt.GetDeviceCount(&n));
    CHECK(n == 1, "device count %d", n);
    cudaStream_t s = NULL;
    OK(rt.StreamCreate(&s));
    void *d_a = NULL, *d_b = NULL, *h_pin = NULL, *h_pin2 = NULL;
    OK(rt.Malloc(&d_a, 1 << 20));
    OK(rt.Malloc(&d_b, 1 << 16));
    OK(rt.MallocHost(&h_pin, 8192));
    OK(rt.HostAlloc(&h_pin2, 4096, 0));
    char *h_page = calloc(1, 16384);

    const dim3 g1 = {64, 2, 1}, b1 = {256, 1, 1}, g2 = {10, 1, 1}, b2 = {128, 1, 1};
    const char *order = "vvrvrvrv";
    for (const char *o = order; *o; o++) {
        if (*o == 'v')
            OK(launch(K_VECADD, g1, b1, 0, NULL));
        else
            OK(launch(K_RELU, g2, b2, 1024, s));
    }

    OK(rt.Memcpy(d_a, h_page, 1024, cudaMemcpyHostToDevice));
    OK(rt.Memcpy(h_page, d_a, 2048, cudaMemcpyDeviceToHost));
    OK(rt.Memcpy(d_b, h_page, 3000, cudaMemcpyHostToDevice));
    OK(rt.Memcpy(h_page, d_b, 4096, cudaMemcpyDeviceToHost));

    OK(rt.MemcpyAsync(d_a, h_pin, 512, cudaMemcpyHostToDevice, s));
    OK(rt.MemcpyAsync(h_pin, d_a, 768, cudaMemcpyDeviceToHost, s));
    OK(rt.MemcpyAsync(d_b, h_pin2, 4096, cudaMemcpyHostToDevice, s));

    OK(rt.Memset(d_a, 0, 65536));
    OK(rt.MemsetAsync(d_b, 7, 1234, s));

    OK(rt.StreamSynchronize(s));
    OK(rt.DeviceSynchronize());

    OK(rt.Free(d_a));
    OK(rt.Free(d_b));
    OK(rt.FreeHost(h_pin));
    OK(rt.FreeHost(h_pin2));
    free(h_page);
    printf("basic: 8 launches, 4 memcpy, 3 memcpyAsync, 2 memset, 2 syncs\n");
}

/*
 * driver: launches through the runtime and through the driver API directly, as a JAX
 * process does (XLA launches with cuLaunchKernel; the runtime makes its own driver call
 * underneath each cudaLaunchKernel, which must not be recorded a second time).
 *   cudaLaunchKernel _Z7runtimev x4, grid (4,1,1) block (64,1,1), default stream
 *   cuLaunchKernel   _Z6driverv  x6, grid (8,2,1) block (128,1,1), stream 13
 *   cuMemcpyHtoDAsync_v2 of 4096 bytes on stream 13; cuStreamSynchronize(stream 13)
 *   cudaDeviceSynchronize()
 * driver 2: the ten launches twice. In between, the app syncs and waits (up to 20 s)
 * until the tracer has switched the driver's launch callbacks on, which it sees as the
 * nested driver callback of a runtime launch reaching a subscriber (GPUTRACE_DRIVER_API
 * auto: on once kernels no runtime call launched are seen); each wait launches one more
 * _Z7runtimev. Last, how many nested driver callbacks reached a subscriber.
 */
static void run_driver(int phases) {
    cudaStream_t s = NULL;
    OK(rt.StreamCreate(&s));
    void *d = NULL, *h = NULL;
    OK(rt.Malloc(&d, 1 << 16));
    OK(rt.MallocHost(&h, 4096));
    const dim3 g = {4, 1, 1}, b = {64, 1, 1};
    int waits = 0;
    for (int p = 0; p < phases; p++) {
        if (p > 0) {
            OK(rt.DeviceSynchronize());
            uint64_t before = rt.nestedDriverCallbacks();
            for (; waits < 2000 && rt.nestedDriverCallbacks() == before; waits++) {
                usleep(10000);
                OK(launch("_Z7runtimev", g, b, 0, NULL));
            }
            CHECK(rt.nestedDriverCallbacks() != before, "driver launch callbacks never on");
        }
        for (int i = 0; i < 10; i++) {
            if (i % 5 == 0 || i % 5 == 3)
                OK(launch("_Z7runtimev", g, b, 0, NULL));
            else
                OK(rt.cuLaunchKernel("_Z6driverv", 8, 2, 1, 128, 1, 1, 0, s, NULL, NULL));
        }
    }
    OK(rt.cuMemcpyHtoDAsync((uintptr_t)d, h, 4096, s));
    OK(rt.cuStreamSynchronize(s));
    OK(rt.DeviceSynchronize());
    OK(rt.FreeHost(h));
    OK(rt.Free(d));
    printf("driver: %d runtime launches, %d driver launches, 1 driver copy, 2 syncs\n",
           4 * phases + waits, 6 * phases);
    printf("nested driver callbacks delivered: %llu\n",
           (unsigned long long)rt.nestedDriverCallbacks());
}

/*
 * launchloop N: N launches of one tiny kernel, timed, for scripts/bench-callbacks.sh
 * (the cost of our CUPTI callbacks on a launch, against the fake's own). Its stdout
 * carries a time, so no test compares it.
 *   one line: "launchloop: N launches, X ns per launch"
 */
static void run_launchloop(long n) {
    const dim3 g = {1, 1, 1}, b = {32, 1, 1};
    for (int i = 0; i < 1000; i++) /* warm-up: rings, name interning */
        OK(launch("_Z4tinyv", g, b, 0, NULL));
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < n; i++)
        OK(launch("_Z4tinyv", g, b, 0, NULL));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    OK(rt.DeviceSynchronize());
    double ns = (double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec);
    printf("launchloop: %ld launches, %.1f ns per launch\n", n, n > 0 ? ns / (double)n : 0.0);
    printf("nested driver callbacks delivered: %llu\n",
           (unsigned long long)rt.nestedDriverCallbacks());
}

static void *worker(void *arg) {
    unsigned t = (unsigned)(uintptr_t)arg;
    const dim3 g = {t + 1, 1, 1}, b = {64, 1, 1};
    for (int i = 0; i < 25; i++)
        OK(launch("_Z6workerv", g, b, 0, NULL));
    return NULL;
}

static void run_threads(void) {
    pthread_t th[4];
    for (uintptr_t t = 0; t < 4; t++)
        pthread_create(&th[t], NULL, worker, (void *)t);
    for (int t = 0; t < 4; t++)
        pthread_join(th[t], NULL);
    OK(rt.DeviceSynchronize());
    printf("threads: 4 x 25 launches\n");
}

static void parent_launches(int n) {
    const dim3 g = {2, 1, 1}, b = {32, 1, 1};
    for (int i = 0; i < n; i++)
        OK(launch("_Z6parentv", g, b, 0, NULL));
    OK(rt.DeviceSynchronize());
}

static int wait_child(pid_t pid) {
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void run_fork(void) {
    parent_launches(3);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        printf("child: no CUDA here\n");
        exit(0); /* runs the atexit handlers the parent registered */
    }
    CHECK(pid > 0, "fork failed");
    printf("parent: child exited with %d\n", wait_child(pid));
    parent_launches(2);
    printf("fork: parent done\n");
}

/* What Python's subprocess does: vfork, then exec in the child, which shares the
 * parent's memory and runs no fork handlers. Tracing must go on in the parent. */
static void run_vfork_exec(void) {
    parent_launches(3);
    fflush(stdout);
    pid_t pid = vfork();
    if (pid == 0) {
        char *const argv[] = {"true", NULL};
        execv("/bin/true", argv); /* through the PLT, as Python's _posixsubprocess does */
        _exit(127);
    }
    CHECK(pid > 0, "vfork failed");
    printf("parent: child exited with %d\n", wait_child(pid));
    parent_launches(2);
    printf("vfork-exec: parent done\n");
}

/* The child makes 2 launches of _Z5childv and ends with exit(0), or, with `exit_now`,
 * with _exit(5) as a multiprocessing child does. */
static void run_fork_cuda(int exit_now) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        const dim3 g = {1, 1, 1}, b = {32, 1, 1};
        for (int i = 0; i < 2; i++)
            OK(launch("_Z5childv", g, b, 0, NULL));
        OK(rt.DeviceSynchronize());
        printf("child: 2 launches\n");
        if (exit_now) {
            fflush(stdout);
            _exit(failures ? 4 : 5);
        }
        exit(failures ? 4 : 0);
    }
    CHECK(pid > 0, "fork failed");
    printf("parent: child exited with %d\n", wait_child(pid));
    parent_launches(3);
    printf("%s: parent done\n", exit_now ? "fork-cuda-exit" : "fork-cuda");
}

static void run_exit_now(const char *call) {
    parent_launches(3);
    printf("exit-now: %s\n", call);
    fflush(stdout);
    if (strcmp(call, "_Exit") == 0)
        _Exit(7);
    if (strcmp(call, "quick_exit") == 0)
        quick_exit(7);
    if (strcmp(call, "exit") == 0)
        exit(7);
    _exit(7);
}

static double seconds_since(const struct timespec *t0) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) / 1e9;
}

static void run_spin(double secs) {
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    const dim3 g = {1, 1, 1}, b = {32, 1, 1};
    printf("spin: started\n");
    fflush(stdout);
    while (secs <= 0 || seconds_since(&t0) < secs) {
        for (int i = 0; i < 50; i++)
            OK(launch("_Z4spinv", g, b, 0, NULL));
        usleep(1000);
    }
    printf("spin: done\n");
}

/* waiters: see the scenario list at the top. */
static volatile int waiters_stop;
static int waiters_eintr;
static sigset_t waiter_mask_seen;
static void on_segv(int sig) { (void)sig; _exit(99); }
static void *waiter_poll(void *arg) {
    (void)arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    while (!waiters_stop) {
        if (poll(NULL, 0, 50) < 0 && errno == EINTR)
            __atomic_add_fetch(&waiters_eintr, 1, __ATOMIC_RELAXED);
    }
    pthread_sigmask(SIG_BLOCK, NULL, &waiter_mask_seen);
    return NULL;
}
static void *waiter_epoll(void *arg) {
    (void)arg;
    int ep = epoll_create1(0);
    struct epoll_event ev;
    while (!waiters_stop) {
        if (epoll_wait(ep, &ev, 1, 50) < 0 && errno == EINTR)
            __atomic_add_fetch(&waiters_eintr, 1, __ATOMIC_RELAXED);
    }
    close(ep);
    return NULL;
}
static void *waiter_cond(void *arg) {
    (void)arg;
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t c = PTHREAD_COND_INITIALIZER;
    pthread_mutex_lock(&m);
    while (!waiters_stop) {
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        t.tv_nsec += 50000000;
        if (t.tv_nsec >= 1000000000) {
            t.tv_sec++;
            t.tv_nsec -= 1000000000;
        }
        int r = pthread_cond_timedwait(&c, &m, &t);
        if (r == EINTR)
            __atomic_add_fetch(&waiters_eintr, 1, __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&m);
    return NULL;
}
static void run_waiters(double secs) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_segv;
    sigaction(SIGSEGV, &sa, NULL);
    pthread_t t[3];
    pthread_create(&t[0], NULL, waiter_poll, NULL);
    pthread_create(&t[1], NULL, waiter_epoll, NULL);
    pthread_create(&t[2], NULL, waiter_cond, NULL);
    run_spin(secs);
    waiters_stop = 1;
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    struct sigaction now;
    sigaction(SIGSEGV, NULL, &now);
    printf("waiters: SIGSEGV handler %s\n", now.sa_handler == on_segv ? "intact" : "CHANGED");
    printf("waiters: blocked mask %s\n", sigismember(&waiter_mask_seen, SIGSEGV) ? "intact" : "CHANGED");
    printf("waiters: %d EINTR\n", waiters_eintr);
}

/* Kernels back to back for `secs` (with FAKE_KERNEL_US, a GPU busy the whole time). */
static void run_busy(double secs) {
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    const dim3 g = {4096, 1, 1}, b = {256, 1, 1};
    unsigned long n = 0;
    while (seconds_since(&t0) < secs) {
        OK(launch("_Z11elementwisev", g, b, 0, NULL));
        n++;
    }
    OK(rt.DeviceSynchronize());
    printf("busy: %s\n", n > 0 ? "done" : "no launch");
}

static void exit_42(int sig) {
    (void)sig;
    exit(42);
}

static void run_hang(int n, const char *mode, const char *path) {
    const dim3 g = {1, 1, 1}, b = {32, 1, 1}, gs = {7, 1, 1}, bs = {128, 1, 1};
    cudaStream_t s1 = NULL;
    OK(rt.StreamCreate(&s1));
    for (int i = 0; i < n; i++)
        OK(launch("_Z4stepv", g, b, 0, NULL));
    OK(launch("_Z5stuckv", gs, bs, 0, s1));
    for (int i = 0; i < n; i++)
        OK(launch("_Z4stepv", g, b, 0, NULL));
    if (strcmp(mode, "handler") == 0)
        signal(SIGINT, exit_42);
    printf("hang: launched %d\n", 2 * n);
    fflush(stdout);
    FILE *f = fopen(path, "w");
    if (f) {
        fputs("stuck\n", f);
        fclose(f);
    }
    if (strcmp(mode, "abort") == 0) {
        usleep(200 * 1000);
        abort();
    }
    if (strcmp(mode, "segv") == 0) {
        usleep(200 * 1000);
        *(volatile int *)(uintptr_t)8 = 1; /* a crash: a write to an unmapped page */
    }
    OK(rt.DeviceSynchronize());
    printf("hang: synchronized\n");
}

static void run_steady(const char *path) {
    FILE *f = fopen(path, "a");
    if (!f) {
        fprintf(stderr, "app: cannot open %s\n", path);
        exit(4);
    }
    const dim3 g = {2, 1, 1}, b = {64, 1, 1};
    printf("steady: started\n");
    fflush(stdout);
    for (unsigned long n = 1;; n++) {
        OK(launch("_Z6steadyv", g, b, 0, NULL));
        if (n % 10 == 0) {
            struct timespec t;
            clock_gettime(CLOCK_MONOTONIC, &t);
            fprintf(f, "%lu %llu\n", n,
                    (unsigned long long)t.tv_sec * 1000000000ull + (unsigned long long)t.tv_nsec);
            fflush(f);
        }
        usleep(100);
    }
}

/* Kernels a job asking for the removed GPUTRACE_PM runs: it must run as without it. */
static void run_pm(void) {
    const dim3 g = {1024, 1, 1}, b = {256, 1, 1};
    for (int i = 0; i < 5; i++)
        OK(launch("_Z6streamv", g, b, 0, NULL));
    OK(rt.DeviceSynchronize());
    printf("pm: 5 launches done\n");
}

static void run_exec(const char *self) {
    const dim3 g = {4, 1, 1}, b = {128, 1, 1};
    for (int i = 0; i < 2; i++)
        OK(launch("_Z6beforev", g, b, 0, NULL));
    OK(rt.DeviceSynchronize());
    printf("exec: 2 launches, now exec basic\n");
    fflush(stdout);
    char *args[] = {(char *)self, "basic", NULL};
    execv(self, args);
    fprintf(stderr, "app: execv %s failed\n", self);
    exit(4);
}

/* ---- profiler: the program's own CUPTI session ---- */
typedef void (*cb_fn)(void *, uint32_t, uint32_t, const void *);
typedef void (*req_fn)(uint8_t **, size_t *, size_t *);
typedef void (*done_fn)(void *, uint32_t, uint8_t *, size_t, size_t);
static struct {
    int (*Subscribe)(void **, cb_fn, void *);
    int (*Unsubscribe)(void *);
    int (*EnableCallback)(uint32_t, void *, uint32_t, uint32_t);
    int (*RegisterCallbacks)(req_fn, done_fn);
    int (*Enable)(uint32_t);
    int (*Disable)(uint32_t);
    int (*FlushAll)(uint32_t);
    int (*GetNextRecord)(uint8_t *, size_t, void **);
} cp;

static pthread_mutex_t prof_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    int kernels, bad_kernels, memcpys, memcpy_bytes, other_records, buffers;
    int enters, exits, bad_callbacks;
    uint32_t kernel_corr[16], exit_corr[16];
} seen;

/* Global lookup first (reaches a preloaded tool's hooks, as a library linking libcupti
 * would), then the libcupti the runtime already loaded. */
static void *cupti_sym(const char *name) {
    void *p = dlsym(RTLD_DEFAULT, name);
    if (p)
        return p;
    void *h = dlopen("libcupti.so.13", RTLD_NOW | RTLD_NOLOAD);
    if (!h)
        h = dlopen("libcupti.so.12", RTLD_NOW | RTLD_NOLOAD);
    if (!h) {
        fprintf(stderr, "app: no libcupti loaded\n");
        exit(3);
    }
    return must_sym(h, name);
}

static void prof_api(void *ud, uint32_t domain, uint32_t cbid, const void *data) {
    const struct fake_callback_data *d = data;
    (void)ud;
    pthread_mutex_lock(&prof_mu);
    if (domain != FAKE_CB_DOMAIN_RUNTIME_API || cbid != CBID_cudaLaunchKernel ||
        strcmp(d->functionName, "cudaLaunchKernel") != 0 || !d->symbolName ||
        strcmp(d->symbolName, "_Z6duringv") != 0)
        seen.bad_callbacks++;
    else if (d->callbackSite == FAKE_API_ENTER)
        seen.enters++;
    else {
        if (seen.exits < 16)
            seen.exit_corr[seen.exits] = d->correlationId;
        seen.exits++;
    }
    pthread_mutex_unlock(&prof_mu);
}

static void prof_request(uint8_t **buf, size_t *size, size_t *max) {
    *size = 64 * 1024;
    *buf = aligned_alloc(8, *size);
    /* Not zeroed (this program never told CUPTI it would zero its buffers): garbage,
     * as a reused buffer would hold. */
    if (*buf)
        memset(*buf, 0xA5, *size);
    *max = 0;
}

static void prof_complete(void *ctx, uint32_t stream, uint8_t *buf, size_t size, size_t valid) {
    (void)ctx;
    (void)stream;
    (void)size;
    pthread_mutex_lock(&prof_mu);
    seen.buffers++;
    void *rec = NULL;
    while (cp.GetNextRecord(buf, valid, &rec) == 0) {
        const uint8_t *r = rec;
        uint32_t kind;
        memcpy(&kind, r, 4);
        if (kind == FAKE_KIND_CONCURRENT_KERNEL) {
            const char *name;
            uint32_t corr;
            memcpy(&name, r + 104, sizeof name);
            memcpy(&corr, r + 92, 4);
            if (name && strcmp(name, "_Z6duringv") == 0) {
                if (seen.kernels < 16)
                    seen.kernel_corr[seen.kernels] = corr;
                seen.kernels++;
            } else {
                seen.bad_kernels++;
            }
        } else if (kind == FAKE_KIND_MEMCPY) {
            uint64_t bytes;
            memcpy(&bytes, r + 8, 8);
            seen.memcpys++;
            seen.memcpy_bytes += (int)bytes;
        } else {
            seen.other_records++;
        }
    }
    pthread_mutex_unlock(&prof_mu);
    free(buf);
}

/*
 * profiler:
 *   phase A: 5 launches of _Z6beforev, cudaDeviceSynchronize (profiler-early: none;
 *     instead the program loads libcupti, and CUDA starts inside phase B)
 *   the program takes CUPTI (kineto's order): cuptiSubscribe, cuptiEnableCallback
 *     (cudaLaunchKernel), cuptiActivityRegisterCallbacks, cuptiActivityEnable
 *     (CONCURRENT_KERNEL, MEMCPY)
 *   phase B: 3 launches of _Z6duringv, one 256-byte cudaMemcpy HtoD, cudaDeviceSynchronize
 *   the program lets go: cuptiActivityDisable (both kinds), cuptiActivityFlushAll(1),
 *     then checks its session saw exactly phase B, then cuptiUnsubscribe
 *   phase C: 4 launches of _Z5afterv, cudaDeviceSynchronize
 */
static void run_profiler(int early) {
    const dim3 g = {4, 1, 1}, b = {128, 1, 1};
    if (early) {
        (void)load_cupti();
    } else {
        for (int i = 0; i < 5; i++)
            OK(launch("_Z6beforev", g, b, 0, NULL));
        OK(rt.DeviceSynchronize());
    }

    *(void **)&cp.Subscribe = cupti_sym("cuptiSubscribe");
    *(void **)&cp.Unsubscribe = cupti_sym("cuptiUnsubscribe");
    *(void **)&cp.EnableCallback = cupti_sym("cuptiEnableCallback");
    *(void **)&cp.RegisterCallbacks = cupti_sym("cuptiActivityRegisterCallbacks");
    *(void **)&cp.Enable = cupti_sym("cuptiActivityEnable");
    *(void **)&cp.Disable = cupti_sym("cuptiActivityDisable");
    *(void **)&cp.FlushAll = cupti_sym("cuptiActivityFlushAll");
    *(void **)&cp.GetNextRecord = cupti_sym("cuptiActivityGetNextRecord");

    void *sub = NULL;
    int rc = cp.Subscribe(&sub, prof_api, NULL);
    CHECK(rc == 0, "cuptiSubscribe returned %d", rc);
    OK(cp.EnableCallback(1, sub, FAKE_CB_DOMAIN_RUNTIME_API, CBID_cudaLaunchKernel));
    OK(cp.RegisterCallbacks(prof_request, prof_complete));
    OK(cp.Enable(FAKE_KIND_CONCURRENT_KERNEL));
    OK(cp.Enable(FAKE_KIND_MEMCPY));

    void *d = NULL;
    char host[256] = {0};
    OK(rt.Malloc(&d, 4096));
    for (int i = 0; i < 3; i++)
        OK(launch("_Z6duringv", g, b, 0, NULL));
    OK(rt.Memcpy(d, host, 256, cudaMemcpyHostToDevice));
    OK(rt.DeviceSynchronize());

    OK(cp.Disable(FAKE_KIND_CONCURRENT_KERNEL));
    OK(cp.Disable(FAKE_KIND_MEMCPY));
    OK(cp.FlushAll(1));

    pthread_mutex_lock(&prof_mu);
    CHECK(seen.kernels == 3, "own session saw %d _Z6duringv kernels", seen.kernels);
    CHECK(seen.bad_kernels == 0, "own session saw %d other kernels", seen.bad_kernels);
    CHECK(seen.memcpys == 1 && seen.memcpy_bytes == 256, "own session saw %d memcpys, %d bytes",
          seen.memcpys, seen.memcpy_bytes);
    CHECK(seen.other_records == 0, "own session saw %d other records", seen.other_records);
    CHECK(seen.enters == 3 && seen.exits == 3, "own callbacks: %d enters, %d exits", seen.enters,
          seen.exits);
    CHECK(seen.bad_callbacks == 0, "own session got %d unexpected callbacks", seen.bad_callbacks);
    for (int i = 0; i < 3 && i < seen.kernels && i < seen.exits; i++)
        CHECK(seen.kernel_corr[i] == seen.exit_corr[i], "kernel %d corr %u, callback corr %u", i,
              seen.kernel_corr[i], seen.exit_corr[i]);
    pthread_mutex_unlock(&prof_mu);
    rc = cp.Unsubscribe(sub);
    CHECK(rc == 0, "cuptiUnsubscribe returned %d", rc);
    printf("profiler: own session saw %d kernels, %d memcpy, %d launch callbacks\n", seen.kernels,
           seen.memcpys, seen.exits);

    for (int i = 0; i < 4; i++)
        OK(launch("_Z5afterv", g, b, 0, NULL));
    OK(rt.DeviceSynchronize());
    OK(rt.Free(d));
    printf("profiler: done\n");
}

/* ---- retcodes: every documented return value and errno, through the tool ---- */
#define EXPECT(call, want_ret, want_errno)                                                 \
    do {                                                                                   \
        int r_ = (call);                                                                   \
        int e_ = errno;                                                                    \
        checks++;                                                                          \
        CHECK(r_ == (want_ret) && e_ == (want_errno), "%s: returned %d errno %d, want %d errno %d", \
              #call, r_, e_, (want_ret), (want_errno));                                    \
    } while (0)

static void run_retcodes(void) {
    int checks = 0, n = 0;
    char host[64] = {0};
    void *d = NULL, *bad = (void *)1;
    const dim3 g = {1, 1, 1}, g0 = {0, 1, 1}, b = {32, 1, 1};

    /* The very first call initialises CUDA (and the tool, through injection). */
    errno = 777;
    EXPECT(rt.GetDeviceCount(&n), 0, 777);
    CHECK(n == 1, "device count %d", n);
    errno = 778;
    EXPECT(rt.Malloc(&d, 64), 0, 778);
    errno = 0;
    EXPECT(rt.Memcpy(d, host, FAKE_BAD_COUNT, cudaMemcpyHostToDevice), 11, 42);
    errno = 0;
    EXPECT(rt.MemcpyAsync(d, host, FAKE_BAD_COUNT, cudaMemcpyHostToDevice, NULL), 11, 42);
    errno = 0;
    EXPECT(rt.Memset(d, 0, FAKE_BAD_COUNT), 1, 43);
    errno = 0;
    EXPECT(rt.MemsetAsync(d, 0, FAKE_BAD_COUNT, NULL), 1, 43);
    errno = 0;
    EXPECT(rt.Malloc(&bad, FAKE_BAD_COUNT), 2, 12);
    CHECK(bad == NULL, "failed cudaMalloc left a pointer");
    errno = 0;
    EXPECT(launch("_Z3badv", g0, b, 0, NULL), 9, 22);
    errno = 0;
    EXPECT(rt.StreamSynchronize((cudaStream_t)(uintptr_t)0xBAD), 400, 44);
    errno = 779;
    EXPECT(launch("_Z4goodv", g, b, 0, NULL), 0, 779);
    errno = 780;
    EXPECT(rt.Memcpy(d, host, 16, cudaMemcpyHostToDevice), 0, 780);
    errno = 781;
    EXPECT(rt.DeviceSynchronize(), 0, 781);
    errno = 782;
    EXPECT(rt.Free(d), 0, 782);
    if (!failures)
        printf("retcodes: all %d checks passed\n", checks);
}

/*
 * graphs N: one graph of 4 nodes (kernel _Z4nodev, graph id 3) instantiated and
 * uploaded once, then replayed N times on stream 13, each replay followed by one eager
 * launch of _Z5eagerv on the same stream; a cudaStreamSynchronize at the end.
 */
static void run_graphs(int n) {
    static const struct fake_graph g = {.id = 3, .nodes = 4, .name = "_Z4nodev", .gap_us = 0};
    const dim3 one = {1, 1, 1}, b = {32, 1, 1};
    cudaStream_t s = NULL;
    void *exec = NULL;
    CHECK(rt.StreamCreate(&s) == 0, "cudaStreamCreate");
    CHECK(rt.GraphInstantiate(&exec, &g, 0) == 0 && exec, "cudaGraphInstantiate");
    CHECK(rt.GraphUpload(exec, s) == 0, "cudaGraphUpload");
    for (int i = 0; i < n; i++) {
        CHECK(rt.GraphLaunch(exec, s) == 0, "cudaGraphLaunch");
        CHECK(launch("_Z5eagerv", one, b, 0, s) == 0, "eager launch");
    }
    CHECK(rt.StreamSynchronize(s) == 0, "cudaStreamSynchronize");
    printf("graphs: %d replays of %u nodes\n", n, g.nodes);
}

/*
 * grow STEP_MB STEPS: a training loop that leaks, as one that keeps every step's loss
 * tensor alive does. First a cache of 4 blocks of 64 MiB (an allocator's cached free
 * blocks). Then up to STEPS steps, each: cudaMalloc(STEP_MB MiB), never freed; kernels
 * _Z7forwardv (grid 64), _Z8backwardv (grid 64), _Z6updatev (grid 8) on the default
 * stream; cudaDeviceSynchronize; 2 ms on the host. When a step's cudaMalloc fails
 * (FAKE_CUDA_MEMORY_LIMIT), the app does what PyTorch's caching allocator does: it frees
 * its cached blocks and asks once more; if that fails too it says so on stderr, as
 * torch.cuda.OutOfMemoryError would, and exits with status 1. Otherwise, after STEPS
 * steps, it frees nothing and exits 0.
 */
static void run_grow(size_t step_mb, int steps) {
    const dim3 g = {64, 1, 1}, small = {8, 1, 1}, b = {256, 1, 1};
    const size_t step = step_mb << 20;
    void *cache[4] = {NULL, NULL, NULL, NULL};
    for (int i = 0; i < 4; i++)
        OK(rt.Malloc(&cache[i], (size_t)64 << 20));
    for (int i = 0; i < steps; i++) {
        void *p = NULL;
        if (rt.Malloc(&p, step) != 0) {
            for (int j = 0; j < 4; j++)
                OK(rt.Free(cache[j]));
            if (rt.Malloc(&p, step) != 0) {
                fprintf(stderr,
                        "grow: CUDA out of memory at step %d: tried to allocate %zu MiB\n",
                        i + 1, step_mb);
                fflush(stdout);
                exit(1);
            }
        }
        OK(launch("_Z7forwardv", g, b, 0, NULL));
        OK(launch("_Z8backwardv", g, b, 0, NULL));
        OK(launch("_Z6updatev", small, b, 0, NULL));
        OK(rt.DeviceSynchronize());
        usleep(2000);
    }
    printf("grow: %d steps of %zu MiB\n", steps, step_mb);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: app SCENARIO [ARGS]\n");
        return 2;
    }
    const char *s = argv[1];
    if (strcmp(s, "nocuda") == 0) {
        printf("nocuda: hello from a process without CUDA\n");
        return 0;
    }
    load_runtime();
    if (strcmp(s, "idle") == 0)
        printf("idle: runtime loaded, never called\n");
    else if (strcmp(s, "basic") == 0)
        run_basic();
    else if (strcmp(s, "launchloop") == 0)
        run_launchloop(argc > 2 ? atol(argv[2]) : 100000);
    else if (strcmp(s, "driver") == 0)
        run_driver(argc > 2 ? atoi(argv[2]) : 1);
    else if (strcmp(s, "threads") == 0)
        run_threads();
    else if (strcmp(s, "fork") == 0)
        run_fork();
    else if (strcmp(s, "vfork-exec") == 0)
        run_vfork_exec();
    else if (strcmp(s, "fork-cuda") == 0)
        run_fork_cuda(0);
    else if (strcmp(s, "fork-cuda-exit") == 0)
        run_fork_cuda(1);
    else if (strcmp(s, "exit-now") == 0 && argc > 2)
        run_exit_now(argv[2]);
    else if (strcmp(s, "spin") == 0)
        run_spin(argc > 2 ? atof(argv[2]) : 0);
    else if (strcmp(s, "waiters") == 0)
        run_waiters(argc > 2 ? atof(argv[2]) : 0);
    else if (strcmp(s, "busy") == 0)
        run_busy(argc > 2 ? atof(argv[2]) : 0.5);
    else if (strcmp(s, "steady") == 0 && argc > 2)
        run_steady(argv[2]);
    else if (strcmp(s, "hang") == 0 && argc > 4)
        run_hang(atoi(argv[2]), argv[3], argv[4]);
    else if (strcmp(s, "profiler") == 0)
        run_profiler(0);
    else if (strcmp(s, "profiler-early") == 0)
        run_profiler(1);
    else if (strcmp(s, "exec") == 0)
        run_exec(argv[0]);
    else if (strcmp(s, "retcodes") == 0)
        run_retcodes();
    else if (strcmp(s, "pm") == 0)
        run_pm();
    else if (strcmp(s, "graphs") == 0)
        run_graphs(argc > 2 ? atoi(argv[2]) : 5);
    else if (strcmp(s, "grow") == 0 && argc > 3)
        run_grow((size_t)atol(argv[2]), atoi(argv[3]));
    else {
        fprintf(stderr, "app: unknown scenario %s\n", s);
        return 2;
    }
    fflush(stdout);
    return failures ? 4 : 0;
}
