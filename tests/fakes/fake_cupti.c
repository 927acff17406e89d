/*
 * fake_cupti.c: a stand-in for NVIDIA's libcupti, for tests on machines without a GPU.
 *
 * Built as libcupti.so.13 (CUPTI 13.0 records), or with -DFAKE_CUPTI_12 as
 * libcupti.so.12 (CUPTI 12.0 records: Kernel9, Memcpy5, Memset4, Synchronization,
 * Device4, Memory3). It implements the CUPTI entry points a tracer uses, with their C
 * signatures and the semantics the CUPTI documentation gives them:
 *   - one callback subscriber at a time (a second cuptiSubscribe gets
 *     CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED until the first unsubscribes),
 *     callbacks enabled per (domain, cbid);
 *   - activity kinds enabled/disabled one by one; records of a disabled kind are not
 *     produced at all;
 *   - activity buffers come from the client's request callback and go back through
 *     its completion callback when full, on cuptiActivityFlushAll, and when the
 *     client re-registers its callbacks; cuptiActivityFlushPeriod's worker hands over
 *     only full buffers ("Periodic flush can return only those activity buffers which
 *     are full and have all the activity records completed"), and the fake hands a
 *     full buffer over as soon as it fills, so the period changes nothing here: a
 *     buffer that never fills waits for a flush; a record that finds no buffer (request gave NULL) is dropped and
 *     counted, and cuptiActivityGetNumDroppedRecords reports (and resets) the count;
 *   - cuptiActivitySetAttribute(CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER): unless
 *     the client promised zeroed buffers the fake clears each one it receives, as CUPTI
 *     does; when promised, it checks, and reports a non-zero buffer on stderr;
 *   - a kernel record with no end (the fake runtime's FAKE_CUDA_STUCK kernel, which
 *     never completes) is incomplete: a default or periodic flush does not hand over
 *     the buffer that holds it (nor anything else in that buffer); a forced flush
 *     (CUPTI_ACTIVITY_FLAG_FLUSH_FORCED) does, the record as it is (end 0), and the
 *     record is never handed over again (cupti_activity.h: a forced flush "returns all
 *     the activity buffers including the ones which have one or more incomplete
 *     activity records"); a buffer that fills up is handed over as it is;
 *   - cuptiActivityGetNextRecord walks a buffer record by record, each by the size of
 *     its kind's struct in this flavour, and says CUPTI_ERROR_MAX_LIMIT_REACHED at
 *     the end.
 * The fake runtime (fake_cudart.c) drives it through the fake_cupti_* functions.
 *
 * Internal calls never go through the exported CUPTI names: a preloaded tracer
 * exports some of those names too and would be called instead.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fake_cuda.h"

#define EXPORT __attribute__((visibility("default")))

/* ---- CUptiResult values (cupti-sys/src/bindings.rs) ---- */
typedef int CUptiResult;
#define CUPTI_SUCCESS 0
#define CUPTI_ERROR_INVALID_PARAMETER 1
#define CUPTI_ERROR_INVALID_OPERATION 7
#define CUPTI_ERROR_PARAMETER_SIZE_NOT_SUFFICIENT 10
#define CUPTI_ERROR_MAX_LIMIT_REACHED 12
#define CUPTI_ERROR_NOT_INITIALIZED 15
#define CUPTI_ERROR_INVALID_KIND 21
#define CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED 39
#define CUPTI_ERROR_UNKNOWN 999

typedef void *CUcontext;
typedef void *CUpti_SubscriberHandle;
typedef struct {
    uint32_t kind;
} CUpti_Activity;
typedef void (*CUpti_CallbackFunc)(void *userdata, uint32_t domain, uint32_t cbid,
                                   const void *cbdata);
typedef void (*CUpti_BuffersCallbackRequestFunc)(uint8_t **buffer, size_t *size,
                                                 size_t *maxNumRecords);
typedef void (*CUpti_BuffersCallbackCompleteFunc)(CUcontext context, uint32_t streamId,
                                                  uint8_t *buffer, size_t size,
                                                  size_t validSize);

/* ---- The flavour ---- */
#ifdef FAKE_CUPTI_12
#define FAKE_API_VERSION 18u /* cuptiGetVersion of CUPTI 12.0 */
#define KERNEL_SIZE 208      /* CUpti_ActivityKernel9 */
#define MEMCPY_SIZE 88       /* CUpti_ActivityMemcpy5 */
#define MEMSET_SIZE 88       /* CUpti_ActivityMemset4 */
#define SYNC_SIZE 40         /* CUpti_ActivitySynchronization */
#define DEVICE_SIZE 176      /* CUpti_ActivityDevice4 */
#define MEMORY_SIZE 120      /* CUpti_ActivityMemory3 */
#define GRAPH_SIZE 48        /* CUpti_ActivityGraphTrace */
#else
#define FAKE_API_VERSION 130001u /* cuptiGetVersion of CUPTI 13.0 */
#define KERNEL_SIZE 216          /* CUpti_ActivityKernel10 */
#define MEMCPY_SIZE 96           /* CUpti_ActivityMemcpy6 */
#define MEMSET_SIZE 88           /* CUpti_ActivityMemset4 */
#define SYNC_SIZE 56             /* CUpti_ActivitySynchronization2 */
#define DEVICE_SIZE 184          /* CUpti_ActivityDevice5 */
#define MEMORY_SIZE 128          /* CUpti_ActivityMemory4 */
#define GRAPH_SIZE 56            /* CUpti_ActivityGraphTrace2 */
#endif

