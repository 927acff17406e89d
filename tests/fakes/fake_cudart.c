/*
 * fake_cudart.c: a stand-in for libcudart.so.13 (or, with -DFAKE_CUDART_12,
 * libcudart.so.12) that also plays the CUDA driver underneath it.
 *
 * On the first API call it does what cuInit does for a tool: if CUDA_INJECTION64_PATH
 * is set, it dlopens that library and calls its InitializeInjection() once. Then it
 * loads the fake libcupti of its own flavour from its own directory (or from
 * ../../cuda_cupti/lib, the CUDA 12 wheel layout), as the real driver reaches CUPTI,
 * and reports device 0 through it. Every call then makes CUPTI's ENTER and EXIT API
 * callbacks (with the call's parameter struct in CUPTI's layout, a fresh correlation
 * id and the return value) and, between them, emits the activity record a GPU would
 * produce. The fixed return values and the fake rules are listed in fake_cuda.h.
 *
 * errno: the fake never changes errno except where fake_cuda.h says so, and keeps the
 * errno of its own set-up (dlopen and friends) away from the caller, so a test sees
 * exactly what the tool loaded into the process did to it.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fake_cuda.h"

#define EXPORT __attribute__((visibility("default")))

#ifdef FAKE_CUDART_12
#define CUPTI_SONAME "libcupti.so.12"
#else
#define CUPTI_SONAME "libcupti.so.13"
#endif

/* CUPTI enumerators used in records. */
#define MEMCPY_KIND_HTOD 1
#define MEMCPY_KIND_DTOH 2
#define MEMCPY_KIND_DTOD 8
#define MEMCPY_KIND_HTOH 9
#define MEM_KIND_PAGEABLE 1
#define MEM_KIND_PINNED 2
#define MEM_KIND_DEVICE 3
#define MEMCPY_FLAG_ASYNC 1
#define MEMSET_FLAG_ASYNC 1
#define SYNC_TYPE_STREAM_SYNCHRONIZE 3
#define SYNC_TYPE_CONTEXT_SYNCHRONIZE 4
#define SYNC_INVALID_VALUE 0xFFFFFFFFu
#define MEMORY_OP_ALLOCATION 1
#define MEMORY_OP_RELEASE 2

/* ---- Parameter structs, laid out as CUPTI's cuda*_params ---- */
struct cudaGetDeviceCount_params {
    int *count;
};
struct cudaMalloc_params {
    void **devPtr;
    size_t size;
};
struct cudaFree_params {
    void *devPtr;
};
struct cudaMallocHost_params {
    void **ptr;
    size_t size;
};
struct cudaHostAlloc_params {
    void **pHost;
    size_t size;
    unsigned int flags;
};
struct cudaFreeHost_params {
    void *ptr;
};
struct cudaMemcpy_params {
    void *dst;
    const void *src;
    size_t count;
    int kind;
};
struct cudaMemcpyAsync_params {
    void *dst;
    const void *src;
    size_t count;
    int kind;
    cudaStream_t stream;
};
struct cudaMemset_params {
    void *devPtr;
    int value;
    size_t count;
};
struct cudaMemsetAsync_params {
    void *devPtr;
    int value;
    size_t count;
    cudaStream_t stream;
};
struct cudaStreamCreate_params {
    cudaStream_t *pStream;
};
struct cudaStreamSynchronize_params {
    cudaStream_t stream;
};
struct cudaDeviceSynchronize_params {
    char dummy;
};
struct cudaLaunchKernel_params {
    const void *func;
    dim3 gridDim;
    dim3 blockDim;
    void **args;
    size_t sharedMem;
    cudaStream_t stream;
};
_Static_assert(offsetof(struct cudaMalloc_params, size) == 8, "cudaMalloc size");
_Static_assert(offsetof(struct cudaHostAlloc_params, flags) == 16, "cudaHostAlloc flags");
_Static_assert(sizeof(struct cudaMemcpy_params) == 32, "cudaMemcpy params");
_Static_assert(offsetof(struct cudaMemcpy_params, count) == 16, "cudaMemcpy count");
_Static_assert(offsetof(struct cudaMemcpy_params, kind) == 24, "cudaMemcpy kind");
_Static_assert(sizeof(struct cudaMemcpyAsync_params) == 40, "cudaMemcpyAsync params");
_Static_assert(offsetof(struct cudaMemcpyAsync_params, stream) == 32, "cudaMemcpyAsync stream");
_Static_assert(offsetof(struct cudaMemset_params, value) == 8, "cudaMemset value");
_Static_assert(offsetof(struct cudaMemset_params, count) == 16, "cudaMemset count");
_Static_assert(sizeof(struct cudaMemsetAsync_params) == 32, "cudaMemsetAsync params");
_Static_assert(offsetof(struct cudaMemsetAsync_params, stream) == 24, "cudaMemsetAsync stream");
_Static_assert(sizeof(struct cudaStreamSynchronize_params) == 8, "cudaStreamSynchronize");
_Static_assert(sizeof(struct cudaLaunchKernel_params) == 56, "cudaLaunchKernel params");
_Static_assert(offsetof(struct cudaLaunchKernel_params, gridDim) == 8, "launch grid");
_Static_assert(offsetof(struct cudaLaunchKernel_params, blockDim) == 20, "launch block");
_Static_assert(offsetof(struct cudaLaunchKernel_params, args) == 32, "launch args");
_Static_assert(offsetof(struct cudaLaunchKernel_params, sharedMem) == 40, "launch smem");
_Static_assert(offsetof(struct cudaLaunchKernel_params, stream) == 48, "launch stream");

