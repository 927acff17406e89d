/*
 * hook_nccl.c: a fake libnccl.so.2 for the symbol-hook tests, with the fixed
 * behaviour described in hook_fakes.h. Collectives do nothing but return.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "hook_fakes.h"

#define EXPORT __attribute__((visibility("default")))

static __thread int fail_once;
static __thread int last_id, last_ret, last_err;
static __thread int group_depth;
static atomic_int uid_seed;

static int begin(void) {
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

EXPORT void hook_nccl_fail_next(void) { fail_once = 1; }

EXPORT void hook_nccl_last(int *id, int *ret, int *err) {
    *id = last_id;
    *ret = last_ret;
    *err = last_err;
}

static struct fake_comm *new_comm(int rank, int nranks) {
    struct fake_comm *c = malloc(sizeof *c);
    c->magic = FAKE_COMM_MAGIC;
    c->rank = rank;
    c->nranks = nranks;
    return c;
}

/* A communicator made behind the hooks' back (not an NCCL API; for tests only). */
EXPORT ncclComm_t hook_nccl_make_comm(int rank, int nranks) { return new_comm(rank, nranks); }

EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    int f = begin();
    if (!f) {
        int seed = atomic_fetch_add(&uid_seed, 1) + 1;
        for (int i = 0; i < 128; i++)
            id->internal[i] = (char)(seed * 31 + i);
    }
    return end(N_GET_UNIQUE_ID, f);
}

EXPORT ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
    (void)id;
    int f = begin();
    if (!f)
        *comm = new_comm(rank, nranks);
    return end(N_INIT_RANK, f);
}

EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id,
                                           int rank, void *config) {
    (void)id, (void)config;
    int f = begin();
    if (!f)
        *comm = new_comm(rank, nranks);
    return end(N_INIT_RANK_CONFIG, f);
}

EXPORT ncclResult_t ncclCommInitRankScalable(ncclComm_t *comm, int nranks, int rank, int nids,
                                             ncclUniqueId *ids, void *config) {
    (void)nids, (void)ids, (void)config;
    int f = begin();
    if (!f)
        *comm = new_comm(rank, nranks);
    return end(N_INIT_SCALABLE, f);
}

EXPORT ncclResult_t ncclGroupStart(void);
EXPORT ncclResult_t ncclGroupEnd(void);

EXPORT ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist) {
    (void)devlist;
    int f = begin();
    if (!f) {
        /* Through the exported names, as NCCL does: a preloaded tool sees these. */
        ncclGroupStart();
        for (int i = 0; i < ndev; i++)
            comms[i] = new_comm(i, ndev);
        ncclGroupEnd();
    }
    return end(N_INIT_ALL, f);
}

EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                                  void *config) {
    (void)config;
    int f = begin();
    if (!f) {
        if (color == NCCL_SPLIT_NOCOLOR) {
            *newcomm = NULL;
        } else {
            int n = comm->nranks / 2;
            *newcomm = new_comm(key, n > 0 ? n : 1);
        }
    }
    return end(N_SPLIT, f);
}

EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    int f = begin();
    if (!f && comm) {
        comm->magic = 0;
        free(comm);
    }
    return end(N_DESTROY, f);
}

EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) {
    int f = begin();
    if (!f && comm) {
        comm->magic = 0;
        free(comm);
    }
    return end(N_ABORT, f);
}

/* Getters (the hooks call them to learn a communicator's rank and size): they never
 * fail, set no errno and leave hook_nccl_last() alone. */
EXPORT ncclResult_t ncclCommCount(const ncclComm_t comm, int *count) {
    if (!comm || comm->magic != FAKE_COMM_MAGIC)
        return 4; /* ncclInvalidArgument */
    *count = comm->nranks;
    return 0;
}

EXPORT ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank) {
    if (!comm || comm->magic != FAKE_COMM_MAGIC)
        return 4;
    *rank = comm->rank;
    return 0;
}

EXPORT ncclResult_t ncclGroupStart(void) {
    int f = begin();
    if (!f)
        group_depth++;
    return end(N_GROUP_START, f);
}

EXPORT ncclResult_t ncclGroupEnd(void) {
    int f = begin();
    if (!f)
        group_depth--;
    return end(N_GROUP_END, f);
}

EXPORT ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, int dt, int op,
                                  ncclComm_t c, void *st) {
    (void)s, (void)r, (void)n, (void)dt, (void)op, (void)c, (void)st;
    return end(N_ALL_REDUCE, begin());
}

EXPORT ncclResult_t ncclReduce(const void *s, void *r, size_t n, int dt, int op, int root,
                               ncclComm_t c, void *st) {
    (void)s, (void)r, (void)n, (void)dt, (void)op, (void)root, (void)c, (void)st;
    return end(N_REDUCE, begin());
}

EXPORT ncclResult_t ncclBroadcast(const void *s, void *r, size_t n, int dt, int root,
                                  ncclComm_t c, void *st) {
    (void)s, (void)r, (void)n, (void)dt, (void)root, (void)c, (void)st;
    return end(N_BROADCAST, begin());
}

EXPORT ncclResult_t ncclBcast(void *b, size_t n, int dt, int root, ncclComm_t c, void *st) {
    (void)b, (void)n, (void)dt, (void)root, (void)c, (void)st;
    return end(N_BCAST, begin());
}

EXPORT ncclResult_t ncclAllGather(const void *s, void *r, size_t n, int dt, ncclComm_t c,
                                  void *st) {
    (void)s, (void)r, (void)n, (void)dt, (void)c, (void)st;
    return end(N_ALL_GATHER, begin());
}

EXPORT ncclResult_t ncclReduceScatter(const void *s, void *r, size_t n, int dt, int op,
                                      ncclComm_t c, void *st) {
    (void)s, (void)r, (void)n, (void)dt, (void)op, (void)c, (void)st;
    return end(N_REDUCE_SCATTER, begin());
}

EXPORT ncclResult_t ncclSend(const void *s, size_t n, int dt, int peer, ncclComm_t c,
                             void *st) {
    (void)s, (void)n, (void)dt, (void)peer, (void)c, (void)st;
    return end(N_SEND, begin());
}

EXPORT ncclResult_t ncclRecv(void *r, size_t n, int dt, int peer, ncclComm_t c, void *st) {
    (void)r, (void)n, (void)dt, (void)peer, (void)c, (void)st;
    return end(N_RECV, begin());
}