/* ---- Record structs: the 13.0 layouts. A 12.0 record is the first *_SIZE bytes of
 * the same struct (cupti-sys/LAYOUTS.md: every 12.0 field sits where 13.0 has it);
 * fields that 12.0 lacks are cut off by the copy. ---- */
struct kernel_rec {
    uint32_t kind;
    uint8_t cacheConfig;
    uint8_t sharedMemoryConfig;
    uint16_t registersPerThread;
    int32_t partitionedGlobalCacheRequested;
    int32_t partitionedGlobalCacheExecuted;
    uint64_t start;
    uint64_t end;
    uint64_t completed;
    uint32_t deviceId;
    uint32_t contextId;
    uint32_t streamId;
    int32_t gridX, gridY, gridZ;
    int32_t blockX, blockY, blockZ;
    int32_t staticSharedMemory;
    int32_t dynamicSharedMemory;
    uint32_t localMemoryPerThread;
    uint32_t localMemoryTotal;
    uint32_t correlationId;
    int64_t gridId;
    const char *name;
    void *reserved0;
    uint64_t queued;
    uint64_t submitted;
    uint8_t launchType;
    uint8_t isSharedMemoryCarveoutRequested;
    uint8_t sharedMemoryCarveoutRequested;
    uint8_t padding;
    uint32_t sharedMemoryExecuted;
    uint64_t graphNodeId;
    uint32_t shmemLimitConfig;
    uint32_t graphId;
    void *pAccessPolicyWindow;
    uint32_t channelID;
    uint32_t channelType;
    uint32_t clusterX, clusterY, clusterZ;
    uint32_t clusterSchedulingPolicy;
    uint64_t localMemoryTotal_v2;
    uint32_t maxPotentialClusterSize;
    uint32_t maxActiveClusters;
    uint8_t isDeviceLaunched; /* 13.0 only */
    uint8_t padding3[7];
};
_Static_assert(sizeof(struct kernel_rec) == 216, "Kernel10 size");
_Static_assert(offsetof(struct kernel_rec, registersPerThread) == 6, "k regs");
_Static_assert(offsetof(struct kernel_rec, start) == 16, "k start");
_Static_assert(offsetof(struct kernel_rec, end) == 24, "k end");
_Static_assert(offsetof(struct kernel_rec, completed) == 32, "k completed");
_Static_assert(offsetof(struct kernel_rec, deviceId) == 40, "k device");
_Static_assert(offsetof(struct kernel_rec, contextId) == 44, "k context");
_Static_assert(offsetof(struct kernel_rec, streamId) == 48, "k stream");
_Static_assert(offsetof(struct kernel_rec, gridX) == 52, "k gridX");
_Static_assert(offsetof(struct kernel_rec, gridZ) == 60, "k gridZ");
_Static_assert(offsetof(struct kernel_rec, blockX) == 64, "k blockX");
_Static_assert(offsetof(struct kernel_rec, blockZ) == 72, "k blockZ");
_Static_assert(offsetof(struct kernel_rec, staticSharedMemory) == 76, "k smem");
_Static_assert(offsetof(struct kernel_rec, dynamicSharedMemory) == 80, "k dsmem");
_Static_assert(offsetof(struct kernel_rec, correlationId) == 92, "k corr");
_Static_assert(offsetof(struct kernel_rec, gridId) == 96, "k gridId");
_Static_assert(offsetof(struct kernel_rec, name) == 104, "k name");
_Static_assert(offsetof(struct kernel_rec, queued) == 120, "k queued");
_Static_assert(offsetof(struct kernel_rec, launchType) == 136, "k launchType");
_Static_assert(offsetof(struct kernel_rec, graphNodeId) == 144, "k graphNodeId");
_Static_assert(offsetof(struct kernel_rec, graphId) == 156, "k graphId");
_Static_assert(offsetof(struct kernel_rec, channelID) == 168, "k channel");
_Static_assert(offsetof(struct kernel_rec, clusterX) == 176, "k cluster");
_Static_assert(offsetof(struct kernel_rec, localMemoryTotal_v2) == 192, "k lmt2");
_Static_assert(offsetof(struct kernel_rec, maxActiveClusters) == 204, "k mac");
_Static_assert(offsetof(struct kernel_rec, isDeviceLaunched) == 208, "k devlaunched");

struct memcpy_rec {
    uint32_t kind;
    uint8_t copyKind;
    uint8_t srcKind;
    uint8_t dstKind;
    uint8_t flags;
    uint64_t bytes;
    uint64_t start;
    uint64_t end;
    uint32_t deviceId;
    uint32_t contextId;
    uint32_t streamId;
    uint32_t correlationId;
    uint32_t runtimeCorrelationId;
    uint32_t pad;
    void *reserved0;
    uint64_t graphNodeId;
    uint32_t graphId;
    uint32_t channelID;
    uint32_t channelType;
    uint8_t isDeviceLaunched; /* 13.0 only (padding in 12.x) */
    uint8_t pad2[3];
    uint64_t copyCount; /* 12.8+ */
};
_Static_assert(sizeof(struct memcpy_rec) == 96, "Memcpy6 size");
_Static_assert(offsetof(struct memcpy_rec, copyKind) == 4, "c copyKind");
_Static_assert(offsetof(struct memcpy_rec, srcKind) == 5, "c srcKind");
_Static_assert(offsetof(struct memcpy_rec, dstKind) == 6, "c dstKind");
_Static_assert(offsetof(struct memcpy_rec, flags) == 7, "c flags");
_Static_assert(offsetof(struct memcpy_rec, bytes) == 8, "c bytes");
_Static_assert(offsetof(struct memcpy_rec, start) == 16, "c start");
_Static_assert(offsetof(struct memcpy_rec, end) == 24, "c end");
_Static_assert(offsetof(struct memcpy_rec, deviceId) == 32, "c device");
_Static_assert(offsetof(struct memcpy_rec, streamId) == 40, "c stream");
_Static_assert(offsetof(struct memcpy_rec, correlationId) == 44, "c corr");
_Static_assert(offsetof(struct memcpy_rec, runtimeCorrelationId) == 48, "c rcorr");
_Static_assert(offsetof(struct memcpy_rec, graphNodeId) == 64, "c graphNodeId");
_Static_assert(offsetof(struct memcpy_rec, graphId) == 72, "c graphId");
_Static_assert(offsetof(struct memcpy_rec, channelType) == 80, "c channelType");
_Static_assert(offsetof(struct memcpy_rec, isDeviceLaunched) == 84, "c devlaunched");
_Static_assert(offsetof(struct memcpy_rec, copyCount) == 88, "c copyCount");