/* ---- The "driver": injection and CUPTI ---- */
static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static struct {
    fake_cupti_api_fn api;
    fake_cupti_emit_kernel_fn kernel;
    fake_cupti_emit_memcpy_fn memcpy_;
    fake_cupti_emit_memset_fn memset_;
    fake_cupti_emit_sync_fn sync;
    fake_cupti_emit_device_fn device;
    fake_cupti_emit_memory_fn memory;
    fake_cupti_now_fn now;
    fake_cupti_emit_graph_trace_fn graph_trace;
} cupti;
static _Atomic uint32_t last_corr;

/* The CUPTI the process already has (a tool or the program loaded it), else the one
 * next to this library. */
static void *open_cupti(void) {
    void *loaded = dlopen(CUPTI_SONAME, RTLD_NOW | RTLD_NOLOAD);
    if (loaded)
        return loaded;
    static const char self_marker = 0; /* any object in this library names its file */
    Dl_info info;
    if (!dladdr(&self_marker, &info) || !info.dli_fname)
        return NULL;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", info.dli_fname);
    char *slash = strrchr(dir, '/');
    if (!slash)
        return NULL;
    *slash = '\0';
    static const char *const subdirs[] = {"", "/../../cuda_cupti/lib"};
    for (size_t i = 0; i < sizeof subdirs / sizeof subdirs[0]; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s%s/%s", dir, subdirs[i], CUPTI_SONAME);
        if (access(path, F_OK) != 0)
            continue;
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (h)
            return h;
    }
    return NULL;
}

static void driver_init(void) {
    int saved = errno;
    int (*inject)(void) = NULL;
    const char *path = getenv("CUDA_INJECTION64_PATH");
    if (path && *path) {
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (h)
            *(void **)&inject = dlsym(h, "InitializeInjection");
    }
    errno = saved;
    /* The tool's own doing, as seen by the program: not hidden. */
    if (inject)
        (void)inject();
    saved = errno;

    void *h = open_cupti();
    if (h) {
        *(void **)&cupti.api = dlsym(h, "fake_cupti_api");
        *(void **)&cupti.kernel = dlsym(h, "fake_cupti_emit_kernel");
        *(void **)&cupti.memcpy_ = dlsym(h, "fake_cupti_emit_memcpy");
        *(void **)&cupti.memset_ = dlsym(h, "fake_cupti_emit_memset");
        *(void **)&cupti.sync = dlsym(h, "fake_cupti_emit_sync");
        *(void **)&cupti.device = dlsym(h, "fake_cupti_emit_device");
        *(void **)&cupti.memory = dlsym(h, "fake_cupti_emit_memory");
        *(void **)&cupti.now = dlsym(h, "fake_cupti_now");
        *(void **)&cupti.graph_trace = dlsym(h, "fake_cupti_emit_graph_trace");
    }
    if (cupti.device) {
        struct fake_device d = {
            .id = 0,
            .sm_count = 132,
            .max_blocks_per_sm = 32,
            .threads_per_warp = 32,
            .max_warps_per_sm = 64,
            .max_regs_per_sm = 65536,
            .max_smem_per_sm = 233472,
            .cc_major = 9,
            .cc_minor = 0,
            .global_memory = 150754820096ull,
            .name = FAKE_DEVICE_NAME,
        };
        cupti.device(&d);
    }
    errno = saved;
}

