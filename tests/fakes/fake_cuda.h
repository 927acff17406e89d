/*
 * fake_cuda.h: what the three test fakes (fake_cupti.c, fake_cudart.c, app.c) share.
 *
 * Nothing here comes from NVIDIA's headers: the types are declared from scratch with
 * the ABI the real ones have on x86_64 Linux (sizes and offsets are pinned by
 * _Static_assert in the .c files, against cupti-sys/LAYOUTS.md).
 *
 * The fake libcudart plays both the CUDA runtime and the driver. Its behaviour is fixed
 * and documented here, so tests can predict every record:
 *
 *   call                      | condition              | returns | errno set to
 *   --------------------------+------------------------+---------+-------------
 *   every call                | otherwise              | 0       | (untouched)
 *   cudaMemcpy/cudaMemcpyAsync| count == FAKE_BAD_COUNT| 11      | 42
 *   cudaMemset/cudaMemsetAsync| count == FAKE_BAD_COUNT| 1       | 43
 *   cudaMalloc                | size == FAKE_BAD_COUNT | 2       | 12 (*devPtr = NULL)
 *   cudaMalloc                | allocated + size >     | 2       | (untouched;
 *                             | FAKE_CUDA_MEMORY_LIMIT |         | *devPtr = NULL)
 *   cudaLaunchKernel          | gridDim.x == 0         | 9       | 22
 *   cudaStreamSynchronize     | stream not from        | 400     | 44
 *                             | cudaStreamCreate/NULL  |         |
 *   cudaGetDeviceCount        | always                 | 0       | (*count = 1)
 *
 * A failed call makes its ENTER/EXIT callbacks (with the error code) but no activity
 * record. Fake rules that stand in for the hardware:
 *   - cudaLaunchKernel's `func` points to the kernel's (mangled) name, a C string;
 *     the kernel record's name is that pointer, registersPerThread is
 *     FAKE_KERNEL_REGISTERS, staticSharedMemory FAKE_KERNEL_STATIC_SMEM and
 *     dynamicSharedMemory the launch's sharedMem.
 *   - host memory from cudaMallocHost/cudaHostAlloc is PINNED, any other host
 *     pointer PAGEABLE; pointers from cudaMalloc are DEVICE (fake addresses, never
 *     dereferenced).
 *   - stream NULL has streamId 7; the n-th cudaStreamCreate'd stream has id 12 + n.
 *   - device 0, context id 1; every API call gets the next correlation id (from 1).
 *   - GPU timestamps are CLOCK_REALTIME ns read while the call runs, between its
 *     ENTER and EXIT callbacks (so api.start <= gpu.start <= gpu.end <= api.end).
 */
#ifndef FAKE_CUDA_H
#define FAKE_CUDA_H

#include <stddef.h>
#include <stdint.h>

#define FAKE_BAD_COUNT ((size_t)0xDEAD)
#define FAKE_KERNEL_REGISTERS 32
#define FAKE_KERNEL_STATIC_SMEM 256
#define FAKE_DEVICE_NAME "Fake NVIDIA H200"
#define FAKE_DEFAULT_STREAM_ID 7u
#define FAKE_FIRST_STREAM_ID 13u
#define FAKE_CONTEXT_ID 1u

/* ---- CUDA runtime types (ABI-compatible declarations) ---- */
typedef int cudaError_t;
typedef struct fake_stream *cudaStream_t;
typedef struct {
    unsigned int x, y, z;
} dim3;
enum fake_memcpy_kind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4
};

/* ---- CUPTI constants used by more than one fake ---- */
#define FAKE_CB_DOMAIN_DRIVER_API 1u
#define FAKE_CB_DOMAIN_RUNTIME_API 2u
#define FAKE_API_ENTER 0u
#define FAKE_API_EXIT 1u

#define FAKE_KIND_MEMCPY 1u
#define FAKE_KIND_MEMSET 2u
#define FAKE_KIND_DEVICE 8u
#define FAKE_KIND_CONCURRENT_KERNEL 10u
#define FAKE_KIND_SYNCHRONIZATION 38u
#define FAKE_KIND_MEMORY2 49u
#define FAKE_KIND_GRAPH_TRACE 51u

/* CUPTI_RUNTIME_TRACE_CBID_* values of the calls the fake runtime implements. */
#define CBID_cudaGetDeviceCount 3u
#define CBID_cudaMalloc 20u
#define CBID_cudaFree 22u
#define CBID_cudaMallocHost 25u
#define CBID_cudaFreeHost 26u
#define CBID_cudaHostAlloc 27u
#define CBID_cudaMemcpy 31u
#define CBID_cudaMemcpyAsync 41u
#define CBID_cudaMemset 49u
#define CBID_cudaMemsetAsync 51u
#define CBID_cudaStreamCreate 129u
#define CBID_cudaStreamSynchronize 131u
#define CBID_cudaDeviceSynchronize 165u
#define CBID_cudaLaunchKernel 211u
#define CBID_cudaGraphLaunch 311u
#define CBID_cudaGraphUpload 348u
#define CBID_cudaGraphInstantiate 443u