struct memset_rec {
    uint32_t kind;
    uint32_t value;
    uint64_t bytes;
    uint64_t start;
    uint64_t end;
    uint32_t deviceId;
    uint32_t contextId;
    uint32_t streamId;
    uint32_t correlationId;
    uint16_t flags;
    uint16_t memoryKind;
    uint32_t pad;
    void *reserved0;
    uint64_t graphNodeId;
    uint32_t graphId;
    uint32_t channelID;
    uint32_t channelType;
    uint8_t isDeviceLaunched; /* 13.0 only (padding in 12.x) */
    uint8_t pad2[3];
};
_Static_assert(sizeof(struct memset_rec) == 88, "Memset4 size");
_Static_assert(offsetof(struct memset_rec, value) == 4, "s value");
_Static_assert(offsetof(struct memset_rec, bytes) == 8, "s bytes");
_Static_assert(offsetof(struct memset_rec, start) == 16, "s start");
_Static_assert(offsetof(struct memset_rec, end) == 24, "s end");
_Static_assert(offsetof(struct memset_rec, deviceId) == 32, "s device");
_Static_assert(offsetof(struct memset_rec, streamId) == 40, "s stream");
_Static_assert(offsetof(struct memset_rec, correlationId) == 44, "s corr");
_Static_assert(offsetof(struct memset_rec, flags) == 48, "s flags");
_Static_assert(offsetof(struct memset_rec, memoryKind) == 50, "s memoryKind");
_Static_assert(offsetof(struct memset_rec, graphId) == 72, "s graphId");
_Static_assert(offsetof(struct memset_rec, isDeviceLaunched) == 84, "s devlaunched");

struct sync_rec {
    uint32_t kind;
    uint32_t type;
    uint64_t start;
    uint64_t end;
    uint32_t correlationId;
    uint32_t contextId;
    uint32_t streamId;
    uint32_t cudaEventId;
    uint64_t cudaEventSyncId; /* 12.8+ */
    uint32_t returnValue;     /* 12.8+ */
    uint32_t pad;
};
_Static_assert(sizeof(struct sync_rec) == 56, "Synchronization2 size");
_Static_assert(offsetof(struct sync_rec, type) == 4, "y type");
_Static_assert(offsetof(struct sync_rec, start) == 8, "y start");
_Static_assert(offsetof(struct sync_rec, end) == 16, "y end");
_Static_assert(offsetof(struct sync_rec, correlationId) == 24, "y corr");
_Static_assert(offsetof(struct sync_rec, contextId) == 28, "y context");
_Static_assert(offsetof(struct sync_rec, streamId) == 32, "y stream");
_Static_assert(offsetof(struct sync_rec, cudaEventId) == 36, "y event");
_Static_assert(offsetof(struct sync_rec, cudaEventSyncId) == 40, "y eventSync");
_Static_assert(offsetof(struct sync_rec, returnValue) == 48, "y returnValue");

struct device_rec {
    uint32_t kind;
    uint32_t flags;
    uint64_t globalMemoryBandwidth;
    uint64_t globalMemorySize;
    uint32_t constantMemorySize;
    uint32_t l2CacheSize;
    uint32_t numThreadsPerWarp;
    uint32_t coreClockRate;
    uint32_t numMemcpyEngines;
    uint32_t numMultiprocessors;
    uint32_t maxIPC;
    uint32_t maxWarpsPerMultiprocessor;
    uint32_t maxBlocksPerMultiprocessor;
    uint32_t maxSharedMemoryPerMultiprocessor;
    uint32_t maxRegistersPerMultiprocessor;
    uint32_t maxRegistersPerBlock;
    uint32_t maxSharedMemoryPerBlock;
    uint32_t maxThreadsPerBlock;
    uint32_t maxBlockDimX, maxBlockDimY, maxBlockDimZ;
    uint32_t maxGridDimX, maxGridDimY, maxGridDimZ;
    uint32_t computeCapabilityMajor;
    uint32_t computeCapabilityMinor;
    uint32_t id;
    uint32_t eccEnabled;
    uint8_t uuid[16];
    const char *name;
    uint8_t isCudaVisible;
    uint8_t isMigEnabled;
    uint8_t reserved[6];
    uint32_t gpuInstanceId;
    uint32_t computeInstanceId;
    uint8_t migUuid[16];
    uint32_t isNumaNode; /* Device5 (12.4+) */
    uint32_t numaId;     /* Device5 (12.4+) */
};
_Static_assert(sizeof(struct device_rec) == 184, "Device5 size");
_Static_assert(offsetof(struct device_rec, globalMemorySize) == 16, "d gmem");
_Static_assert(offsetof(struct device_rec, numThreadsPerWarp) == 32, "d tpw");
_Static_assert(offsetof(struct device_rec, numMultiprocessors) == 44, "d sms");
_Static_assert(offsetof(struct device_rec, maxWarpsPerMultiprocessor) == 52, "d wps");
_Static_assert(offsetof(struct device_rec, maxBlocksPerMultiprocessor) == 56, "d bps");
_Static_assert(offsetof(struct device_rec, maxSharedMemoryPerMultiprocessor) == 60, "d smps");
_Static_assert(offsetof(struct device_rec, maxRegistersPerMultiprocessor) == 64, "d rps");
_Static_assert(offsetof(struct device_rec, maxGridDimZ) == 100, "d gridz");
_Static_assert(offsetof(struct device_rec, computeCapabilityMajor) == 104, "d ccmaj");
_Static_assert(offsetof(struct device_rec, computeCapabilityMinor) == 108, "d ccmin");
_Static_assert(offsetof(struct device_rec, id) == 112, "d id");
_Static_assert(offsetof(struct device_rec, uuid) == 120, "d uuid");
_Static_assert(offsetof(struct device_rec, name) == 136, "d name");
_Static_assert(offsetof(struct device_rec, isCudaVisible) == 144, "d visible");
_Static_assert(offsetof(struct device_rec, gpuInstanceId) == 152, "d gi");
_Static_assert(offsetof(struct device_rec, migUuid) == 160, "d miguuid");
_Static_assert(offsetof(struct device_rec, isNumaNode) == 176, "d numa");