static uint64_t now(void) {
    if (cupti.now)
        return cupti.now();
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* One API call in flight: its CUPTI correlation id and correlationData slot. */
struct call {
    uint32_t domain; /* FAKE_CB_DOMAIN_RUNTIME_API or FAKE_CB_DOMAIN_DRIVER_API */
    uint32_t cbid;
    const char *name;
    const char *symbol;
    const void *params;
    uint32_t corr;
    uint64_t corr_data;
    int ret;
};

/* A call's ENTER callback in `domain`, with a correlation id from the one counter that
 * runtime calls and the program's own driver calls share (their GPU records carry it). */
static void begin(struct call *c, uint32_t domain, uint32_t cbid, const char *name,
                  const void *params, const char *symbol) {
    pthread_once(&init_once, driver_init);
    c->domain = domain;
    c->cbid = cbid;
    c->name = name;
    c->symbol = symbol;
    c->params = params;
    c->corr = atomic_fetch_add(&last_corr, 1) + 1;
    c->corr_data = 0;
    c->ret = 0x7eadbeef; /* undefined until EXIT, as in CUPTI */
    if (cupti.api)
        cupti.api(domain, cbid, FAKE_API_ENTER, c->corr, name, symbol, params, &c->ret,
                  &c->corr_data);
}

static void enter(struct call *c, uint32_t cbid, const char *name, const void *params,
                  const char *symbol) {
    begin(c, FAKE_CB_DOMAIN_RUNTIME_API, cbid, name, params, symbol);
}

/* The driver call a runtime call makes underneath, as CUPTI reports it: a driver-domain
 * ENTER and EXIT inside the runtime call's, with a correlation id of its own (taken from
 * a separate range here, so the runtime calls' ids stay what the tests expect). The GPU
 * record carries the runtime call's id, as with CUPTI. */
static _Atomic uint32_t last_driver_corr = 1u << 30;

static _Atomic uint64_t nested_delivered;

static void nested_driver(uint32_t cbid, const char *name, const void *params) {
    if (!cupti.api)
        return;
    uint32_t corr = atomic_fetch_add(&last_driver_corr, 1) + 1;
    uint64_t data = 0;
    int ret = 0;
    int n = cupti.api(FAKE_CB_DOMAIN_DRIVER_API, cbid, FAKE_API_ENTER, corr, name, NULL, params,
                      &ret, &data);
    n += cupti.api(FAKE_CB_DOMAIN_DRIVER_API, cbid, FAKE_API_EXIT, corr, name, NULL, params, &ret,
                   &data);
    atomic_fetch_add(&nested_delivered, (uint64_t)n);
}

/* How many of those nested driver callbacks reached a subscriber: CUPTI's cost a tracer
 * that enables the driver's ids pays on every runtime call (for the tests). */
EXPORT uint64_t fakeNestedDriverCallbacks(void) { return atomic_load(&nested_delivered); }

/* A driver call made by the program itself (JAX, cuBLAS): its own ENTER and EXIT. */
static void driver_enter(struct call *c, uint32_t cbid, const char *name, const void *params,
                         const char *symbol) {
    begin(c, FAKE_CB_DOMAIN_DRIVER_API, cbid, name, params, symbol);
}

/* Sets errno (when err != 0), makes the EXIT callback, returns ret. */
static int leave(struct call *c, int ret, int err) {
    c->ret = ret;
    if (err)
        errno = err;
    if (cupti.api)
        cupti.api(c->domain, c->cbid, FAKE_API_EXIT, c->corr, c->name, c->symbol, c->params,
                  &c->ret, &c->corr_data);
    return ret;
}

/* ---- Fake memory: device allocations, pinned host ranges, streams ---- */
#define MAX_RANGES 1024
struct range {
    uintptr_t base;
    size_t size;
};
static pthread_mutex_t mem_mu = PTHREAD_MUTEX_INITIALIZER;
static struct range dev_ranges[MAX_RANGES];
static struct range pinned_ranges[MAX_RANGES];
static uintptr_t next_dev_addr = 0x7e0000000000ull;
static uint32_t n_streams;
/* Device memory allocated and not freed, against FAKE_CUDA_MEMORY_LIMIT. */
static uint64_t dev_in_use;

/* FAKE_CUDA_MEMORY_LIMIT=BYTES: the device memory cudaMalloc may hand out (0 or unset:
 * no limit). */
static uint64_t memory_limit(void) {
    const char *e = getenv("FAKE_CUDA_MEMORY_LIMIT");
    return e && *e ? strtoull(e, NULL, 10) : 0;
}

static int find_range(struct range *t, uintptr_t p) {
    for (int i = 0; i < MAX_RANGES; i++)
        if (t[i].size && p >= t[i].base && p < t[i].base + t[i].size)
            return i;
    return -1;
}

static void add_range(struct range *t, uintptr_t base, size_t size) {
    for (int i = 0; i < MAX_RANGES; i++)
        if (!t[i].size) {
            t[i].base = base;
            t[i].size = size ? size : 1;
            return;
        }
}

static uint8_t mem_kind_of(const void *p) {
    pthread_mutex_lock(&mem_mu);
    uint8_t k = MEM_KIND_PAGEABLE;
    if (find_range(dev_ranges, (uintptr_t)p) >= 0)
        k = MEM_KIND_DEVICE;
    else if (find_range(pinned_ranges, (uintptr_t)p) >= 0)
        k = MEM_KIND_PINNED;
    pthread_mutex_unlock(&mem_mu);
    return k;
}

/* streamId of a stream handle; 0 for a handle cudaStreamCreate never gave out. */
static uint32_t stream_id(cudaStream_t s) {
    if (!s)
        return FAKE_DEFAULT_STREAM_ID;
    uintptr_t v = (uintptr_t)s;
    pthread_mutex_lock(&mem_mu);
    uint32_t n = n_streams;
    pthread_mutex_unlock(&mem_mu);
    if (v < 0x5000 + 16 || (v - 0x5000) % 16 != 0 || (v - 0x5000) / 16 > n)
        return 0;
    return FAKE_FIRST_STREAM_ID - 1 + (uint32_t)((v - 0x5000) / 16);
}

/* A kernel record's fields that a launch gives (start, end and the graph's ids are the
 * caller's to set). */
static struct fake_kernel kernel_of(uint32_t corr, cudaStream_t stream, const char *name,
                                    dim3 grid, dim3 block, uint32_t dynamic_smem) {
    struct fake_kernel k = {
        .corr = corr,
        .device = 0,
        .context = FAKE_CONTEXT_ID,
        .stream = stream_id(stream),
        .name = name,
        .grid = {grid.x, grid.y, grid.z},
        .block = {block.x, block.y, block.z},
        .static_smem = FAKE_KERNEL_STATIC_SMEM,
        .dynamic_smem = dynamic_smem,
        .registers = FAKE_KERNEL_REGISTERS,
    };
    return k;
}

/* ======================= The runtime API ======================= */

EXPORT cudaError_t cudaGetDeviceCount(int *count) {
    struct cudaGetDeviceCount_params p = {count};
    struct call c;
    enter(&c, CBID_cudaGetDeviceCount, "cudaGetDeviceCount", &p, NULL);
    if (count)
        *count = 1;
    return leave(&c, 0, 0);
}

EXPORT cudaError_t cudaStreamCreate(cudaStream_t *pStream) {
    struct cudaStreamCreate_params p = {pStream};
    struct call c;
    enter(&c, CBID_cudaStreamCreate, "cudaStreamCreate", &p, NULL);
    pthread_mutex_lock(&mem_mu);
    uint32_t n = ++n_streams;
    pthread_mutex_unlock(&mem_mu);
    if (pStream)
        *pStream = (cudaStream_t)(uintptr_t)(0x5000 + 16 * n);
    return leave(&c, 0, 0);
}

EXPORT cudaError_t cudaMalloc(void **devPtr, size_t size) {
    struct cudaMalloc_params p = {devPtr, size};
    struct call c;
    enter(&c, CBID_cudaMalloc, "cudaMalloc", &p, NULL);
    if (size == FAKE_BAD_COUNT) {
        if (devPtr)
            *devPtr = NULL;
        return leave(&c, 2, 12);
    }
    uint64_t limit = memory_limit();
    pthread_mutex_lock(&mem_mu);
    if (limit && dev_in_use + size > limit) {
        /* Out of memory, as a GPU would say it: no record, errno untouched. */
        pthread_mutex_unlock(&mem_mu);
        if (devPtr)
            *devPtr = NULL;
        return leave(&c, 2, 0);
    }
    dev_in_use += size;
    uintptr_t a = next_dev_addr;
    next_dev_addr += (size + 511) & ~(size_t)511;
    next_dev_addr += 512;
    add_range(dev_ranges, a, size);
    pthread_mutex_unlock(&mem_mu);
    if (devPtr)
        *devPtr = (void *)a;
    if (cupti.memory) {
        struct fake_memory m = {
            .corr = c.corr,
            .device = 0,
            .context = FAKE_CONTEXT_ID,
            .stream = FAKE_DEFAULT_STREAM_ID,
            .op = MEMORY_OP_ALLOCATION,
            .mem_kind = MEM_KIND_DEVICE,
            .address = a,
            .bytes = size,
            .ts = now(),
        };
        cupti.memory(&m);
    }
    return leave(&c, 0, 0);
}

EXPORT cudaError_t cudaFree(void *devPtr) {
    struct cudaFree_params p = {devPtr};
    struct call c;
    enter(&c, CBID_cudaFree, "cudaFree", &p, NULL);
    size_t size = 0;
    pthread_mutex_lock(&mem_mu);
    int i = find_range(dev_ranges, (uintptr_t)devPtr);
    if (i >= 0) {
        size = dev_ranges[i].size;
        dev_ranges[i].size = 0;
        dev_in_use -= size <= dev_in_use ? size : dev_in_use;
    }
    pthread_mutex_unlock(&mem_mu);
    if (i >= 0 && cupti.memory) {
        struct fake_memory m = {
            .corr = c.corr,
            .device = 0,
            .context = FAKE_CONTEXT_ID,
            .stream = FAKE_DEFAULT_STREAM_ID,
            .op = MEMORY_OP_RELEASE,
            .mem_kind = MEM_KIND_DEVICE,
            .address = (uintptr_t)devPtr,
            .bytes = size,
            .ts = now(),
        };
        cupti.memory(&m);
    }
    return leave(&c, 0, 0);
}

static int host_alloc(void **ptr, size_t size) {
    int saved = errno;
    void *m = malloc(size ? size : 1);
    errno = saved;
    if (!m)
        return 2;
    pthread_mutex_lock(&mem_mu);
    add_range(pinned_ranges, (uintptr_t)m, size);
    pthread_mutex_unlock(&mem_mu);
    if (ptr)
        *ptr = m;
    return 0;
}

EXPORT cudaError_t cudaMallocHost(void **ptr, size_t size) {
    struct cudaMallocHost_params p = {ptr, size};
    struct call c;
    enter(&c, CBID_cudaMallocHost, "cudaMallocHost", &p, NULL);
    return leave(&c, host_alloc(ptr, size), 0);
}

EXPORT cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags) {
    struct cudaHostAlloc_params p = {pHost, size, flags};
    struct call c;
    enter(&c, CBID_cudaHostAlloc, "cudaHostAlloc", &p, NULL);
    return leave(&c, host_alloc(pHost, size), 0);
}

