/*
 * hook_cudart.c: a fake libcudart.so.13 for the symbol-hook tests. Every function the
 * preload library hooks, with the fixed behaviour described in hook_fakes.h, plus
 * cudaGetDeviceCount (not hooked: scenarios call it first to "initialise CUDA").
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "hook_fakes.h"

#define EXPORT __attribute__((visibility("default")))

static __thread int fail_once;
static __thread int last_id, last_ret, last_err;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

/* What cuInit does for a tool: load CUDA_INJECTION64_PATH and call its entry point. */
static void driver_init(void) {
    const char *path = getenv("CUDA_INJECTION64_PATH");
    if (!path || !*path)
        return;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return;
    int (*inject)(void) = (int (*)(void))dlsym(h, "InitializeInjection");
    if (inject)
        (void)inject();
}

static int begin(void) {
    pthread_once(&init_once, driver_init);
    int f = fail_once;
    fail_once = 0;
    return f;
}

static int end(int id, int failed) {
    last_id = id;
    last_ret = failed ? FAKE_RESULT_FAIL(id) : 0;
    last_err = failed ? FAKE_ERRNO_FAIL(id) : FAKE_ERRNO_OK(id);
    errno = last_err;
    return last_ret;
}

EXPORT void hook_cudart_fail_next(void) { fail_once = 1; }

EXPORT void hook_cudart_last(int *id, int *ret, int *err) {
    *id = last_id;
    *ret = last_ret;
    *err = last_err;
}

EXPORT cudaError_t cudaGetDeviceCount(int *count) {
    int f = begin();
    if (!f && count)
        *count = 1;
    return end(F_GET_DEVICE_COUNT, f);
}

/* ---- Copies ---- */
EXPORT cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, int kind) {
    (void)dst, (void)src, (void)n, (void)kind;
    return end(F_MEMCPY, begin());
}

EXPORT cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind,
                                   cudaStream_t s) {
    (void)dst, (void)src, (void)n, (void)kind, (void)s;
    return end(F_MEMCPY_ASYNC, begin());
}

EXPORT cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch,
                                size_t width, size_t height, int kind) {
    (void)dst, (void)dpitch, (void)src, (void)spitch, (void)width, (void)height, (void)kind;
    return end(F_MEMCPY_2D, begin());
}

EXPORT cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src,
                                     size_t spitch, size_t width, size_t height, int kind,
                                     cudaStream_t s) {
    (void)dst, (void)dpitch, (void)src, (void)spitch, (void)width, (void)height, (void)kind;
    (void)s;
    return end(F_MEMCPY_2D_ASYNC, begin());
}

EXPORT cudaError_t cudaMemcpyPeer(void *dst, int dd, const void *src, int sd, size_t n) {
    (void)dst, (void)dd, (void)src, (void)sd, (void)n;
    return end(F_MEMCPY_PEER, begin());
}

EXPORT cudaError_t cudaMemcpyPeerAsync(void *dst, int dd, const void *src, int sd, size_t n,
                                       cudaStream_t s) {
    (void)dst, (void)dd, (void)src, (void)sd, (void)n, (void)s;
    return end(F_MEMCPY_PEER_ASYNC, begin());
}

/* ---- Memsets and syncs ---- */
EXPORT cudaError_t cudaMemset(void *p, int v, size_t n) {
    (void)p, (void)v, (void)n;
    return end(F_MEMSET, begin());
}

EXPORT cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s) {
    (void)p, (void)v, (void)n, (void)s;
    return end(F_MEMSET_ASYNC, begin());
}

EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    (void)s;
    return end(F_STREAM_SYNC, begin());
}

EXPORT cudaError_t cudaDeviceSynchronize(void) { return end(F_DEVICE_SYNC, begin()); }

EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    (void)e;
    return end(F_EVENT_SYNC, begin());
}

EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags) {
    (void)s, (void)e, (void)flags;
    return end(F_STREAM_WAIT_EVENT, begin());
}

/* ---- Launches ---- */
EXPORT cudaError_t __cudaLaunchKernel(const void *k, dim3 g, dim3 b, void **args, size_t sh,
                                      cudaStream_t s) {
    (void)k, (void)g, (void)b, (void)args, (void)sh, (void)s;
    return end(F_LAUNCH_STUB, begin());
}

EXPORT cudaError_t cudaLaunchKernel(const void *f, dim3 g, dim3 b, void **args, size_t sh,
                                    cudaStream_t s) {
    (void)f, (void)g, (void)b, (void)args, (void)sh, (void)s;
    return end(F_LAUNCH, begin());
}

EXPORT cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *c, const void *f,
                                       void **args) {
    (void)c, (void)f, (void)args;
    return end(F_LAUNCH_EXC, begin());
}

EXPORT cudaError_t cudaGraphLaunch(cudaGraphExec_t g, cudaStream_t s) {
    (void)g, (void)s;
    return end(F_GRAPH_LAUNCH, begin());
}

/* ---- Pinned host memory ---- */
static void *page_alloc(size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, 4096, n ? n : 1) != 0)
        return NULL;
    return p;
}

EXPORT cudaError_t cudaHostAlloc(void **p, size_t n, unsigned int flags) {
    (void)flags;
    int f = begin();
    if (!f)
        *p = page_alloc(n);
    return end(F_HOST_ALLOC, f);
}

EXPORT cudaError_t cudaMallocHost(void **p, size_t n) {
    int f = begin();
    if (!f)
        *p = page_alloc(n);
    return end(F_MALLOC_HOST, f);
}

EXPORT cudaError_t cudaHostRegister(void *p, size_t n, unsigned int flags) {
    (void)p, (void)n, (void)flags;
    return end(F_HOST_REGISTER, begin());
}

EXPORT cudaError_t cudaHostUnregister(void *p) {
    (void)p;
    return end(F_HOST_UNREGISTER, begin());
}

EXPORT cudaError_t cudaFreeHost(void *p) {
    int f = begin();
    if (!f)
        free(p);
    return end(F_FREE_HOST, f);
}