struct memory_rec {
    uint32_t kind;
    uint32_t memoryOperationType;
    uint32_t memoryKind;
    uint32_t correlationId;
    uint64_t address;
    uint64_t bytes;
    uint64_t timestamp;
    uint64_t PC;
    uint32_t processId;
    uint32_t deviceId;
    uint32_t contextId;
    uint32_t streamId;
    const char *name;
    uint32_t isAsync;
    uint32_t pad1;
    uint8_t memoryPoolConfig[40];
    const char *source; /* Memory4 (12.6+) */
};
_Static_assert(sizeof(struct memory_rec) == 128, "Memory4 size");
_Static_assert(offsetof(struct memory_rec, memoryOperationType) == 4, "m op");
_Static_assert(offsetof(struct memory_rec, memoryKind) == 8, "m kind");
_Static_assert(offsetof(struct memory_rec, correlationId) == 12, "m corr");
_Static_assert(offsetof(struct memory_rec, address) == 16, "m address");
_Static_assert(offsetof(struct memory_rec, bytes) == 24, "m bytes");
_Static_assert(offsetof(struct memory_rec, timestamp) == 32, "m ts");
_Static_assert(offsetof(struct memory_rec, processId) == 48, "m pid");
_Static_assert(offsetof(struct memory_rec, deviceId) == 52, "m device");
_Static_assert(offsetof(struct memory_rec, streamId) == 60, "m stream");
_Static_assert(offsetof(struct memory_rec, name) == 64, "m name");
_Static_assert(offsetof(struct memory_rec, memoryPoolConfig) == 80, "m pool");
_Static_assert(offsetof(struct memory_rec, source) == 120, "m source");

/* CUpti_ActivityGraphTrace2 (13.0); the 12.x CUpti_ActivityGraphTrace is its first 48
 * bytes (no endDeviceId / endContextId). */
struct graph_rec {
    uint32_t kind;
    uint32_t correlationId;
    uint64_t start;
    uint64_t end;
    uint32_t deviceId;
    uint32_t graphId;
    uint32_t contextId;
    uint32_t streamId;
    void *reserved;
    uint32_t endDeviceId;
    uint32_t endContextId;
};
_Static_assert(sizeof(struct graph_rec) == 56, "GraphTrace2 size");
_Static_assert(offsetof(struct graph_rec, deviceId) == 24, "g device");
_Static_assert(offsetof(struct graph_rec, graphId) == 28, "g graph");
_Static_assert(offsetof(struct graph_rec, streamId) == 36, "g stream");
_Static_assert(GRAPH_SIZE <= sizeof(struct graph_rec) && GRAPH_SIZE % 8 == 0, "graph size");

_Static_assert(KERNEL_SIZE <= sizeof(struct kernel_rec), "kernel size");
_Static_assert(MEMCPY_SIZE <= sizeof(struct memcpy_rec), "memcpy size");
_Static_assert(SYNC_SIZE <= sizeof(struct sync_rec), "sync size");
_Static_assert(DEVICE_SIZE <= sizeof(struct device_rec), "device size");
_Static_assert(MEMORY_SIZE <= sizeof(struct memory_rec), "memory size");
_Static_assert(KERNEL_SIZE % 8 == 0 && MEMCPY_SIZE % 8 == 0 && MEMSET_SIZE % 8 == 0 &&
                   SYNC_SIZE % 8 == 0 && DEVICE_SIZE % 8 == 0 && MEMORY_SIZE % 8 == 0,
               "records keep 8-byte alignment");

/* CUpti_CallbackData (declared in fake_cuda.h) */
_Static_assert(sizeof(struct fake_callback_data) == 72, "CUpti_CallbackData size");
_Static_assert(offsetof(struct fake_callback_data, functionName) == 8, "cb functionName");
_Static_assert(offsetof(struct fake_callback_data, functionParams) == 16, "cb functionParams");
_Static_assert(offsetof(struct fake_callback_data, functionReturnValue) == 24, "cb ret");
_Static_assert(offsetof(struct fake_callback_data, symbolName) == 32, "cb symbolName");
_Static_assert(offsetof(struct fake_callback_data, context) == 40, "cb context");
_Static_assert(offsetof(struct fake_callback_data, contextUid) == 48, "cb contextUid");
_Static_assert(offsetof(struct fake_callback_data, correlationData) == 56, "cb corrData");
_Static_assert(offsetof(struct fake_callback_data, correlationId) == 64, "cb corrId");