EXPORT cudaError_t cudaFreeHost(void *ptr) {
    struct cudaFreeHost_params p = {ptr};
    struct call c;
    enter(&c, CBID_cudaFreeHost, "cudaFreeHost", &p, NULL);
    pthread_mutex_lock(&mem_mu);
    int i = find_range(pinned_ranges, (uintptr_t)ptr);
    if (i >= 0)
        pinned_ranges[i].size = 0;
    pthread_mutex_unlock(&mem_mu);
    if (i >= 0)
        free(ptr);
    return leave(&c, 0, 0);
}

static uint8_t copy_kind(int kind, uint8_t src, uint8_t dst) {
    switch (kind) {
    case cudaMemcpyHostToHost:
        return MEMCPY_KIND_HTOH;
    case cudaMemcpyHostToDevice:
        return MEMCPY_KIND_HTOD;
    case cudaMemcpyDeviceToHost:
        return MEMCPY_KIND_DTOH;
    case cudaMemcpyDeviceToDevice:
        return MEMCPY_KIND_DTOD;
    default:
        if (src == MEM_KIND_DEVICE)
            return dst == MEM_KIND_DEVICE ? MEMCPY_KIND_DTOD : MEMCPY_KIND_DTOH;
        return dst == MEM_KIND_DEVICE ? MEMCPY_KIND_HTOD : MEMCPY_KIND_HTOH;
    }
}

