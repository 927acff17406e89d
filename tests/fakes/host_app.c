/*
 * host_app.c: a program whose host side does known things between its CUDA calls, for
 * the host sampler's end-to-end test (tests/tests/host.rs).
 *
 * It loads the fake runtime named by $FAKE_CUDART (dlopen RTLD_LOCAL, as app.c does).
 * Each step launches 3 kernels (_Z5step0v, _Z5step1v, _Z5step2v; the fake runs each inside its launch
 * call, so the GPU is idle between steps), then the main thread spends STEP_MS between
 * steps as the scenario says:
 *   compute S   burns STEP_MS of its own CPU time (measured on the thread's CPU clock, so
 *               a loaded machine stretches the wall time, never the work); no children
 *   sleep S     sleeps STEP_MS; no children
 *   busy S W    sleeps STEP_MS while W forked children ("busy_worker") burn CPU all along
 *   idle S W    sleeps STEP_MS while W forked children ("idle_worker") sleep all along
 *   read S W F  sleeps STEP_MS while W forked children ("read_worker") read file F from
 *               its start, again and again (the page cache serves it: rchar grows)
 *   launcher S  a second thread ("launcher") makes every step's launches, then waits while
 *               the main thread burns STEP_MS and hands it the next step (a runtime that
 *               launches on its own thread while the Python thread dispatches)
 *   helper S    the main thread launches, then waits while a second thread ("crunch")
 *               burns STEP_MS (another thread of the process holds the host)
 *   feed S      the main thread launches, then waits while a second thread ("producer")
 *               sleeps STEP_MS (true starvation, through a thread)
 * S is the number of steps. Children are started before the first step, killed after
 * the last, and reaped. Prints one line; exit status 0, 2 usage, 3 no runtime.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fake_cuda.h"

#define STEP_MS 30
#define MAX_CHILDREN 16

static cudaError_t (*LaunchKernel)(const void *, dim3, dim3, void **, size_t, cudaStream_t);
static cudaError_t (*DeviceSynchronize)(void);

static uint64_t clock_ns(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static volatile uint64_t sink;

/* Burns `ns` of this thread's CPU time. */
static void burn(uint64_t ns) {
    uint64_t end = clock_ns(CLOCK_THREAD_CPUTIME_ID) + ns;
    uint64_t x = 1;
    while (clock_ns(CLOCK_THREAD_CPUTIME_ID) < end) {
        for (int i = 0; i < 10000; i++)
            x = x * 6364136223846793005ull + 1442695040888963407ull;
        sink = x;
    }
}