/* ---- State ----
 * One recursive lock guards everything below; it is held while the client's buffer
 * callbacks run (they may call back into CUPTI, e.g. for the dropped count), never
 * while the API callback runs. */
static pthread_mutex_t mu = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;

static CUpti_BuffersCallbackRequestFunc req_cb;
static CUpti_BuffersCallbackCompleteFunc done_cb;
static uint8_t *cur_buf;
static size_t cur_size, cur_used, cur_records, cur_max_records;
static size_t cur_incomplete; /* incomplete records in cur_buf */
static size_t dropped;
static uint64_t kinds_enabled; /* bit per activity kind (all the fake knows are < 64) */

#define N_DOMAINS 8
#define N_CBIDS 1024
static struct {
    int active;
    CUpti_CallbackFunc cb;
    void *userdata;
} sub;
static uint8_t cb_enabled[N_DOMAINS][N_CBIDS];

/* CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER: the client promises zeroed buffers,
 * so CUPTI need not clear them. The fake clears buffers itself unless promised, and
 * checks the promise when given (a broken promise is reported on stderr). */
#define ATTR_ZEROED_OUT_ACTIVITY_BUFFER 5
static int zeroed_promised;
static int reported_unzeroed;

static _Atomic uint32_t flush_period_ms;

static uint64_t realtime_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* CUPTI's clock. FAKE_CUPTI_TICKS_PER_NS: ticks at that rate from 1e12 at the library's
 * load instead of CLOCK_REALTIME ns, as after torch.profiler registers its TSC timestamp
 * callback; every record and cuptiGetTimestamp read it. */
static double clock_rate;
static uint64_t clock_origin;
static pthread_once_t clock_once = PTHREAD_ONCE_INIT;
static void clock_init(void) {
    const char *e = getenv("FAKE_CUPTI_TICKS_PER_NS");
    clock_rate = e ? atof(e) : 0.0;
    clock_origin = realtime_ns();
}
static uint64_t cupti_clock(void) {
    pthread_once(&clock_once, clock_init);
    uint64_t now = realtime_ns();
    if (clock_rate <= 0.0)
        return now;
    return 1000000000000ull + (uint64_t)((double)(now - clock_origin) * clock_rate);
}

static size_t record_size(uint32_t kind) {
    switch (kind) {
    case FAKE_KIND_CONCURRENT_KERNEL:
        return KERNEL_SIZE;
    case FAKE_KIND_MEMCPY:
        return MEMCPY_SIZE;
    case FAKE_KIND_MEMSET:
        return MEMSET_SIZE;
    case FAKE_KIND_SYNCHRONIZATION:
        return SYNC_SIZE;
    case FAKE_KIND_DEVICE:
        return DEVICE_SIZE;
    case FAKE_KIND_MEMORY2:
        return MEMORY_SIZE;
    case FAKE_KIND_GRAPH_TRACE:
        return GRAPH_SIZE;
    default:
        return 0;
    }
}

/* Hands the current buffer back to the client (even when empty). Lock held. */
static void deliver_locked(void) {
    uint8_t *b = cur_buf;
    size_t size = cur_size, used = cur_used;
    cur_buf = NULL;
    cur_size = cur_used = cur_records = cur_max_records = 0;
    cur_incomplete = 0;
    if (b && done_cb)
        done_cb(NULL, 0, b, size, used);
}

/* Makes room for one record of `need` bytes; 0 when there is no buffer. Lock held. */
static int ensure_space_locked(size_t need) {
    if (cur_buf && cur_used + need <= cur_size &&
        (cur_max_records == 0 || cur_records < cur_max_records))
        return 1;
    if (cur_buf)
        deliver_locked();
    if (!req_cb)
        return 0;
    uint8_t *b = NULL;
    size_t size = 0, max_records = 0;
    req_cb(&b, &size, &max_records);
    if (!b)
        return 0;
    if (size < need || ((uintptr_t)b & 7) != 0) {
        /* Unusable (too small, or not 8-byte aligned as CUPTI requires): give it back. */
        if (done_cb)
            done_cb(NULL, 0, b, size, 0);
        return 0;
    }
    if (!zeroed_promised) {
        memset(b, 0, size);
    } else if (b[0] != 0 || memcmp(b, b + 1, size - 1) != 0) {
        if (!reported_unzeroed) {
            reported_unzeroed = 1;
            size_t at = 0;
            while (at < size && b[at] == 0)
                at++;
            fprintf(stderr,
                    "fake_cupti: a buffer promised zeroed (ZEROED_OUT_ACTIVITY_BUFFER) has "
                    "byte %zu = 0x%02x of %zu\n",
                    at, b[at], size);
        }
        memset(b, 0, size);
    }
    cur_buf = b;
    cur_size = size;
    cur_used = 0;
    cur_records = 0;
    cur_max_records = max_records;
    return 1;
}

static void emit(uint32_t kind, const void *rec, size_t size) {
    pthread_mutex_lock(&mu);
    if (kinds_enabled & (1ull << kind)) {
        if (ensure_space_locked(size)) {
            memcpy(cur_buf + cur_used, rec, size);
            cur_used += size;
            cur_records++;
            if (kind == FAKE_KIND_CONCURRENT_KERNEL &&
                ((const struct kernel_rec *)rec)->end == 0)
                cur_incomplete++;
        } else {
            dropped++;
        }
    }
    pthread_mutex_unlock(&mu);
}

