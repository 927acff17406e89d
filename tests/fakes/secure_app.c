/*
 * secure_app.c: a program run set-user-ID by the secure-execution test. It loads the
 * fake CUDA runtime named by argv[1] (an absolute path: a setuid program ignores
 * LD_LIBRARY_PATH), makes one API call (the fake's first call runs the injection, as
 * cuInit does), then prints one line: whether the kernel marked it secure
 * (AT_SECURE), whether libgputrace and the test's marker library are mapped, and
 * whether NVTX_INJECTION64_PATH was set in its environment.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>

static int mapped(const char *needle) {
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return -1;
    char line[4096];
    int found = 0;
    while (fgets(line, sizeof line, f))
        if (strstr(line, needle))
            found = 1;
    fclose(f);
    return found;
}

int main(int argc, char **argv) {
    if (argc < 2)
        return 2;
    void *rt = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!rt) {
        fprintf(stderr, "secure_app: %s\n", dlerror());
        return 3;
    }
    int (*malloc_)(void **, size_t) = NULL;
    *(void **)&malloc_ = dlsym(rt, "cudaMalloc");
    if (!malloc_)
        return 3;
    void *p = NULL;
    malloc_(&p, 256);
    printf("secure=%lu gputrace=%d marker=%d nvtx_var=%d\n", getauxval(AT_SECURE),
           mapped("libgputrace"), mapped("marker-lib"), getenv("NVTX_INJECTION64_PATH") != NULL);
    return 0;
}
