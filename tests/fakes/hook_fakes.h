/*
 * hook_fakes.h: what the symbol-hook test fakes share (hook_cudart.c, hook_nccl.c,
 * hook_ext.c, hook_app.c). Declared from scratch with the C ABI of the real libraries
 * on x86_64 Linux; nothing here comes from NVIDIA's headers.
 *
 * Behaviour of every fake function, so a test can predict it exactly:
 *   - It sets errno on every call: FAKE_ERRNO_OK(id) when it succeeds,
 *     FAKE_ERRNO_FAIL(id) when it fails, so a caller can tell whether anything between
 *     it and the fake (a preloaded tool) touched errno.
 *   - It succeeds (returns 0) unless hook_cudart_fail_next() / hook_nccl_fail_next()
 *     was called on the same thread since the last call into that library: then it
 *     fails once, returning FAKE_RESULT_FAIL(id) and doing nothing else.
 *   - hook_cudart_last() / hook_nccl_last() say what the thread's last call returned:
 *     its id, return value and the errno it set. They never touch errno.
 *   - Exceptions: ncclCommCount / ncclCommUserRank (which the hooks themselves call)
 *     never fail, set no errno and leave hook_nccl_last() alone.
 * The fake runtime also plays cuInit: on its first call (any function) it reads
 * CUDA_INJECTION64_PATH, dlopens that library and calls InitializeInjection() once.
 * Pinned memory (cudaHostAlloc / cudaMallocHost) is plain page-aligned heap memory;
 * device pointers are never dereferenced. The fake NCCL keeps {magic, rank, nranks} in
 * each communicator; a split gets rank = key and nranks = max(1, parent's / 2), and
 * NCCL_SPLIT_NOCOLOR gives NULL. ncclGetUniqueId fills byte i with (seed * 31 + i),
 * seed counting calls from 1. ncclCommInitAll brackets its work in ncclGroupStart /
 * ncclGroupEnd, called through their exported (interposable) names as NCCL does.
 */
#ifndef HOOK_FAKES_H
#define HOOK_FAKES_H

#include <stddef.h>
#include <stdint.h>

#define FAKE_ERRNO_OK(id) (5000 + (id))
#define FAKE_ERRNO_FAIL(id) (6000 + (id))
#define FAKE_RESULT_FAIL(id) (100 + (id))
#define FAKE_COMM_MAGIC 0x4e43434cu

/* Function ids. */
enum {
    F_MEMCPY = 1,
    F_MEMCPY_ASYNC,
    F_MEMCPY_2D,
    F_MEMCPY_2D_ASYNC,
    F_MEMCPY_PEER,
    F_MEMCPY_PEER_ASYNC,
    F_MEMSET,
    F_MEMSET_ASYNC,
    F_STREAM_SYNC,
    F_DEVICE_SYNC,
    F_EVENT_SYNC,
    F_STREAM_WAIT_EVENT,
    F_LAUNCH_STUB,
    F_LAUNCH,
    F_LAUNCH_EXC,
    F_GRAPH_LAUNCH,
    F_HOST_ALLOC,
    F_MALLOC_HOST,
    F_HOST_REGISTER,
    F_HOST_UNREGISTER,
    F_FREE_HOST,
    F_GET_DEVICE_COUNT,

    N_ALL_REDUCE = 40,
    N_REDUCE,
    N_BROADCAST,
    N_BCAST,
    N_ALL_GATHER,
    N_REDUCE_SCATTER,
    N_SEND,
    N_RECV,
    N_GROUP_START,
    N_GROUP_END,
    N_INIT_RANK,
    N_INIT_RANK_CONFIG,
    N_INIT_SCALABLE,
    N_INIT_ALL,
    N_SPLIT,
    N_DESTROY,
    N_ABORT,
    N_GET_UNIQUE_ID,
    N_COUNT,
    N_USER_RANK
};

/* ---- CUDA runtime ABI ---- */
typedef int cudaError_t;
typedef void *cudaStream_t;
typedef void *cudaEvent_t;
typedef void *cudaGraphExec_t;
typedef struct {
    unsigned int x, y, z;
} dim3;
typedef struct {
    dim3 gridDim;
    dim3 blockDim;
    size_t dynamicSmemBytes;
    cudaStream_t hStream;
    void *attrs;
    unsigned int numAttrs;
} cudaLaunchConfig_t;
enum { HtoH = 0, HtoD = 1, DtoH = 2, DtoD = 3, Default = 4 };

/* ---- NCCL ABI ---- */
typedef int ncclResult_t;
typedef struct fake_comm *ncclComm_t;
typedef struct {
    char internal[128];
} ncclUniqueId;
#define NCCL_SPLIT_NOCOLOR (-1)

struct fake_comm {
    uint32_t magic;
    int rank;
    int nranks;
};

#endif