static void sleep_ns(uint64_t ns) {
    struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

static void child(const char *kind, const char *file) {
    if (strcmp(kind, "busy") == 0) {
        prctl(PR_SET_NAME, "busy_worker");
        for (;;)
            burn(1000000000ull);
    } else if (strcmp(kind, "idle") == 0) {
        prctl(PR_SET_NAME, "idle_worker");
        for (;;)
            pause();
    } else {
        prctl(PR_SET_NAME, "read_worker");
        static char buf[1 << 16];
        int fd = open(file, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            _exit(5);
        for (;;) {
            ssize_t n = pread(fd, buf, sizeof buf, 0);
            if (n <= 0)
                _exit(6);
            off_t off = n;
            while ((n = pread(fd, buf, sizeof buf, off)) > 0)
                off += n;
            sleep_ns(1000000); /* a worker that reads, then hands the sample over */
        }
    }
}

/* Two threads taking turns: `turn` says whose it is (0: the main thread's, 1: the other's). */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int turn, done;

static void wait_turn(int me) {
    pthread_mutex_lock(&mu);
    while (turn != me && !done)
        pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
}

static void give_turn(int to) {
    pthread_mutex_lock(&mu);
    turn = to;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

static int pair_steps;
static const char *pair_mode;

static void launch_step(void) {
    const dim3 g = {4, 1, 1}, b = {128, 1, 1};
    LaunchKernel("_Z5step0v", g, b, NULL, 0, NULL);
    LaunchKernel("_Z5step1v", g, b, NULL, 0, NULL);
    LaunchKernel("_Z5step2v", g, b, NULL, 0, NULL);
}

/* The second thread of the launcher, helper and feed modes. */
static void *other(void *arg) {
    (void)arg;
    int launcher = strcmp(pair_mode, "launcher") == 0;
    prctl(PR_SET_NAME, launcher ? "launcher" : strcmp(pair_mode, "helper") == 0 ? "crunch" : "producer");
    for (int s = 0; s < pair_steps; s++) {
        wait_turn(1);
        if (launcher)
            launch_step();
        else if (strcmp(pair_mode, "helper") == 0)
            burn(STEP_MS * 1000000ull);
        else
            sleep_ns(STEP_MS * 1000000ull);
        give_turn(0);
    }
    return NULL;
}

/* The main thread's side: each step, it computes while the launcher waits, or it
 * launches and waits for the other thread. */
static void pair(const char *mode, int steps) {
    pair_mode = mode;
    pair_steps = steps;
    int launcher = strcmp(mode, "launcher") == 0;
    turn = launcher ? 1 : 0;
    pthread_t t;
    if (pthread_create(&t, NULL, other, NULL) != 0)
        exit(4);
    for (int s = 0; s < steps; s++) {
        if (launcher) {
            wait_turn(0);
            burn(STEP_MS * 1000000ull);
            give_turn(1);
        } else {
            launch_step();
            give_turn(1);
            wait_turn(0);
        }
    }
    pthread_join(t, NULL);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: host_app compute|sleep|busy|idle|read|launcher|helper|feed STEPS [WORKERS [FILE]]\n");
        return 2;
    }
    const char *mode = argv[1];
    int steps = atoi(argv[2]);
    int workers = argc > 3 ? atoi(argv[3]) : 0;
    const char *file = argc > 4 ? argv[4] : "";
    if (workers > MAX_CHILDREN)
        workers = MAX_CHILDREN;
    const char *path = getenv("FAKE_CUDART");
    void *h = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
    if (!h) {
        fprintf(stderr, "host_app: cannot load the runtime\n");
        return 3;
    }
    *(void **)&LaunchKernel = dlsym(h, "cudaLaunchKernel");
    *(void **)&DeviceSynchronize = dlsym(h, "cudaDeviceSynchronize");
    if (!LaunchKernel || !DeviceSynchronize)
        return 3;
    const dim3 g = {4, 1, 1}, b = {128, 1, 1};
    /* CUDA starts (and tracing with it) before any child exists. */
    LaunchKernel("_Z4initv", g, b, NULL, 0, NULL);
    pid_t kids[MAX_CHILDREN];
    int nkids = 0;
    if (strcmp(mode, "busy") == 0 || strcmp(mode, "idle") == 0 || strcmp(mode, "read") == 0) {
        fflush(stdout);
        for (int i = 0; i < workers; i++) {
            pid_t p = fork();
            if (p == 0) {
                child(mode, file);
                _exit(0);
            }
            if (p > 0)
                kids[nkids++] = p;
        }
        sleep_ns(200000000ull); /* let them start before the steps */
    }
    if (strcmp(mode, "launcher") == 0 || strcmp(mode, "helper") == 0 || strcmp(mode, "feed") == 0) {
        pair(mode, steps);
        steps = 0;
    }
    int compute = strcmp(mode, "compute") == 0;
    for (int s = 0; s < steps; s++) {
        LaunchKernel("_Z5step0v", g, b, NULL, 0, NULL);
        LaunchKernel("_Z5step1v", g, b, NULL, 0, NULL);
        LaunchKernel("_Z5step2v", g, b, NULL, 0, NULL);
        if (compute)
            burn(STEP_MS * 1000000ull);
        else
            sleep_ns(STEP_MS * 1000000ull);
    }
    DeviceSynchronize();
    for (int i = 0; i < nkids; i++)
        kill(kids[i], SIGKILL);
    for (int i = 0; i < nkids; i++)
        while (waitpid(kids[i], NULL, 0) < 0 && errno == EINTR)
            ;
    printf("host_app %s: %d steps, %d children\n", mode, pair_steps ? pair_steps : steps, nkids);
    return 0;
}
