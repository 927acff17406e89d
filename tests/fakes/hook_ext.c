/*
 * hook_ext.c: a stand-in for a Python extension module (think torch/_C.so): a shared
 * library that links the CUDA runtime and NCCL (DT_NEEDED libcudart.so.13 and
 * libnccl.so.2, found through RPATH $ORIGIN) and carries its own copy of NVTX, as
 * NVTX v3's header-only code gives every library that uses it. hook_app dlopens it
 * RTLD_LOCAL, as Python does, so its libraries stay out of the global scope.
 *
 * ext_run(scenario, ...) makes calls with known arguments and checks that each one
 * returned, and left in errno, exactly what the fake library says it returned; every
 * mismatch is one "MISMATCH" line on stderr. It prints "tid <n>" for the calling thread
 * and returns the number of mismatches. The expected trace of each scenario is spelt
 * out in tests/tests/hooks.rs.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <wchar.h>

#include "hook_fakes.h"

#define EXPORT __attribute__((visibility("default")))

/* ---- The runtime and NCCL, declared as their headers do ---- */
cudaError_t cudaGetDeviceCount(int *);
cudaError_t cudaMemcpy(void *, const void *, size_t, int);
cudaError_t cudaMemcpyAsync(void *, const void *, size_t, int, cudaStream_t);
cudaError_t cudaMemcpy2D(void *, size_t, const void *, size_t, size_t, size_t, int);
cudaError_t cudaMemcpy2DAsync(void *, size_t, const void *, size_t, size_t, size_t, int,
                              cudaStream_t);
cudaError_t cudaMemcpyPeer(void *, int, const void *, int, size_t);
cudaError_t cudaMemcpyPeerAsync(void *, int, const void *, int, size_t, cudaStream_t);
cudaError_t cudaMemset(void *, int, size_t);
cudaError_t cudaMemsetAsync(void *, int, size_t, cudaStream_t);
cudaError_t cudaStreamSynchronize(cudaStream_t);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaEventSynchronize(cudaEvent_t);
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned int);
cudaError_t __cudaLaunchKernel(const void *, dim3, dim3, void **, size_t, cudaStream_t);
cudaError_t cudaLaunchKernel(const void *, dim3, dim3, void **, size_t, cudaStream_t);
cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *, const void *, void **);
cudaError_t cudaGraphLaunch(cudaGraphExec_t, cudaStream_t);
cudaError_t cudaHostAlloc(void **, size_t, unsigned int);
cudaError_t cudaMallocHost(void **, size_t);
cudaError_t cudaHostRegister(void *, size_t, unsigned int);
cudaError_t cudaHostUnregister(void *);
cudaError_t cudaFreeHost(void *);
void hook_cudart_fail_next(void);
void hook_cudart_last(int *, int *, int *);

ncclResult_t ncclGetUniqueId(ncclUniqueId *);
ncclResult_t ncclCommInitRank(ncclComm_t *, int, ncclUniqueId, int);
ncclResult_t ncclCommInitRankConfig(ncclComm_t *, int, ncclUniqueId, int, void *);
ncclResult_t ncclCommInitRankScalable(ncclComm_t *, int, int, int, ncclUniqueId *, void *);
ncclResult_t ncclCommInitAll(ncclComm_t *, int, const int *);
ncclResult_t ncclCommSplit(ncclComm_t, int, int, ncclComm_t *, void *);
ncclResult_t ncclCommDestroy(ncclComm_t);
ncclResult_t ncclCommAbort(ncclComm_t);
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
ncclResult_t ncclAllReduce(const void *, void *, size_t, int, int, ncclComm_t, void *);
ncclResult_t ncclReduce(const void *, void *, size_t, int, int, int, ncclComm_t, void *);
ncclResult_t ncclBroadcast(const void *, void *, size_t, int, int, ncclComm_t, void *);
ncclResult_t ncclBcast(void *, size_t, int, int, ncclComm_t, void *);
ncclResult_t ncclAllGather(const void *, void *, size_t, int, ncclComm_t, void *);
ncclResult_t ncclReduceScatter(const void *, void *, size_t, int, int, ncclComm_t, void *);
ncclResult_t ncclSend(const void *, size_t, int, int, ncclComm_t, void *);
ncclResult_t ncclRecv(void *, size_t, int, int, ncclComm_t, void *);
void hook_nccl_fail_next(void);
void hook_nccl_last(int *, int *, int *);
ncclComm_t hook_nccl_make_comm(int, int);

