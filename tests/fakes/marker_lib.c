/*
 * marker_lib.c: a library that leaves a mark when it is loaded: its constructor
 * creates the file MARKER (a path given at compile time). The secure-execution test
 * points every path setting at it, so a load shows as a file.
 */
#include <fcntl.h>
#include <unistd.h>

__attribute__((constructor)) static void loaded(void) {
    int fd = open(MARKER, O_CREAT | O_WRONLY, 0644);
    if (fd >= 0)
        close(fd);
}
