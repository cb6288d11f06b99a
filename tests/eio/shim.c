/* An LD_PRELOAD shim that fails one file's syncs or writes with EIO, from a chosen moment: the
 * disk error of tests/log_eio.rs and tests/write_log_eio.rs; or that stops its own process
 * (SIGSTOP) right before such a write, the stop at a chosen step of tests/write_log.rs.
 *
 * Environment (read once, at load):
 *   FENCELOCK_EIO_SUFFIX   a descriptor is the target's when the path /proc/self/fd/N names ends
 *                          with it (unset or empty: the shim does nothing)
 *   FENCELOCK_EIO_TRIGGER  the fault is on while a file of this path exists (checked at each
 *                          call of the target's), so a test turns it on by creating the file
 *   FENCELOCK_EIO_ON       what fails: "sync" (fsync and fdatasync, the default) or "write"
 *                          (pwrite and pwrite64); or "stop-write": a pwrite stops the process
 *                          first (SIGSTOP), then goes to the real function once it is resumed
 *   FENCELOCK_EIO_BYTES    with "stop-write": only a pwrite of this many bytes stops (unset:
 *                          any)
 *
 * A failing call does nothing and returns -1 with errno EIO, as the kernel does once writeback
 * of the file failed; every other call goes to the real function (dlsym(RTLD_NEXT)). */

#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*real_pwrite64)(int, const void *, size_t, off_t);

static char suffix[PATH_MAX];
static char trigger[PATH_MAX];
static int on_writes; /* 0: syncs fail; 1: writes fail */
static int stops;     /* 1: writes stop the process instead of failing */
static size_t stop_bytes; /* with `stops`: only writes of this many bytes (0: any) */
static volatile int resolved;

/* Runs at load, or at the first call if another library's constructor calls in earlier. */
__attribute__((constructor)) static void shim_init(void) {
    if (resolved)
        return;
    real_fsync = dlsym(RTLD_NEXT, "fsync");
    real_fdatasync = dlsym(RTLD_NEXT, "fdatasync");
    real_pwrite = dlsym(RTLD_NEXT, "pwrite");
    real_pwrite64 = dlsym(RTLD_NEXT, "pwrite64");
    const char *s = getenv("FENCELOCK_EIO_SUFFIX");
    const char *t = getenv("FENCELOCK_EIO_TRIGGER");
    const char *on = getenv("FENCELOCK_EIO_ON");
    if (s && t) {
        snprintf(suffix, sizeof suffix, "%s", s);
        snprintf(trigger, sizeof trigger, "%s", t);
    }
    stops = on && strcmp(on, "stop-write") == 0;
    on_writes = stops || (on && strcmp(on, "write") == 0);
    const char *bytes = getenv("FENCELOCK_EIO_BYTES");
    stop_bytes = bytes ? (size_t)strtoull(bytes, NULL, 10) : 0;
    resolved = 1;
}

/* Whether a call of this kind on `fd` fails now: the target's descriptor, the trigger there. */
static int fails(int fd, int is_write) {
    if (!resolved)
        shim_init();
    if (suffix[0] == 0 || is_write != on_writes)
        return 0;
    char link[64], path[PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    int saved = errno;
    ssize_t n = readlink(link, path, sizeof path - 1);
    int triggered = n > 0 && access(trigger, F_OK) == 0;
    errno = saved;
    if (!triggered)
        return 0;
    path[n] = 0;
    size_t len = strlen(suffix), have = (size_t)n;
    return have >= len && strcmp(path + have - len, suffix) == 0;
}

int fsync(int fd) {
    if (fails(fd, 0)) {
        errno = EIO;
        return -1;
    }
    return real_fsync(fd);
}

int fdatasync(int fd) {
    if (fails(fd, 0)) {
        errno = EIO;
        return -1;
    }
    return real_fdatasync(fd);
}

/* Whether a write of `count` bytes on `fd` fails now: with "stop-write", stops the process
 * first when it is the target's (and of the chosen size), and lets the write go on. */
static int write_fails(int fd, size_t count) {
    if (!fails(fd, 1))
        return 0;
    if (!stops)
        return 1;
    if (stop_bytes == 0 || count == stop_bytes)
        raise(SIGSTOP);
    return 0;
}

ssize_t pwrite(int fd, const void *buf, size_t count, off_t offset) {
    if (write_fails(fd, count)) {
        errno = EIO;
        return -1;
    }
    return real_pwrite(fd, buf, count, offset);
}

ssize_t pwrite64(int fd, const void *buf, size_t count, off_t offset) {
    if (write_fails(fd, count)) {
        errno = EIO;
        return -1;
    }
    return real_pwrite64(fd, buf, count, offset);
}