static void emit_memcpy(uint32_t corr, void *dst, const void *src, size_t count, int kind,
                        cudaStream_t stream, int async, uint64_t start) {
    if (!cupti.memcpy_)
        return;
    uint8_t sk = mem_kind_of(src), dk = mem_kind_of(dst);
    struct fake_memcpy m = {
        .corr = corr,
        .device = 0,
        .context = FAKE_CONTEXT_ID,
        .stream = stream_id(stream),
        .start = start,
        .end = now(),
        .bytes = count,
        .copy_kind = copy_kind(kind, sk, dk),
        .src_kind = sk,
        .dst_kind = dk,
        .flags = async ? MEMCPY_FLAG_ASYNC : 0,
    };
    cupti.memcpy_(&m);
}

EXPORT cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, int kind) {
    struct cudaMemcpy_params p = {dst, src, count, kind};
    struct call c;
    enter(&c, CBID_cudaMemcpy, "cudaMemcpy", &p, NULL);
    if (count == FAKE_BAD_COUNT)
        return leave(&c, 11, 42);
    emit_memcpy(c.corr, dst, src, count, kind, NULL, 0, now());
    return leave(&c, 0, 0);
}

EXPORT cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, int kind,
                                   cudaStream_t stream) {
    struct cudaMemcpyAsync_params p = {dst, src, count, kind, stream};
    struct call c;
    enter(&c, CBID_cudaMemcpyAsync, "cudaMemcpyAsync", &p, NULL);
    if (count == FAKE_BAD_COUNT)
        return leave(&c, 11, 42);
    nested_driver(CBID_cuMemcpyAsync, "cuMemcpyAsync", &p);
    emit_memcpy(c.corr, dst, src, count, kind, stream, 1, now());
    return leave(&c, 0, 0);
}

