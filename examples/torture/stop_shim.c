/*
 * stop_shim.c: an LD_PRELOAD shim for the torture run that stops its own process (SIGSTOP)
 * at the two moments a process holds the store against every other process:
 *
 *  - inside a commit: at a random fraction of its pwrite/pwrite64/pwritev/pwritev64 calls
 *    on the store file, which redb makes only while it holds its write lock;
 *  - inside an open: right after a successful F_OFD_SETLK/F_OFD_SETLKW write lock on byte
 *    2^61 of the store file, the byte fencelock holds while a process is inside Store::open.
 *    A pwrite stop while this process holds that byte counts as a stop inside an open too.
 *
 * and at moments inside the lease paths of the shared lease map, which hold nothing against
 * other processes (no other process may be delayed by them):
 *
 *  - right after an OFD lock, unlock or test (F_OFD_SETLK/SETLKW/GETLK) of any other byte of
 *    the store file: the liveness locks a grant takes and a release drops, and the tests of
 *    other holders' liveness that an acquire, an extend or a prune makes between reading a
 *    bucket of the map and publishing its change;
 *  - right before a futex call (the syscall(2) function with SYS_futex): the wakes after a
 *    release, the waits of a waiting acquire, and the thread locks of the process itself.
 *
 * and, when the store writes through its redo log (Options::write_log), at moments of the
 * log's paths, which hold nothing against other processes either:
 *
 *  - right before a pwrite/pwrite64/pwritev/pwritev64 of a segment file (`<store>.wal.<16 hex
 *    digits>`): a process stopped inside a fenced write, between its reservation and its
 *    record;
 *  - right before an fdatasync or fsync of a segment: a process stopped inside the shared sync,
 *    maybe as the flusher that the others wait for.
 *
 * The controller notices the stopped process and resumes it with SIGCONT.
 *
 * Environment (read once, in the constructor):
 *   FENCELOCK_SHIM_STORE       the store's path; its descriptors are recognized at open and
 *                              openat by device and inode, and forgotten at close
 *   FENCELOCK_SHIM_WRITE_PPM   chance per store pwrite, in parts per million (default 0)
 *   FENCELOCK_SHIM_OPEN_PPM    chance per open lock, in parts per million (default 0)
 *   FENCELOCK_SHIM_LEASE_PPM   chance per liveness lock or test and per futex call, in parts
 *                              per million (default 0)
 *   FENCELOCK_SHIM_LOG_PPM     chance per pwrite and per sync of a log segment, in parts per
 *                              million (default 0)
 *   FENCELOCK_SHIM_SEED        seed of the choices (reproducible where scheduling allows)
 *   FENCELOCK_SHIM_LOG         a file that gets one line per stop ("commit <ns>", "open <ns>",
 *                              "lease <ns>" or "log <ns> pwrite|fdatasync|fsync", CLOCK_BOOTTIME)
 *                              written just before it
 *
 * Segment files are recognized at open and openat by the path their new descriptor names
 * (/proc/self/fd/N): the store's directory (resolved once, in the constructor), then the
 * store's file name, ".wal." and 16 hex digits. A segment's temporary name while it is made
 * does not match: the zeros and the header written there never stop.
 *
 * The intercepted paths run in any thread at any moment, also inside redb's commit: they take
 * no lock and never allocate. They use only atomics, fstat/stat, clock_gettime, write and
 * kill, readlink, all async-signal-safe. The real functions are resolved with dlsym(RTLD_NEXT) in the
 * constructor; a call that arrives before it (another library's constructor) goes straight
 * to the system call.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define OPEN_BYTE (1LL << 61)
#define MAX_FD 65536

typedef int (*open_fn)(const char *, int, ...);
typedef int (*openat_fn)(int, const char *, int, ...);
typedef int (*close_fn)(int);
typedef int (*fcntl_fn)(int, int, ...);
typedef ssize_t (*pwrite_fn)(int, const void *, size_t, off_t);
typedef ssize_t (*pwritev_fn)(int, const struct iovec *, int, off_t);
typedef long (*syscall_fn)(long, ...);
typedef int (*sync_fn)(int);

static open_fn real_open, real_open64;
static openat_fn real_openat, real_openat64;
static close_fn real_close;
static fcntl_fn real_fcntl, real_fcntl64;
static pwrite_fn real_pwrite, real_pwrite64;
static pwritev_fn real_pwritev, real_pwritev64;
static syscall_fn real_syscall;
static sync_fn real_fdatasync, real_fsync;

static char store_path[4096];
static uint64_t write_ppm, open_ppm, lease_ppm, log_ppm;
/* The canonical path of the store with ".wal." after it: a segment's path is this and 16 hex
 * digits. Empty when the store's directory cannot be resolved (no segment is recognized). */