/* A fake CUDA graph. The fake has no stream capture: the app describes the graph and
 * passes a pointer to this as cudaGraph_t; cudaGraphInstantiate hands the same pointer
 * back as the cudaGraphExec_t. Each cudaGraphLaunch of it runs `nodes` kernels named
 * `name` on the launch's stream, in node order, between the call's ENTER and EXIT
 * callbacks: kernel i has graphId `id`, graphNodeId FAKE_GRAPH_NODE(id, i) and the
 * launch's correlation id, and the next kernel starts `gap_us` after it ends. */
struct fake_graph {
    uint32_t id;
    uint32_t nodes;
    const char *name;
    uint32_t gap_us;
};
#define FAKE_GRAPH_NODE(id, i) ((((uint64_t)(id)) << 32) | (uint64_t)((i) + 1))

/* CUPTI_DRIVER_TRACE_CBID_* values of the driver calls the fake implements. */
#define CBID_cuStreamSynchronize 126u
#define CBID_cuMemcpyHtoDAsync_v2 277u
#define CBID_cuMemcpyAsync 306u
#define CBID_cuLaunchKernel 307u

/* ---- Control interface of the fake libcupti, used by the fake runtime ----
 * Plain descriptions of one GPU record each; fake_cupti.c lays them out as the
 * CUPTI record of its flavour (13.0 or 12.0) and stores them in the current buffer,
 * but only while that activity kind is enabled. */
struct fake_kernel {
    uint32_t corr, device, context, stream;
    uint64_t start, end;
    const char *name;
    uint32_t grid[3], block[3];
    uint32_t static_smem, dynamic_smem;
    uint16_t registers;
    uint32_t graph_id;
    uint64_t graph_node_id;
};

struct fake_memcpy {
    uint32_t corr, device, context, stream;
    uint64_t start, end, bytes;
    uint8_t copy_kind, src_kind, dst_kind, flags;
};

struct fake_memset {
    uint32_t corr, device, context, stream;
    uint64_t start, end, bytes;
    uint32_t value;
    uint16_t mem_kind, flags;
};

struct fake_sync {
    uint32_t corr, context, stream, type, event, result;
    uint64_t start, end;
};

struct fake_device {
    uint32_t id, sm_count, max_blocks_per_sm, threads_per_warp, max_warps_per_sm;
    uint32_t max_regs_per_sm, max_smem_per_sm, cc_major, cc_minor;
    uint64_t global_memory;
    const char *name;
};

/* One replay of a graph as CUPTI's graph-level tracing (GRAPH_TRACE) records it: while
 * that kind is enabled, CUPTI gives this record per replay and no kernel records for
 * the graph's nodes. */
struct fake_graph_trace {
    uint32_t corr, device, context, stream, graph_id;
    uint64_t start, end;
};

struct fake_memory {
    uint32_t corr, device, context, stream, op, mem_kind;
    uint64_t address, bytes, ts;
};

/* CUpti_CallbackData, as CUPTI passes it to an API callback (offsets asserted in
 * fake_cupti.c). */
struct fake_callback_data {
    uint32_t callbackSite;
    const char *functionName;
    const void *functionParams;
    const void *functionReturnValue;
    const char *symbolName;
    void *context;
    uint32_t contextUid;
    uint64_t *correlationData;
    uint32_t correlationId;
};

typedef int (*fake_cupti_api_fn)(uint32_t domain, uint32_t cbid, uint32_t site, uint32_t corr,
                                 const char *function_name, const char *symbol_name,
                                 const void *params, const void *return_value,
                                 uint64_t *correlation_data);
typedef void (*fake_cupti_emit_kernel_fn)(const struct fake_kernel *);
typedef void (*fake_cupti_emit_memcpy_fn)(const struct fake_memcpy *);
typedef void (*fake_cupti_emit_memset_fn)(const struct fake_memset *);
typedef void (*fake_cupti_emit_sync_fn)(const struct fake_sync *);
typedef void (*fake_cupti_emit_device_fn)(const struct fake_device *);
typedef void (*fake_cupti_emit_memory_fn)(const struct fake_memory *);
typedef uint64_t (*fake_cupti_now_fn)(void);
/* Stores the graph-level record if GRAPH_TRACE is enabled; returns whether it is. */
typedef int (*fake_cupti_emit_graph_trace_fn)(const struct fake_graph_trace *);

#endif