static void emit_memset(uint32_t corr, void *devPtr, int value, size_t count,
                        cudaStream_t stream, int async) {
    if (!cupti.memset_)
        return;
    uint64_t start = now();
    struct fake_memset m = {
        .corr = corr,
        .device = 0,
        .context = FAKE_CONTEXT_ID,
        .stream = stream_id(stream),
        .start = start,
        .end = now(),
        .bytes = count,
        .value = (uint32_t)value,
        .mem_kind = mem_kind_of(devPtr),
        .flags = async ? MEMSET_FLAG_ASYNC : 0,
    };
    cupti.memset_(&m);
}

EXPORT cudaError_t cudaMemset(void *devPtr, int value, size_t count) {
    struct cudaMemset_params p = {devPtr, value, count};
    struct call c;
    enter(&c, CBID_cudaMemset, "cudaMemset", &p, NULL);
    if (count == FAKE_BAD_COUNT)
        return leave(&c, 1, 43);
    emit_memset(c.corr, devPtr, value, count, NULL, 0);
    return leave(&c, 0, 0);
}

EXPORT cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream) {
    struct cudaMemsetAsync_params p = {devPtr, value, count, stream};
    struct call c;
    enter(&c, CBID_cudaMemsetAsync, "cudaMemsetAsync", &p, NULL);
    if (count == FAKE_BAD_COUNT)
        return leave(&c, 1, 43);
    emit_memset(c.corr, devPtr, value, count, stream, 1);
    return leave(&c, 0, 0);
}

static void emit_sync(uint32_t corr, uint32_t type, uint32_t stream, uint64_t start) {
    if (!cupti.sync)
        return;
    struct fake_sync y = {
        .corr = corr,
        .context = FAKE_CONTEXT_ID,
        .stream = stream,
        .type = type,
        .event = SYNC_INVALID_VALUE,
        .result = 0,
        .start = start,
        .end = now(),
    };
    cupti.sync(&y);
}