/* ---- Checking a call against what the fake says it did ---- */
static atomic_int failures;

static void check(const char *what, int want_id, int got_ret, int got_errno,
                  void (*last)(int *, int *, int *)) {
    int id, ret, err;
    last(&id, &ret, &err);
    if (id != want_id || got_ret != ret || got_errno != err) {
        fprintf(stderr,
                "MISMATCH %s: returned %d with errno %d; the fake (call %d, want %d) "
                "returned %d and set errno %d\n",
                what, got_ret, got_errno, id, want_id, ret, err);
        atomic_fetch_add(&failures, 1);
    }
}

#define RT(id, call)                                                                         \
    do {                                                                                     \
        errno = 0;                                                                           \
        int r_ = (call);                                                                     \
        int e_ = errno;                                                                      \
        check(#call, id, r_, e_, hook_cudart_last);                                          \
    } while (0)

#define NC(id, call)                                                                         \
    do {                                                                                     \
        errno = 0;                                                                           \
        int r_ = (call);                                                                     \
        int e_ = errno;                                                                      \
        check(#call, id, r_, e_, hook_nccl_last);                                            \
    } while (0)

static void expect_int(const char *what, long got, long want) {
    if (got != want) {
        fprintf(stderr, "MISMATCH %s: got %ld, want %ld\n", what, got, want);
        atomic_fetch_add(&failures, 1);
    }
}

static long gettid_(void) { return (long)syscall(SYS_gettid); }

/* ---- This library's own copy of NVTX (what nvToolsExt.h v3 compiles into it) ---- */
typedef void (*nvtx_fn)(void);
typedef struct {
    uint16_t version;
    uint16_t size;
    uint32_t category;
    int32_t colorType;
    uint32_t color;
    int32_t payloadType;
    int32_t reserved0;
    uint64_t payload;
    int32_t messageType;
    const void *message;
} nvtxEventAttributes_t;
_Static_assert(sizeof(nvtxEventAttributes_t) == 48, "nvtxEventAttributes_t layout");

struct nvtx_callbacks {
    size_t struct_size;
    int (*get_module_table)(int module, nvtx_fn ***table, unsigned int *size);
};
struct nvtx_version_info {
    size_t struct_size;
    uint32_t version;
    uint32_t reserved0;
    void (*set_injection_version)(uint32_t);
};

static nvtx_fn nvtx_core[16];
static nvtx_fn *nvtx_core_slots[17];
static uint32_t nvtx_tool_version;
static int nvtx_attached;
static pthread_once_t nvtx_once = PTHREAD_ONCE_INIT;

static int nvtx_get_module_table(int module, nvtx_fn ***table, unsigned int *size) {
    if (module != 1)
        return 0;
    *table = nvtx_core_slots;
    *size = 16;
    return 1;
}
static void nvtx_set_version(uint32_t v) { nvtx_tool_version = v; }
static const struct nvtx_callbacks nvtx_cb = {sizeof nvtx_cb, nvtx_get_module_table};
static const struct nvtx_version_info nvtx_vi = {sizeof nvtx_vi, 3, 0, nvtx_set_version};

static const void *nvtx_get_export_table(uint32_t id) {
    if (id == 1)
        return &nvtx_cb;
    if (id == 3)
        return &nvtx_vi;
    return NULL;
}

static void nvtx_init(void) {
    for (int i = 1; i < 16; i++)
        nvtx_core_slots[i] = &nvtx_core[i];
    const char *path = getenv("NVTX_INJECTION64_PATH");
    if (!path || !*path)
        return;
    void *h = dlopen(path, RTLD_LAZY);
    if (!h)
        return;
    int (*init)(const void *(*)(uint32_t)) =
        (int (*)(const void *(*)(uint32_t)))dlsym(h, "InitializeInjectionNvtx2");
    if (init && init(nvtx_get_export_table))
        nvtx_attached = 1;
    else
        memset(nvtx_core, 0, sizeof nvtx_core);
}

#define NVTX_SLOT(id, type) (pthread_once(&nvtx_once, nvtx_init), (type)nvtx_core[id])
#define NVTX_NO_TOOL (-99)

static void nvtxMarkEx(const nvtxEventAttributes_t *a) {
    void (*f)(const nvtxEventAttributes_t *) = NVTX_SLOT(1, void (*)(const nvtxEventAttributes_t *));
    if (f)
        f(a);
}
static void nvtxMarkA(const char *m) {
    void (*f)(const char *) = NVTX_SLOT(2, void (*)(const char *));
    if (f)
        f(m);
}
static uint64_t nvtxRangeStartA(const char *m) {
    uint64_t (*f)(const char *) = NVTX_SLOT(5, uint64_t (*)(const char *));
    return f ? f(m) : 0;
}
static void nvtxRangeEnd(uint64_t id) {
    void (*f)(uint64_t) = NVTX_SLOT(7, void (*)(uint64_t));
    if (f)
        f(id);
}
static int nvtxRangePushEx(const nvtxEventAttributes_t *a) {
    int (*f)(const nvtxEventAttributes_t *) = NVTX_SLOT(8, int (*)(const nvtxEventAttributes_t *));
    return f ? f(a) : NVTX_NO_TOOL;
}
static int nvtxRangePushA(const char *m) {
    int (*f)(const char *) = NVTX_SLOT(9, int (*)(const char *));
    return f ? f(m) : NVTX_NO_TOOL;
}
static int nvtxRangePushW(const wchar_t *m) {
    int (*f)(const wchar_t *) = NVTX_SLOT(10, int (*)(const wchar_t *));
    return f ? f(m) : NVTX_NO_TOOL;
}
static int nvtxRangePop(void) {
    int (*f)(void) = NVTX_SLOT(11, int (*)(void));
    return f ? f() : NVTX_NO_TOOL;
}

static void *end_range(void *arg) {
    nvtxRangeEnd(*(uint64_t *)arg);
    return NULL;
}

/* ---- Scenarios ---- */
#define S ((cudaStream_t)0x5000)
#define E ((cudaEvent_t)0x6000)
#define DEV ((void *)0xD0000000)
#define DEV2 ((void *)0xD1000000)

static void init_cuda(void) {
    int n = 0;
    RT(F_GET_DEVICE_COUNT, cudaGetDeviceCount(&n));
}

static void copies_and_calls(void) {
    void *p1 = NULL, *p2 = NULL;
    char *buf = malloc(1 << 16);
    char *pageable = malloc(4096);
    RT(F_HOST_ALLOC, cudaHostAlloc(&p1, 8192, 2));
    RT(F_MALLOC_HOST, cudaMallocHost(&p2, 4096));
    RT(F_HOST_REGISTER, cudaHostRegister(buf, 1 << 16, 1));
    printf("pinned %p %p %p\n", p1, p2, (void *)buf);

    /* Copies: the byte count names each one in the test. */
    RT(F_MEMCPY, cudaMemcpy(DEV, (char *)p1 + 16, 1001, HtoD));
    RT(F_MEMCPY, cudaMemcpy(DEV, pageable, 1002, HtoD));
    RT(F_MEMCPY_ASYNC, cudaMemcpyAsync(p2, DEV, 1003, DtoH, S));
    RT(F_MEMCPY_ASYNC, cudaMemcpyAsync(pageable, DEV, 1004, DtoH, S));
    RT(F_MEMCPY_ASYNC, cudaMemcpyAsync(DEV, buf + 100, 1005, HtoD, S));
    RT(F_MEMCPY, cudaMemcpy(DEV, DEV2, 1006, DtoD));
    RT(F_MEMCPY_ASYNC, cudaMemcpyAsync(DEV, p1, 1007, Default, S));
    RT(F_MEMCPY_ASYNC, cudaMemcpyAsync(DEV, pageable, 1008, Default, S));
    RT(F_MEMCPY_2D, cudaMemcpy2D(DEV, 2048, p2, 1024, 1009, 1, HtoD));
    RT(F_MEMCPY_2D_ASYNC, cudaMemcpy2DAsync(pageable, 2048, DEV, 2048, 505, 2, DtoH, S));
    RT(F_MEMCPY_PEER, cudaMemcpyPeer(DEV, 1, DEV2, 0, 1011));
    RT(F_MEMCPY_PEER_ASYNC, cudaMemcpyPeerAsync(DEV, 0, DEV2, 1, 1012, S));
    hook_cudart_fail_next();
    RT(F_MEMCPY_ASYNC, cudaMemcpyAsync(DEV, p1, 1013, HtoD, S));
    RT(F_HOST_UNREGISTER, cudaHostUnregister(buf));
    RT(F_MEMCPY_ASYNC, cudaMemcpyAsync(DEV, buf, 1014, HtoD, S));
    hook_cudart_fail_next();
    RT(F_FREE_HOST, cudaFreeHost(p2)); /* fails: p2 stays pinned */
    RT(F_MEMCPY_ASYNC, cudaMemcpyAsync(DEV, p2, 1015, HtoD, S));
    RT(F_FREE_HOST, cudaFreeHost(p2));
    RT(F_FREE_HOST, cudaFreeHost(p1));
    RT(F_MEMCPY, cudaMemcpy(DEV, p1, 1016, HtoD)); /* freed: no longer pinned */

    RT(F_MEMSET, cudaMemset(DEV, 7, 2001));
    RT(F_MEMSET_ASYNC, cudaMemsetAsync(DEV, 8, 2002, S));
    RT(F_STREAM_SYNC, cudaStreamSynchronize(S));
    RT(F_DEVICE_SYNC, cudaDeviceSynchronize());
    RT(F_EVENT_SYNC, cudaEventSynchronize(E));
    RT(F_STREAM_WAIT_EVENT, cudaStreamWaitEvent(S, E, 1));

    void *args[1] = {NULL};
    RT(F_LAUNCH_STUB,
       __cudaLaunchKernel((void *)0x7000, (dim3){2, 3, 4}, (dim3){32, 2, 1}, args, 0, S));
    RT(F_LAUNCH, cudaLaunchKernel((void *)0x7100, (dim3){5, 1, 1}, (dim3){128, 1, 1}, args, 16, S));
    cudaLaunchConfig_t cfg = {{7, 1, 1}, {64, 1, 1}, 0, S, NULL, 0};
    RT(F_LAUNCH_EXC, cudaLaunchKernelExC(&cfg, (void *)0x7200, args));
    RT(F_GRAPH_LAUNCH, cudaGraphLaunch((cudaGraphExec_t)0x8000, S));
    hook_cudart_fail_next();
    RT(F_STREAM_SYNC, cudaStreamSynchronize(S));
    free(buf);
    free(pageable);
}

static void nccl_calls(void) {
    char sb[64], rb[64];
    ncclUniqueId u1, u2, u3[2];
    ncclComm_t c1, c2, c3, c4, c5, all[2];
    NC(N_GET_UNIQUE_ID, ncclGetUniqueId(&u1)); /* seed 1 */
    NC(N_INIT_RANK, ncclCommInitRank(&c1, 4, u1, 2));
    NC(N_ALL_REDUCE, ncclAllReduce(sb, rb, 1000, 7, 0, c1, S));
    NC(N_REDUCE, ncclReduce(sb, rb, 1001, 9, 2, 1, c1, S));
    NC(N_BROADCAST, ncclBroadcast(sb, rb, 1002, 0, 0, c1, S));
    NC(N_BCAST, ncclBcast(rb, 1003, 8, 3, c1, S));
    NC(N_GROUP_START, ncclGroupStart());
    NC(N_SEND, ncclSend(sb, 1004, 1, 3, c1, S));
    NC(N_RECV, ncclRecv(rb, 1005, 2, 1, c1, S));
    NC(N_GROUP_END, ncclGroupEnd());
    NC(N_ALL_GATHER, ncclAllGather(sb, rb, 1006, 6, c1, S));
    NC(N_REDUCE_SCATTER, ncclReduceScatter(sb, rb, 1007, 4, 4, c1, S));
    hook_nccl_fail_next();
    NC(N_ALL_REDUCE, ncclAllReduce(sb, rb, 1008, 7, 0, c1, S));
    NC(N_ALL_REDUCE, ncclAllReduce(sb, rb, 1009, 7, 12345, c1, S));
    NC(N_SPLIT, ncclCommSplit(c1, 5, 1, &c2, NULL));
    NC(N_SPLIT, ncclCommSplit(c1, NCCL_SPLIT_NOCOLOR, 0, &c3, NULL));
    expect_int("NOCOLOR split gives NULL", (long)(uintptr_t)c3, 0);
    NC(N_ALL_REDUCE, ncclAllReduce(sb, rb, 1010, 7, 0, c2, S));
    NC(N_GET_UNIQUE_ID, ncclGetUniqueId(&u2)); /* seed 2 */
    NC(N_INIT_RANK_CONFIG, ncclCommInitRankConfig(&c4, 8, u2, 5, NULL));
    NC(N_GET_UNIQUE_ID, ncclGetUniqueId(&u3[0])); /* seed 3 */
    NC(N_GET_UNIQUE_ID, ncclGetUniqueId(&u3[1])); /* seed 4 */
    NC(N_INIT_SCALABLE, ncclCommInitRankScalable(&c5, 16, 9, 2, u3, NULL));
    NC(N_INIT_ALL, ncclCommInitAll(all, 2, NULL));
    NC(N_ALL_REDUCE, ncclAllReduce(sb, rb, 1011, 7, 0, all[1], S));
    ncclComm_t stranger = hook_nccl_make_comm(3, 7);
    NC(N_ALL_REDUCE, ncclAllReduce(sb, rb, 1012, 7, 0, stranger, S));
    NC(N_ALL_REDUCE, ncclAllReduce(sb, rb, 1013, 7, 0, stranger, S));
    NC(N_DESTROY, ncclCommDestroy(c2));
    NC(N_ABORT, ncclCommAbort(c4));
    NC(N_DESTROY, ncclCommDestroy(c5));
    NC(N_DESTROY, ncclCommDestroy(all[0]));
    NC(N_DESTROY, ncclCommDestroy(all[1]));
    NC(N_DESTROY, ncclCommDestroy(c1));
    printf("comms %p\n", (void *)stranger);
}

static void nvtx_calls(int expect_tool) {
    int base = expect_tool ? 0 : NVTX_NO_TOOL;
    expect_int("push outer", nvtxRangePushA("outer"), expect_tool ? 0 : NVTX_NO_TOOL);
    expect_int("push inner", nvtxRangePushA("inner"), expect_tool ? 1 : NVTX_NO_TOOL);
    nvtxMarkA("tick");
    expect_int("pop inner", nvtxRangePop(), expect_tool ? 1 : base);
    expect_int("pop outer", nvtxRangePop(), expect_tool ? 0 : base);
    expect_int("pop nothing", nvtxRangePop(), expect_tool ? -1 : base);
    uint64_t id = nvtxRangeStartA("async");
    pthread_t t;
    pthread_create(&t, NULL, end_range, &id);
    pthread_join(t, NULL);
    expect_int("push wide", nvtxRangePushW(L"wide \u2603"), base);
    nvtxRangePop();
    nvtxEventAttributes_t a = {0};
    a.version = 2;
    a.size = sizeof a;
    a.messageType = 1;
    a.message = "0123456789012345678901234567890123456789012345678901234567890123456789";
    expect_int("push ex", nvtxRangePushEx(&a), base);
    nvtxRangePop();
    a.messageType = 2;
    a.message = L"uni";
    nvtxMarkEx(&a);
    expect_int("NVTX attached", nvtx_attached, expect_tool);
    expect_int("tool's NVTX version", nvtx_tool_version, expect_tool ? 3 : 0);
    printf("range %llu\n", (unsigned long long)id);
}

/* Many threads, many calls: every one must be in the trace or counted as dropped. */
struct stress_arg {
    ncclComm_t comm;
    long calls;
};

static void *stress_thread(void *p) {
    struct stress_arg *a = p;
    char sb[8], rb[8];
    int bad = 0;
    for (long i = 0; i < a->calls; i++) {
        errno = 0;
        int r, want;
        if (i & 1) {
            r = ncclAllReduce(sb, rb, 64, 7, 0, a->comm, S);
            want = FAKE_ERRNO_OK(N_ALL_REDUCE);
        } else {
            r = cudaMemcpyAsync(DEV, sb, 64, HtoD, S);
            want = FAKE_ERRNO_OK(F_MEMCPY_ASYNC);
        }
        if (r != 0 || errno != want)
            bad++;
    }
    if (bad) {
        fprintf(stderr, "MISMATCH stress: %d calls with a wrong result or errno\n", bad);
        atomic_fetch_add(&failures, 1);
    }
    return NULL;
}

static void stress(int threads, long calls) {
    ncclUniqueId u;
    ncclComm_t c;
    NC(N_GET_UNIQUE_ID, ncclGetUniqueId(&u));
    NC(N_INIT_RANK, ncclCommInitRank(&c, 2, u, 0));
    pthread_t *t = calloc(threads, sizeof *t);
    struct stress_arg a = {c, calls};
    for (int i = 0; i < threads; i++)
        pthread_create(&t[i], NULL, stress_thread, &a);
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    free(t);
}

/* A thread that makes its calls and exits at once: its ring still holds them. */
static void *exiting_thread(void *p) {
    (void)p;
    for (int i = 0; i < 1000; i++)
        RT(F_MEMCPY_ASYNC, cudaMemcpyAsync(DEV, DEV2, 4001, DtoD, S));
    return NULL;
}

static void thread_exit(void) {
    pthread_t t;
    pthread_create(&t, NULL, exiting_thread, NULL);
    pthread_join(t, NULL);
}

/* fork() while tracing, with another thread busy changing the pinned registry. */
static atomic_int churn_stop;

static void *churn(void *p) {
    (void)p;
    static char block[4096];
    while (!atomic_load(&churn_stop)) {
        cudaHostRegister(block, sizeof block, 0);
        cudaHostUnregister(block);
    }
    return NULL;
}

static void forks(int n) {
    ncclUniqueId u;
    ncclComm_t c;
    char sb[8], rb[8];
    NC(N_GET_UNIQUE_ID, ncclGetUniqueId(&u));
    NC(N_INIT_RANK, ncclCommInitRank(&c, 2, u, 1));
    for (int i = 0; i < 50; i++)
        RT(F_MEMCPY, cudaMemcpy(DEV, DEV2, 3001, DtoD));
    pthread_t t;
    pthread_create(&t, NULL, churn, NULL);
    for (int k = 0; k < n; k++) {
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            atomic_store(&failures, 0);
            void *p = NULL;
            for (int i = 0; i < 20; i++)
                RT(F_MEMCPY, cudaMemcpy(DEV, DEV2, 3002, DtoD));
            RT(F_HOST_ALLOC, cudaHostAlloc(&p, 64, 0));
            RT(F_MEMCPY, cudaMemcpy(DEV, p, 3002, HtoD));
            RT(F_FREE_HOST, cudaFreeHost(p));
            NC(N_ALL_REDUCE, ncclAllReduce(sb, rb, 3002, 7, 0, c, S));
            fflush(NULL);
            _exit(atomic_load(&failures) ? 1 : 0);
        }
        int status = 0;
        waitpid(pid, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "MISMATCH child %d ended with status %d\n", k, status);
            atomic_fetch_add(&failures, 1);
        }
    }
    atomic_store(&churn_stop, 1);
    pthread_join(t, NULL);
    for (int i = 0; i < 50; i++)
        RT(F_MEMCPY, cudaMemcpy(DEV, DEV2, 3003, DtoD));
    NC(N_DESTROY, ncclCommDestroy(c));
}