static char segment_prefix[4096];
static size_t segment_prefix_len;
static uint64_t rng_state;
static int log_fd = -1;

/* Per descriptor: 1 if it is the store file, 2 if it also holds the open byte, 3 if it is a
 * segment of the store's redo log. */
#define SEGMENT 3
static unsigned char fds[MAX_FD];
/* Descriptors of this process that hold the open byte. */
static int open_locks;

static uint64_t parse_u64(const char *name) {
    const char *text = getenv(name);
    return text ? strtoull(text, NULL, 10) : 0;
}

/* The segment prefix: the store's directory resolved (it exists: the store may not yet), then
 * the store's file name and ".wal.". */
static void set_segment_prefix(void) {
    char dir[sizeof store_path];
    const char *slash = strrchr(store_path, '/');
    const char *name = slash ? slash + 1 : store_path;
    if (slash == store_path) {
        strcpy(dir, "/");
    } else if (slash) {
        memcpy(dir, store_path, (size_t)(slash - store_path));
        dir[slash - store_path] = '\0';
    } else {
        strcpy(dir, ".");
    }
    char resolved[PATH_MAX];
    if (realpath(dir, resolved) == NULL) {
        return;
    }
    size_t dir_len = strlen(resolved);
    size_t name_len = strlen(name);
    const char *suffix = ".wal.";
    if (dir_len + 1 + name_len + strlen(suffix) + 16 >= sizeof segment_prefix) {
        return;
    }
    memcpy(segment_prefix, resolved, dir_len);
    size_t n = dir_len;
    if (n == 0 || segment_prefix[n - 1] != '/') {
        segment_prefix[n++] = '/';
    }
    memcpy(segment_prefix + n, name, name_len);
    n += name_len;
    memcpy(segment_prefix + n, suffix, strlen(suffix));
    n += strlen(suffix);
    segment_prefix[n] = '\0';
    segment_prefix_len = n;
}

