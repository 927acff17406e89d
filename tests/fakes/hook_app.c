/*
 * hook_app.c: plays the Python interpreter for the symbol-hook tests. It links no CUDA
 * library; it dlopens the "extension" (hook_ext.so) RTLD_NOW | RTLD_LOCAL, as Python
 * imports an extension module, and runs a scenario in it:
 *
 *   hook_app EXT SCENARIO [ARGS...]     exit status 0 when every check passed
 *
 * Scenario "late" first calls cudaMemcpy and ncclAllReduce through the global scope
 * (where only the preloaded library defines them) before any runtime is loaded, then
 * loads the extension, then calls the same pointer again.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hook_fakes.h"

typedef cudaError_t (*memcpy_fn)(void *, const void *, size_t, int);
typedef ncclResult_t (*allreduce_fn)(const void *, void *, size_t, int, int, void *, void *);

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: hook_app EXT SCENARIO [ARGS...]\n");
        return 2;
    }
    int late = !strcmp(argv[2], "late");
    memcpy_fn early_memcpy = NULL;
    if (late) {
        early_memcpy = (memcpy_fn)dlsym(RTLD_DEFAULT, "cudaMemcpy");
        allreduce_fn early_allreduce = (allreduce_fn)dlsym(RTLD_DEFAULT, "ncclAllReduce");
        if (!early_memcpy || !early_allreduce) {
            fprintf(stderr, "the preloaded library does not define the hooks\n");
            return 2;
        }
        for (int i = 0; i < 2; i++) {
            errno = 77;
            int r = early_memcpy((void *)0xD0000000, (void *)0xD1000000, 5000, DtoD);
            printf("early cudaMemcpy %d %d\n", r, errno);
        }
        errno = 78;
        int r = early_allreduce(NULL, NULL, 1, 7, 0, NULL, NULL);
        printf("early ncclAllReduce %d %d\n", r, errno);
    }
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "dlopen %s: %s\n", argv[1], dlerror());
        return 2;
    }
    int (*run)(const char *, int, char **) =
        (int (*)(const char *, int, char **))dlsym(h, "ext_run");
    if (!run) {
        fprintf(stderr, "no ext_run in %s\n", argv[1]);
        return 2;
    }
    int failures = run(argv[2], argc - 3, argv + 3);
    if (late) {
        errno = 0;
        int r = early_memcpy((void *)0xD0000000, (void *)0xD1000000, 5002, DtoD);
        printf("late cudaMemcpy %d %d\n", r, errno);
        if (r != 0 || errno != FAKE_ERRNO_OK(F_MEMCPY))
            failures++;
    }
    printf("failures %d\n", failures);
    fflush(stdout);
    return failures ? 1 : 0;
}