/* FAKE_CUDA_STUCK=NAME: a launch of kernel NAME never completes. Its record goes to
 * CUPTI incomplete (a start, no end), so CUPTI holds its buffer back, and every later
 * cudaStreamSynchronize / cudaDeviceSynchronize waits forever, as on a GPU spinning in
 * that kernel. Other kernels complete as usual. */
static _Atomic int stuck;

static int is_stuck_kernel(const char *name) {
    const char *e = getenv("FAKE_CUDA_STUCK");
    return e && *e && name && strcmp(e, name) == 0;
}

static void wait_forever_if_stuck(void) {
    while (atomic_load(&stuck)) {
        struct timespec t = {.tv_sec = 0, .tv_nsec = 10 * 1000 * 1000};
        nanosleep(&t, NULL);
    }
}

EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    struct cudaStreamSynchronize_params p = {stream};
    struct call c;
    enter(&c, CBID_cudaStreamSynchronize, "cudaStreamSynchronize", &p, NULL);
    uint32_t id = stream_id(stream);
    if (id == 0)
        return leave(&c, 400, 44);
    nested_driver(CBID_cuStreamSynchronize, "cuStreamSynchronize", &p);
    wait_forever_if_stuck();
    emit_sync(c.corr, SYNC_TYPE_STREAM_SYNCHRONIZE, id, now());
    return leave(&c, 0, 0);
}

EXPORT cudaError_t cudaDeviceSynchronize(void) {
    struct cudaDeviceSynchronize_params p = {0};
    struct call c;
    enter(&c, CBID_cudaDeviceSynchronize, "cudaDeviceSynchronize", &p, NULL);
    wait_forever_if_stuck();
    emit_sync(c.corr, SYNC_TYPE_CONTEXT_SYNCHRONIZE, SYNC_INVALID_VALUE, now());
    return leave(&c, 0, 0);
}

EXPORT cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
                                    size_t sharedMem, cudaStream_t stream) {
    struct cudaLaunchKernel_params p = {func, gridDim, blockDim, args, sharedMem, stream};
    const char *name = (const char *)func;
    struct call c;
    enter(&c, CBID_cudaLaunchKernel, "cudaLaunchKernel", &p, name);
    if (gridDim.x == 0)
        return leave(&c, 9, 22);
    nested_driver(CBID_cuLaunchKernel, "cuLaunchKernel", &p);
    int never = is_stuck_kernel(name);
    if (never)
        atomic_store(&stuck, 1);
    if (cupti.kernel) {
        uint64_t start = now();
        /* FAKE_KERNEL_US: each kernel takes this long, the launch waiting for it (a GPU
         * kept busy back to back). */
        const char *us = getenv("FAKE_KERNEL_US");
        if (us && atoi(us) > 0)
            usleep((useconds_t)atoi(us));
        struct fake_kernel k =
            kernel_of(c.corr, stream, name, gridDim, blockDim, (uint32_t)sharedMem);
        k.start = start;
        k.end = never ? 0 : now();
        cupti.kernel(&k);
    }
    return leave(&c, 0, 0);
}

/* ---- CUDA graphs (see struct fake_graph in fake_cuda.h) ---- */
struct cudaGraphInstantiate_params {
    void **pGraphExec;
    const void *graph;
    unsigned long long flags;
};
struct cudaGraphUpload_params {
    const void *graphExec;
    cudaStream_t stream;
};
struct cudaGraphLaunch_params {
    const void *graphExec;
    cudaStream_t stream;
};

EXPORT cudaError_t cudaGraphInstantiate(void **exec, const void *graph, unsigned long long flags) {
    struct cudaGraphInstantiate_params p = {exec, graph, flags};
    struct call c;
    enter(&c, CBID_cudaGraphInstantiate, "cudaGraphInstantiate", &p, NULL);
    if (exec)
        *exec = (void *)graph;
    return leave(&c, 0, 0);
}

EXPORT cudaError_t cudaGraphUpload(const void *exec, cudaStream_t stream) {
    struct cudaGraphUpload_params p = {exec, stream};
    struct call c;
    enter(&c, CBID_cudaGraphUpload, "cudaGraphUpload", &p, NULL);
    return leave(&c, 0, 0);
}