__attribute__((constructor)) static void shim_init(void) {
    real_open = (open_fn)dlsym(RTLD_NEXT, "open");
    real_open64 = (open_fn)dlsym(RTLD_NEXT, "open64");
    real_openat = (openat_fn)dlsym(RTLD_NEXT, "openat");
    real_openat64 = (openat_fn)dlsym(RTLD_NEXT, "openat64");
    real_close = (close_fn)dlsym(RTLD_NEXT, "close");
    real_fcntl = (fcntl_fn)dlsym(RTLD_NEXT, "fcntl");
    real_fcntl64 = (fcntl_fn)dlsym(RTLD_NEXT, "fcntl64");
    real_pwrite = (pwrite_fn)dlsym(RTLD_NEXT, "pwrite");
    real_pwrite64 = (pwrite_fn)dlsym(RTLD_NEXT, "pwrite64");
    real_pwritev = (pwritev_fn)dlsym(RTLD_NEXT, "pwritev");
    real_pwritev64 = (pwritev_fn)dlsym(RTLD_NEXT, "pwritev64");
    real_syscall = (syscall_fn)dlsym(RTLD_NEXT, "syscall");
    real_fdatasync = (sync_fn)dlsym(RTLD_NEXT, "fdatasync");
    real_fsync = (sync_fn)dlsym(RTLD_NEXT, "fsync");
    const char *path = getenv("FENCELOCK_SHIM_STORE");
    if (path && strlen(path) < sizeof store_path) {
        strcpy(store_path, path);
        set_segment_prefix();
    }
    log_ppm = parse_u64("FENCELOCK_SHIM_LOG_PPM");
    write_ppm = parse_u64("FENCELOCK_SHIM_WRITE_PPM");
    open_ppm = parse_u64("FENCELOCK_SHIM_OPEN_PPM");
    lease_ppm = parse_u64("FENCELOCK_SHIM_LEASE_PPM");
    rng_state = parse_u64("FENCELOCK_SHIM_SEED") | 1;
    const char *log = getenv("FENCELOCK_SHIM_LOG");
    if (log) {
        /* Not the store: the open hook leaves it alone. */
        log_fd = (int)syscall(SYS_openat, AT_FDCWD, log,
                              O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    }
}

/* xorshift64*, shared by the threads through a compare-and-swap. */
static uint64_t next_random(void) {
    uint64_t old = __atomic_load_n(&rng_state, __ATOMIC_RELAXED);
    uint64_t x;
    do {
        x = old;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
    } while (!__atomic_compare_exchange_n(&rng_state, &old, x, 0, __ATOMIC_RELAXED,
                                          __ATOMIC_RELAXED));
    return x * 0x2545F4914F6CDD1DULL;
}

static int chance(uint64_t ppm) {
    return ppm != 0 && next_random() % 1000000 < ppm;
}

static int is_store(int fd) {
    if (fd < 0 || fd >= MAX_FD) {
        return 0;
    }
    unsigned char kind = __atomic_load_n(&fds[fd], __ATOMIC_ACQUIRE);
    return kind != 0 && kind != SEGMENT;
}

static int is_segment(int fd) {
    return fd >= 0 && fd < MAX_FD && __atomic_load_n(&fds[fd], __ATOMIC_ACQUIRE) == SEGMENT;
}

/* Logs the stop ("<what> <ns>", then " <detail>" when there is one) and stops the whole
 * process until the controller sends SIGCONT. */
static void stop_at(const char *what, const char *detail) {
    int saved = errno;
    if (log_fd >= 0) {
        struct timespec now;
        clock_gettime(CLOCK_BOOTTIME, &now);
        uint64_t ns = (uint64_t)now.tv_sec * 1000000000ULL + (uint64_t)now.tv_nsec;
        char line[64];
        size_t n = strlen(what);
        memcpy(line, what, n);
        line[n++] = ' ';
        char digits[24];
        int d = 0;
        do {
            digits[d++] = (char)('0' + ns % 10);
            ns /= 10;
        } while (ns != 0);
        while (d > 0) {
            line[n++] = digits[--d];
        }
        if (detail) {
            size_t m = strlen(detail);
            line[n++] = ' ';
            memcpy(line + n, detail, m);
            n += m;
        }
        line[n++] = '\n';
        /* One write: a SIGKILL loses the line whole or not at all. */
        ssize_t ignored = write(log_fd, line, n);
        (void)ignored;
    }
    kill(getpid(), SIGSTOP);
    errno = saved;
}

static void stop_here(const char *what) {
    stop_at(what, NULL);
}

static void maybe_stop_in_write(int fd) {
    if (is_store(fd) && chance(write_ppm)) {
        stop_here(__atomic_load_n(&open_locks, __ATOMIC_ACQUIRE) > 0 ? "open" : "commit");
    } else if (is_segment(fd) && chance(log_ppm)) {
        stop_at("log", "pwrite");
    }
}

/* Whether the descriptor names a segment of the store's log: its path is the prefix and 16
 * lowercase hex digits. */
static int names_segment(int fd) {
    if (segment_prefix_len == 0) {
        return 0;
    }
    /* "/proc/self/fd/" and the number, without snprintf. */
    char link[32] = "/proc/self/fd/";
    size_t n = strlen(link);
    char digits[12];
    int d = 0;
    unsigned int rest = (unsigned int)fd;
    do {
        digits[d++] = (char)('0' + rest % 10);
        rest /= 10;
    } while (rest != 0);
    while (d > 0) {
        link[n++] = digits[--d];
    }
    link[n] = '\0';
    char target[sizeof segment_prefix];
    ssize_t len = readlink(link, target, sizeof target);
    if (len != (ssize_t)segment_prefix_len + 16 ||
        memcmp(target, segment_prefix, segment_prefix_len) != 0) {
        return 0;
    }
    for (size_t i = segment_prefix_len; i < (size_t)len; i++) {
        char c = target[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
            return 0;
        }
    }
    return 1;
}

/* Remembers a new descriptor if it is the store file or a segment of its log. */
static int track(int fd) {
    if (fd < 0 || fd >= MAX_FD || store_path[0] == '\0') {
        return fd;
    }
    int saved = errno;
    struct stat opened, store;
    int same = fstat(fd, &opened) == 0 && stat(store_path, &store) == 0 &&
               opened.st_dev == store.st_dev && opened.st_ino == store.st_ino;
    unsigned char kind = same ? 1 : names_segment(fd) ? SEGMENT : 0;
    __atomic_store_n(&fds[fd], kind, __ATOMIC_RELEASE);
    errno = saved;
    return fd;
}

static mode_t mode_arg(int flags, va_list ap) {
    return (flags & (O_CREAT | O_TMPFILE)) ? (mode_t)va_arg(ap, int) : 0;
}

int open(const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_arg(flags, ap);
    va_end(ap);
    int fd = real_open ? real_open(path, flags, mode)
                       : (int)syscall(SYS_openat, AT_FDCWD, path, flags, mode);
    return track(fd);
}

int open64(const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_arg(flags, ap);
    va_end(ap);
    int fd = real_open64 ? real_open64(path, flags, mode)
                         : (int)syscall(SYS_openat, AT_FDCWD, path, flags, mode);
    return track(fd);
}

int openat(int dir, const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_arg(flags, ap);
    va_end(ap);
    int fd = real_openat ? real_openat(dir, path, flags, mode)
                         : (int)syscall(SYS_openat, dir, path, flags, mode);
    return track(fd);
}

int openat64(int dir, const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_arg(flags, ap);
    va_end(ap);
    int fd = real_openat64 ? real_openat64(dir, path, flags, mode)
                           : (int)syscall(SYS_openat, dir, path, flags, mode);
    return track(fd);
}

int close(int fd) {
    if (fd >= 0 && fd < MAX_FD) {
        /* Closing a descriptor drops its open file description's locks with it. */
        if (__atomic_exchange_n(&fds[fd], 0, __ATOMIC_ACQ_REL) == 2) {
            __atomic_sub_fetch(&open_locks, 1, __ATOMIC_ACQ_REL);
        }
    }
    return real_close ? real_close(fd) : (int)syscall(SYS_close, fd);
}

/* After a successful fcntl: notes the open byte taken or given up, and maybe stops. */
static void after_fcntl(int fd, int cmd, void *arg) {
    if (cmd == F_OFD_GETLK && is_store(fd)) {
        if (chance(lease_ppm)) {
            stop_here("lease");
        }
        return;
    }
    if ((cmd != F_OFD_SETLK && cmd != F_OFD_SETLKW) || !is_store(fd) || arg == NULL) {
        return;
    }
    const struct flock *lock = arg;
    if (lock->l_whence != SEEK_SET || lock->l_start != OPEN_BYTE || lock->l_len != 1) {
        if (chance(lease_ppm)) {
            stop_here("lease");
        }
        return;
    }
    if (lock->l_type == F_WRLCK) {
        unsigned char was = __atomic_exchange_n(&fds[fd], 2, __ATOMIC_ACQ_REL);
        if (was != 2) {
            __atomic_add_fetch(&open_locks, 1, __ATOMIC_ACQ_REL);
        }
        if (chance(open_ppm)) {
            stop_here("open");
        }
    } else if (lock->l_type == F_UNLCK) {
        if (__atomic_exchange_n(&fds[fd], 1, __ATOMIC_ACQ_REL) == 2) {
            __atomic_sub_fetch(&open_locks, 1, __ATOMIC_ACQ_REL);
        }
    }
}

/* Every fcntl command takes one argument or none; passing one word on is what glibc does. */
int fcntl(int fd, int cmd, ...) {
    va_list ap;
    va_start(ap, cmd);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    int rc = real_fcntl ? real_fcntl(fd, cmd, arg) : (int)syscall(SYS_fcntl, fd, cmd, arg);
    if (rc != -1) {
        after_fcntl(fd, cmd, arg);
    }
    return rc;
}

int fcntl64(int fd, int cmd, ...) {
    va_list ap;
    va_start(ap, cmd);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    int rc = real_fcntl64 ? real_fcntl64(fd, cmd, arg) : (int)syscall(SYS_fcntl, fd, cmd, arg);
    if (rc != -1) {
        after_fcntl(fd, cmd, arg);
    }
    return rc;
}

ssize_t pwrite(int fd, const void *buf, size_t count, off_t offset) {
    maybe_stop_in_write(fd);
    return real_pwrite ? real_pwrite(fd, buf, count, offset)
                       : syscall(SYS_pwrite64, fd, buf, count, offset);
}

ssize_t pwrite64(int fd, const void *buf, size_t count, off_t offset) {
    maybe_stop_in_write(fd);
    return real_pwrite64 ? real_pwrite64(fd, buf, count, offset)
                         : syscall(SYS_pwrite64, fd, buf, count, offset);
}

ssize_t pwritev(int fd, const struct iovec *iov, int count, off_t offset) {
    maybe_stop_in_write(fd);
    /* The raw system call splits the offset in two words; x86-64 and aarch64 take the low. */
    return real_pwritev ? real_pwritev(fd, iov, count, offset)
                        : syscall(SYS_pwritev, fd, iov, count, offset, 0);
}

ssize_t pwritev64(int fd, const struct iovec *iov, int count, off_t offset) {
    maybe_stop_in_write(fd);
    return real_pwritev64 ? real_pwritev64(fd, iov, count, offset)
                          : syscall(SYS_pwritev, fd, iov, count, offset, 0);
}

/* A sync of a log segment: a process stopped inside the shared sync. */
int fdatasync(int fd) {
    if (is_segment(fd) && chance(log_ppm)) {
        stop_at("log", "fdatasync");
    }
    return real_fdatasync ? real_fdatasync(fd) : (int)syscall(SYS_fdatasync, fd);
}

int fsync(int fd) {
    if (is_segment(fd) && chance(log_ppm)) {
        stop_at("log", "fsync");
    }
    return real_fsync ? real_fsync(fd) : (int)syscall(SYS_fsync, fd);
}

/* syscall(2) takes at most six arguments after the number; passing six words on is what the
 * callers' ABI allows (the extra ones are ignored). Only futex calls may stop. */
long syscall(long number, ...) {
    va_list ap;
    va_start(ap, number);
    long a = va_arg(ap, long), b = va_arg(ap, long), c = va_arg(ap, long);
    long d = va_arg(ap, long), e = va_arg(ap, long), f = va_arg(ap, long);
    va_end(ap);
    if (number == SYS_futex && chance(lease_ppm)) {
        stop_here("lease");
    }
    if (real_syscall == NULL) {
        /* A call before the constructor: resolve the real function now. */
        real_syscall = (syscall_fn)dlsym(RTLD_NEXT, "syscall");
    }
    return real_syscall(number, a, b, c, d, e, f);
}