/* A training loop annotated the way torch.cuda.nvtx users do: one "train step N" range
 * per step with a copy inside, about 2 ms apart, for SECS seconds. */
static void steps(double secs) {
    struct timespec t0, now, pause = {0, 2000000};
    clock_gettime(CLOCK_MONOTONIC, &t0);
    char name[32];
    for (int i = 0;; i++) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((now.tv_sec - t0.tv_sec) + (now.tv_nsec - t0.tv_nsec) / 1e9 > secs)
            break;
        snprintf(name, sizeof name, "train step %d", i);
        nvtxRangePushA(name);
        RT(F_MEMCPY, cudaMemcpy(DEV, DEV2, 4096, DtoD));
        nvtxRangePop();
        nanosleep(&pause, NULL);
    }
}

EXPORT int ext_run(const char *scenario, int argc, char **argv) {
    printf("tid %ld\n", gettid_());
    int expect_nvtx = !(getenv("HOOK_EXPECT_NVTX") && !strcmp(getenv("HOOK_EXPECT_NVTX"), "0"));
    if (!strcmp(scenario, "late")) {
        RT(F_MEMCPY, cudaMemcpy(DEV, DEV2, 5001, DtoD));
    } else {
        init_cuda();
    }
    if (!strcmp(scenario, "all")) {
        copies_and_calls();
        nccl_calls();
        nvtx_calls(expect_nvtx);
    } else if (!strcmp(scenario, "stress")) {
        stress(argc > 0 ? atoi(argv[0]) : 64, argc > 1 ? atol(argv[1]) : 100000);
    } else if (!strcmp(scenario, "thread_exit")) {
        thread_exit();
    } else if (!strcmp(scenario, "fork")) {
        forks(argc > 0 ? atoi(argv[0]) : 20);
    } else if (!strcmp(scenario, "steps")) {
        steps(argc > 0 ? atof(argv[0]) : 5);
    } else if (!strcmp(scenario, "late")) {
        /* nothing more */
    } else {
        fprintf(stderr, "unknown scenario %s\n", scenario);
        return 1;
    }
    fflush(stdout);
    return atomic_load(&failures);
}