EXPORT cudaError_t cudaGraphLaunch(const void *exec, cudaStream_t stream) {
    struct cudaGraphLaunch_params p = {exec, stream};
    const struct fake_graph *g = exec;
    struct call c;
    enter(&c, CBID_cudaGraphLaunch, "cudaGraphLaunch", &p, NULL);
    if (!g)
        return leave(&c, 400, 0);
    /* Graph-level tracing: one record for the replay, none for its nodes. */
    uint64_t replay_start = now();
    if (cupti.graph_trace) {
        for (uint32_t i = 1; i < g->nodes && g->gap_us > 0; i++)
            usleep((useconds_t)g->gap_us);
        struct fake_graph_trace r = {
            .corr = c.corr,
            .device = 0,
            .context = FAKE_CONTEXT_ID,
            .stream = stream_id(stream),
            .graph_id = g->id,
            .start = replay_start,
            .end = now(),
        };
        if (cupti.graph_trace(&r))
            return leave(&c, 0, 0);
    }
    for (uint32_t i = 0; cupti.kernel && i < g->nodes; i++) {
        if (i > 0 && g->gap_us > 0)
            usleep((useconds_t)g->gap_us);
        uint64_t start = now();
        struct fake_kernel k =
            kernel_of(c.corr, stream, g->name, (dim3){2, 1, 1}, (dim3){64, 1, 1}, 0);
        k.start = start;
        k.end = now();
        k.graph_id = g->id;
        k.graph_node_id = FAKE_GRAPH_NODE(g->id, i);
        cupti.kernel(&k);
    }
    return leave(&c, 0, 0);
}

/* ---- The driver API, called by the program itself (as JAX/XLA and cuBLAS do) ---- */

/* cuLaunchKernel's parameter struct, as CUPTI lays it out. */
struct cuLaunchKernel_params {
    const void *f;
    unsigned int gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ;
    unsigned int sharedMemBytes;
    cudaStream_t hStream;
    void **kernelParams;
    void **extra;
};
_Static_assert(offsetof(struct cuLaunchKernel_params, gridDimX) == 8, "cu launch grid");
_Static_assert(offsetof(struct cuLaunchKernel_params, blockDimZ) == 28, "cu launch block");

/* The fake's CUfunction is the kernel's name, as the fake runtime's `func` is. */
EXPORT int cuLaunchKernel(const void *f, unsigned int gx, unsigned int gy, unsigned int gz,
                          unsigned int bx, unsigned int by, unsigned int bz, unsigned int smem,
                          cudaStream_t stream, void **params, void **extra) {
    struct cuLaunchKernel_params p = {f, gx, gy, gz, bx, by, bz, smem, stream, params, extra};
    const char *name = (const char *)f;
    struct call c;
    driver_enter(&c, CBID_cuLaunchKernel, "cuLaunchKernel", &p, name);
    if (gx == 0)
        return leave(&c, 1, 0);
    if (cupti.kernel) {
        uint64_t start = now();
        struct fake_kernel k =
            kernel_of(c.corr, stream, name, (dim3){gx, gy, gz}, (dim3){bx, by, bz}, smem);
        k.start = start;
        k.end = now();
        cupti.kernel(&k);
    }
    return leave(&c, 0, 0);
}

struct cuMemcpyHtoDAsync_v2_params {
    uintptr_t dstDevice;
    const void *srcHost;
    size_t ByteCount;
    cudaStream_t hStream;
};

EXPORT int cuMemcpyHtoDAsync_v2(uintptr_t dst, const void *src, size_t count,
                                cudaStream_t stream) {
    struct cuMemcpyHtoDAsync_v2_params p = {dst, src, count, stream};
    struct call c;
    driver_enter(&c, CBID_cuMemcpyHtoDAsync_v2, "cuMemcpyHtoDAsync_v2", &p, NULL);
    emit_memcpy(c.corr, (void *)dst, src, count, cudaMemcpyHostToDevice, stream, 1, now());
    return leave(&c, 0, 0);
}

struct cuStreamSynchronize_params {
    cudaStream_t hStream;
};

EXPORT int cuStreamSynchronize(cudaStream_t stream) {
    struct cuStreamSynchronize_params p = {stream};
    struct call c;
    driver_enter(&c, CBID_cuStreamSynchronize, "cuStreamSynchronize", &p, NULL);
    uint32_t id = stream_id(stream);
    emit_sync(c.corr, SYNC_TYPE_STREAM_SYNCHRONIZE, id, now());
    return leave(&c, 0, 0);
}