static void flush_all(int forced) {
    pthread_mutex_lock(&mu);
    if (cur_buf && cur_used > 0 && (forced || cur_incomplete == 0))
        deliver_locked();
    pthread_mutex_unlock(&mu);
}


/* ======================= CUPTI entry points ======================= */

EXPORT CUptiResult cuptiGetVersion(uint32_t *version) {
    if (!version)
        return CUPTI_ERROR_INVALID_PARAMETER;
    *version = FAKE_API_VERSION;
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiGetResultString(CUptiResult result, const char **str) {
    if (!str)
        return CUPTI_ERROR_INVALID_PARAMETER;
    switch (result) {
    case CUPTI_SUCCESS:
        *str = "CUPTI_SUCCESS";
        break;
    case CUPTI_ERROR_INVALID_PARAMETER:
        *str = "CUPTI_ERROR_INVALID_PARAMETER";
        break;
    case CUPTI_ERROR_INVALID_OPERATION:
        *str = "CUPTI_ERROR_INVALID_OPERATION";
        break;
    case CUPTI_ERROR_PARAMETER_SIZE_NOT_SUFFICIENT:
        *str = "CUPTI_ERROR_PARAMETER_SIZE_NOT_SUFFICIENT";
        break;
    case CUPTI_ERROR_MAX_LIMIT_REACHED:
        *str = "CUPTI_ERROR_MAX_LIMIT_REACHED";
        break;
    case CUPTI_ERROR_NOT_INITIALIZED:
        *str = "CUPTI_ERROR_NOT_INITIALIZED";
        break;
    case CUPTI_ERROR_INVALID_KIND:
        *str = "CUPTI_ERROR_INVALID_KIND";
        break;
    case CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED:
        *str = "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED";
        break;
    case CUPTI_ERROR_UNKNOWN:
        *str = "CUPTI_ERROR_UNKNOWN";
        break;
    default:
        return CUPTI_ERROR_INVALID_PARAMETER;
    }
    return CUPTI_SUCCESS;
}

/* The device of every context: FAKE_CUPTI_DEVICE (0 when unset). */
static uint32_t fake_device(void) {
    const char *e = getenv("FAKE_CUPTI_DEVICE");
    return e ? (uint32_t)strtoul(e, NULL, 10) : 0;
}
EXPORT CUptiResult cuptiGetDeviceId(void *context, uint32_t *device) {
    if (!context || !device) return CUPTI_ERROR_INVALID_PARAMETER;
    *device = fake_device();
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiGetTimestamp(uint64_t *timestamp) {
    if (!timestamp)
        return CUPTI_ERROR_INVALID_PARAMETER;
    *timestamp = cupti_clock();
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiSubscribe(CUpti_SubscriberHandle *subscriber, CUpti_CallbackFunc callback,
                                  void *userdata) {
    if (!subscriber)
        return CUPTI_ERROR_INVALID_PARAMETER;
    pthread_mutex_lock(&mu);
    if (sub.active) {
        pthread_mutex_unlock(&mu);
        return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
    }
    sub.active = 1;
    sub.cb = callback;
    sub.userdata = userdata;
    memset(cb_enabled, 0, sizeof cb_enabled);
    *subscriber = (CUpti_SubscriberHandle)&sub;
    pthread_mutex_unlock(&mu);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiUnsubscribe(CUpti_SubscriberHandle subscriber) {
    pthread_mutex_lock(&mu);
    if (subscriber != (CUpti_SubscriberHandle)&sub || !sub.active) {
        pthread_mutex_unlock(&mu);
        return CUPTI_ERROR_INVALID_PARAMETER;
    }
    sub.active = 0;
    sub.cb = NULL;
    sub.userdata = NULL;
    memset(cb_enabled, 0, sizeof cb_enabled);
    pthread_mutex_unlock(&mu);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiEnableCallback(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                       uint32_t domain, uint32_t cbid) {
    pthread_mutex_lock(&mu);
    CUptiResult r = CUPTI_SUCCESS;
    if (subscriber != (CUpti_SubscriberHandle)&sub || !sub.active || domain == 0 ||
        domain >= N_DOMAINS || cbid >= N_CBIDS)
        r = CUPTI_ERROR_INVALID_PARAMETER;
    else
        cb_enabled[domain][cbid] = enable ? 1 : 0;
    pthread_mutex_unlock(&mu);
    return r;
}

EXPORT CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc request,
                                                  CUpti_BuffersCallbackCompleteFunc complete) {
    if (!request || !complete)
        return CUPTI_ERROR_INVALID_PARAMETER;
    pthread_mutex_lock(&mu);
    /* A buffer handed out by the previous client goes back to that client. */
    if (cur_buf)
        deliver_locked();
    req_cb = request;
    done_cb = complete;
    pthread_mutex_unlock(&mu);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityEnable(uint32_t kind) {
    if (record_size(kind) == 0)
        return CUPTI_ERROR_INVALID_KIND;
    pthread_mutex_lock(&mu);
    kinds_enabled |= 1ull << kind;
    pthread_mutex_unlock(&mu);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityDisable(uint32_t kind) {
    if (record_size(kind) == 0)
        return CUPTI_ERROR_INVALID_KIND;
    pthread_mutex_lock(&mu);
    kinds_enabled &= ~(1ull << kind);
    pthread_mutex_unlock(&mu);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityFlushAll(uint32_t flag) {
    /* A default flush (0) hands over the buffer unless a record in it is incomplete; a
     * forced one (CUPTI_ACTIVITY_FLAG_FLUSH_FORCED, 1) hands it over whatever it holds. */
    flush_all((flag & 1) != 0);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityFlushPeriod(uint32_t time_ms) {
    atomic_store(&flush_period_ms, time_ms);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivitySetAttribute(uint32_t attr, size_t *valueSize, void *value) {
    if (!valueSize || !value)
        return CUPTI_ERROR_INVALID_PARAMETER;
    switch (attr) {
    case ATTR_ZEROED_OUT_ACTIVITY_BUFFER:
        if (*valueSize < sizeof(uint8_t))
            return CUPTI_ERROR_PARAMETER_SIZE_NOT_SUFFICIENT;
        pthread_mutex_lock(&mu);
        zeroed_promised = *(const uint8_t *)value != 0;
        pthread_mutex_unlock(&mu);
        return CUPTI_SUCCESS;
    case 0: /* DEVICE_BUFFER_SIZE */
    case 1: /* DEVICE_BUFFER_SIZE_CDP */
    case 2: /* DEVICE_BUFFER_POOL_LIMIT */
    case 3: /* PROFILING_SEMAPHORE_POOL_SIZE */
    case 4: /* PROFILING_SEMAPHORE_POOL_LIMIT */
        /* Device-side buffers: nothing to do in a fake without a device. */
        return *valueSize < sizeof(size_t) ? CUPTI_ERROR_PARAMETER_SIZE_NOT_SUFFICIENT
                                           : CUPTI_SUCCESS;
    default:
        return CUPTI_ERROR_INVALID_PARAMETER;
    }
}

EXPORT CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext context, uint32_t streamId,
                                                     size_t *dropped_out) {
    (void)context;
    (void)streamId;
    if (!dropped_out)
        return CUPTI_ERROR_INVALID_PARAMETER;
    pthread_mutex_lock(&mu);
    *dropped_out = dropped;
    dropped = 0; /* the count is reset by every call */
    pthread_mutex_unlock(&mu);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityGetNextRecord(uint8_t *buffer, size_t validBufferSizeBytes,
                                              CUpti_Activity **record) {
    if (!buffer || !record)
        return CUPTI_ERROR_INVALID_PARAMETER;
    size_t off = 0;
    if (*record) {
        uint8_t *p = (uint8_t *)*record;
        if (p < buffer || p >= buffer + validBufferSizeBytes)
            return CUPTI_ERROR_INVALID_PARAMETER;
        uint32_t kind;
        memcpy(&kind, p, sizeof kind);
        size_t size = record_size(kind);
        if (size == 0)
            return CUPTI_ERROR_INVALID_KIND;
        off = (size_t)(p - buffer) + size;
    }
    if (off >= validBufferSizeBytes)
        return CUPTI_ERROR_MAX_LIMIT_REACHED;
    uint32_t kind;
    memcpy(&kind, buffer + off, sizeof kind);
    size_t size = record_size(kind);
    if (size == 0)
        return CUPTI_ERROR_INVALID_KIND;
    if (off + size > validBufferSizeBytes)
        return CUPTI_ERROR_INVALID_PARAMETER;
    *record = (CUpti_Activity *)(buffer + off);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiFinalize(void) {
    pthread_mutex_lock(&mu);
    if (cur_buf)
        deliver_locked();
    kinds_enabled = 0;
    sub.active = 0;
    sub.cb = NULL;
    sub.userdata = NULL;
    memset(cb_enabled, 0, sizeof cb_enabled);
    req_cb = NULL;
    done_cb = NULL;
    zeroed_promised = 0;
    atomic_store(&flush_period_ms, 0);
    pthread_mutex_unlock(&mu);
    return CUPTI_SUCCESS;
}

/* ======================= Control interface for the fake runtime ======================= */

EXPORT uint64_t fake_cupti_now(void) { return cupti_clock(); }

EXPORT int fake_cupti_api(uint32_t domain, uint32_t cbid, uint32_t site, uint32_t corr,
                          const char *function_name, const char *symbol_name,
                          const void *params, const void *return_value,
                          uint64_t *correlation_data) {
    pthread_mutex_lock(&mu);
    int on = sub.active && domain < N_DOMAINS && cbid < N_CBIDS && cb_enabled[domain][cbid];
    CUpti_CallbackFunc cb = sub.cb;
    void *userdata = sub.userdata;
    pthread_mutex_unlock(&mu);
    if (!on || !cb)
        return 0;
    struct fake_callback_data d = {
        .callbackSite = site,
        .functionName = function_name,
        .functionParams = params,
        .functionReturnValue = return_value,
        .symbolName = symbol_name,
        .context = (CUcontext)(uintptr_t)0xC0C0000,
        .contextUid = FAKE_CONTEXT_ID,
        .correlationData = correlation_data,
        .correlationId = corr,
    };
    cb(userdata, domain, cbid, &d);
    return 1;
}

EXPORT void fake_cupti_emit_kernel(const struct fake_kernel *k) {
    struct kernel_rec r;
    memset(&r, 0, sizeof r);
    r.kind = FAKE_KIND_CONCURRENT_KERNEL;
    r.cacheConfig = 0x11;
    r.registersPerThread = k->registers;
    r.start = k->start;
    r.end = k->end;
    r.completed = k->end;
    r.deviceId = k->device;
    r.contextId = k->context;
    r.streamId = k->stream;
    r.gridX = (int32_t)k->grid[0];
    r.gridY = (int32_t)k->grid[1];
    r.gridZ = (int32_t)k->grid[2];
    r.blockX = (int32_t)k->block[0];
    r.blockY = (int32_t)k->block[1];
    r.blockZ = (int32_t)k->block[2];
    r.staticSharedMemory = (int32_t)k->static_smem;
    r.dynamicSharedMemory = (int32_t)k->dynamic_smem;
    r.correlationId = k->corr;
    r.gridId = (int64_t)k->corr * 10;
    r.name = k->name;
    r.graphId = k->graph_id;
    r.graphNodeId = k->graph_node_id;
    r.channelType = 1;
    r.clusterX = r.clusterY = r.clusterZ = 1;
    r.isDeviceLaunched = 0;
    emit(r.kind, &r, KERNEL_SIZE);
}

EXPORT void fake_cupti_emit_memcpy(const struct fake_memcpy *c) {
    struct memcpy_rec r;
    memset(&r, 0, sizeof r);
    r.kind = FAKE_KIND_MEMCPY;
    r.copyKind = c->copy_kind;
    r.srcKind = c->src_kind;
    r.dstKind = c->dst_kind;
    r.flags = c->flags;
    r.bytes = c->bytes;
    r.start = c->start;
    r.end = c->end;
    r.deviceId = c->device;
    r.contextId = c->context;
    r.streamId = c->stream;
    r.correlationId = c->corr;
    r.runtimeCorrelationId = c->corr;
    r.copyCount = 1;
    emit(r.kind, &r, MEMCPY_SIZE);
}

EXPORT void fake_cupti_emit_memset(const struct fake_memset *s) {
    struct memset_rec r;
    memset(&r, 0, sizeof r);
    r.kind = FAKE_KIND_MEMSET;
    r.value = s->value;
    r.bytes = s->bytes;
    r.start = s->start;
    r.end = s->end;
    r.deviceId = s->device;
    r.contextId = s->context;
    r.streamId = s->stream;
    r.correlationId = s->corr;
    r.flags = s->flags;
    r.memoryKind = s->mem_kind;
    emit(r.kind, &r, MEMSET_SIZE);
}

EXPORT void fake_cupti_emit_sync(const struct fake_sync *y) {
    struct sync_rec r;
    memset(&r, 0, sizeof r);
    r.kind = FAKE_KIND_SYNCHRONIZATION;
    r.type = y->type;
    r.start = y->start;
    r.end = y->end;
    r.correlationId = y->corr;
    r.contextId = y->context;
    r.streamId = y->stream;
    r.cudaEventId = y->event;
    r.cudaEventSyncId = 0xFFFFFFFFFFFFFFFFull;
    r.returnValue = y->result;
    emit(r.kind, &r, SYNC_SIZE);
}

EXPORT int fake_cupti_emit_graph_trace(const struct fake_graph_trace *g) {
    pthread_mutex_lock(&mu);
    int on = (kinds_enabled & (1ull << FAKE_KIND_GRAPH_TRACE)) != 0;
    pthread_mutex_unlock(&mu);
    if (!on)
        return 0;
    struct graph_rec r;
    memset(&r, 0, sizeof r);
    r.kind = FAKE_KIND_GRAPH_TRACE;
    r.correlationId = g->corr;
    r.start = g->start;
    r.end = g->end;
    r.deviceId = g->device;
    r.graphId = g->graph_id;
    r.contextId = g->context;
    r.streamId = g->stream;
    r.endDeviceId = g->device;
    r.endContextId = g->context;
    emit(r.kind, &r, GRAPH_SIZE);
    return 1;
}

EXPORT void fake_cupti_emit_device(const struct fake_device *d) {
    struct device_rec r;
    memset(&r, 0, sizeof r);
    r.kind = FAKE_KIND_DEVICE;
    r.globalMemoryBandwidth = 4800000000ull;
    r.globalMemorySize = d->global_memory;
    r.constantMemorySize = 65536;
    r.l2CacheSize = 50u << 20;
    r.numThreadsPerWarp = d->threads_per_warp;
    r.coreClockRate = 1980000;
    r.numMemcpyEngines = 3;
    r.numMultiprocessors = d->sm_count;
    r.maxIPC = 4;
    r.maxWarpsPerMultiprocessor = d->max_warps_per_sm;
    r.maxBlocksPerMultiprocessor = d->max_blocks_per_sm;
    r.maxSharedMemoryPerMultiprocessor = d->max_smem_per_sm;
    r.maxRegistersPerMultiprocessor = d->max_regs_per_sm;
    r.maxRegistersPerBlock = 65536;
    r.maxSharedMemoryPerBlock = 49152;
    r.maxThreadsPerBlock = 1024;
    r.maxBlockDimX = 1024;
    r.maxBlockDimY = 1024;
    r.maxBlockDimZ = 64;
    r.maxGridDimX = 0x7fffffff;
    r.maxGridDimY = 65535;
    r.maxGridDimZ = 65535;
    r.computeCapabilityMajor = d->cc_major;
    r.computeCapabilityMinor = d->cc_minor;
    r.id = d->id;
    r.eccEnabled = 1;
    for (int i = 0; i < 16; i++)
        r.uuid[i] = (uint8_t)(0xA0 + i);
    r.name = d->name;
    r.isCudaVisible = 1;
    r.isNumaNode = 0;
    r.numaId = 0xFFFFFFFFu;
    emit(r.kind, &r, DEVICE_SIZE);
}

EXPORT void fake_cupti_emit_memory(const struct fake_memory *m) {
    struct memory_rec r;
    memset(&r, 0, sizeof r);
    r.kind = FAKE_KIND_MEMORY2;
    r.memoryOperationType = m->op;
    r.memoryKind = m->mem_kind;
    r.correlationId = m->corr;
    r.address = m->address;
    r.bytes = m->bytes;
    r.timestamp = m->ts;
    r.PC = 0x400000;
    r.processId = 0;
    r.deviceId = m->device;
    r.contextId = m->context;
    r.streamId = m->stream;
    r.source = NULL;
    emit(r.kind, &r, MEMORY_SIZE);
}
