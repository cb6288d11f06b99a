/* An LD_PRELOAD recorder of what reaches the store of tests/crash.rs: its file, the segment files
 * of its redo log beside it, and their directory.
 *
 * Environment (read once, at load):
 *   FENCELOCK_CRASH_TARGET  absolute, canonical path of the store file
 *   FENCELOCK_CRASH_MARKS   absolute path of the marker file the workload writes its acks to
 *   FENCELOCK_CRASH_LOG     the log this recorder appends to
 *   FENCELOCK_CRASH_KILL_AT optional: after logging the store's Nth write, the process kills
 *                           itself with SIGKILL (a writer killed mid-commit, its log complete)
 *   FENCELOCK_CRASH_KILL_BEFORE_LOG_SYNC optional: as the process enters its Nth fsync or
 *                           fdatasync of a log file, it kills itself with SIGKILL before the
 *                           call (a writer killed with its records written and not synced)
 *
 * A descriptor is the store's, a log file's (a path that starts with TARGET.wal.: a segment, or
 * one under its temporary name while it is made), the directory's (the store's directory) or the
 * marker file's when /proc/self/fd/N names that path after open/openat/creat; dup, dup2, dup3
 * and fcntl(F_DUPFD*) copy that, close forgets it. Recorded, for the store and each log file
 * (told apart by inode: the store is file 0, a log file its inode number, which stays its own
 * while any descriptor or name holds it): every write (pwrite, pwrite64, pwritev, pwritev2,
 * write, writev) with its offset and the bytes the kernel took, fsync and fdatasync,
 * sync_file_range (logged, but it is not a durability barrier), ftruncate, fallocate and
 * posix_fallocate. For the directory: fsync and fdatasync (they make the names made and removed
 * before them durable). For the names of log files: an open that created one (O_CREAT of a name
 * that did not exist), link/linkat to one, unlink/unlinkat of one; rename of a log file or the
 * store is not modelled and aborts. For the store: setxattr, lsetxattr and fsetxattr (its ring's
 * nonce, which the log's segments carry as the store's id). sync() and syncfs() of any
 * descriptor (they flush everything). For the marker file: each write, as a mark.
 *
 * Each record is appended to the log with one write while this process holds flock(LOCK_EX) on
 * its own descriptor of the log (and a mutex among its threads), and the lock is held around the
 * real call as well. So with several processes the log's order is an order in which the calls
 * really happened: every write logged before a sync finished before that sync began.
 *
 * Record: u8 kind, u32 pid, u64 file, u64 a, u64 b, u64 data_len, data (little-endian,
 * packed). */

#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/xattr.h>
#include <unistd.h>

enum {
    REC_WRITE = 1,      /* file, a = offset, data = the bytes written */
    REC_SYNC = 2,       /* file, a = 1 for fsync, 0 for fdatasync */
    REC_TRUNCATE = 3,   /* file, a = new length */
    REC_FALLOCATE = 4,  /* file, a = offset, b = length, data = mode (u32) */
    REC_MARK = 5,       /* data = what the workload wrote to the marker file */
    REC_SYNC_RANGE = 6, /* file, a = offset, b = length: sync_file_range, not a barrier */
    REC_SYNC_ALL = 7,   /* sync() or syncfs(): every file and the directory */
    REC_CREATE = 8,     /* file = the new inode, data = its name after the store's path */
    REC_LINK = 9,       /* file = the inode, data = its new name after the store's path */
    REC_UNLINK = 10,    /* file = the inode, data = the name removed, after the store's path */
    REC_DIR_SYNC = 11,  /* fsync or fdatasync of the store's directory */
    REC_XATTR = 12,     /* an extended attribute of the store set: data = name, NUL, value */
};

#define MAX_FDS 65536
enum { FD_NONE = 0, FD_STORE = 1, FD_MARKS = 2, FD_LOG = 3, FD_DIR = 4 };
static volatile unsigned char fd_kind[MAX_FDS];

static char target[4096];
static char target_dir[4096];
static char log_prefix[4200]; /* TARGET.wal. */
static char marks[4096];
static char log_path[4096];
static int log_fd = -1;
static pid_t log_pid;
static pthread_mutex_t log_mutex = PTHREAD_MUTEX_INITIALIZER;
static unsigned long kill_at;      /* 0: never */
static unsigned long store_writes; /* under the log lock */
static unsigned long kill_before_log_sync; /* 0: never */
static unsigned long log_syncs;            /* under the log lock */

static int (*real_open)(const char *, int, ...);
static int (*real_open64)(const char *, int, ...);
static int (*real_openat)(int, const char *, int, ...);
static int (*real_openat64)(int, const char *, int, ...);
static int (*real_close)(int);
static int (*real_dup)(int);
static int (*real_dup2)(int, int);
static int (*real_dup3)(int, int, int);
static int (*real_fcntl)(int, int, ...);
static int (*real_fcntl64)(int, int, ...);
static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_writev)(int, const struct iovec *, int);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*real_pwrite64)(int, const void *, size_t, off_t);
static ssize_t (*real_pwritev)(int, const struct iovec *, int, off_t);
static ssize_t (*real_pwritev64)(int, const struct iovec *, int, off_t);
static ssize_t (*real_pwritev2)(int, const struct iovec *, int, off_t, int);
static ssize_t (*real_pwritev64v2)(int, const struct iovec *, int, off_t, int);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_sync_file_range)(int, off_t, off_t, unsigned int);
static void (*real_sync)(void);
static int (*real_syncfs)(int);
static int (*real_ftruncate)(int, off_t);
static int (*real_ftruncate64)(int, off_t);
static int (*real_fallocate)(int, int, off_t, off_t);
static int (*real_fallocate64)(int, int, off_t, off_t);
static int (*real_posix_fallocate)(int, off_t, off_t);
static int (*real_posix_fallocate64)(int, off_t, off_t);
static int (*real_link)(const char *, const char *);
static int (*real_linkat)(int, const char *, int, const char *, int);
static int (*real_unlink)(const char *);
static int (*real_unlinkat)(int, const char *, int);
static int (*real_rename)(const char *, const char *);
static int (*real_renameat)(int, const char *, int, const char *);
static int (*real_renameat2)(int, const char *, int, const char *, unsigned int);
static int (*real_setxattr)(const char *, const char *, const void *, size_t, int);
static int (*real_lsetxattr)(const char *, const char *, const void *, size_t, int);
static int (*real_fsetxattr)(int, const char *, const void *, size_t, int);

static void die(const char *what) {
    char msg[512];
    int n = snprintf(msg, sizeof msg, "crash recorder: %s: %s\n", what, strerror(errno));
    if (n > 0 && real_write)
        real_write(2, msg, (size_t)n);
    abort();
}

#define RESOLVE(name) real_##name = dlsym(RTLD_NEXT, #name)

static volatile int resolved;

/* Runs at load, or at the first call if another library's constructor calls in earlier. */
__attribute__((constructor)) static void recorder_init(void) {
    if (resolved)
        return;
    RESOLVE(open); RESOLVE(open64); RESOLVE(openat); RESOLVE(openat64);
    RESOLVE(close);
    RESOLVE(dup); RESOLVE(dup2); RESOLVE(dup3); RESOLVE(fcntl); RESOLVE(fcntl64);
    RESOLVE(write); RESOLVE(writev); RESOLVE(pwrite); RESOLVE(pwrite64);
    RESOLVE(pwritev); RESOLVE(pwritev64); RESOLVE(pwritev2); RESOLVE(pwritev64v2);
    RESOLVE(fsync); RESOLVE(fdatasync); RESOLVE(sync_file_range); RESOLVE(sync); RESOLVE(syncfs);
    RESOLVE(ftruncate); RESOLVE(ftruncate64); RESOLVE(fallocate); RESOLVE(fallocate64);
    RESOLVE(posix_fallocate); RESOLVE(posix_fallocate64);
    RESOLVE(link); RESOLVE(linkat); RESOLVE(unlink); RESOLVE(unlinkat);
    RESOLVE(rename); RESOLVE(renameat); RESOLVE(renameat2);
    RESOLVE(setxattr); RESOLVE(lsetxattr); RESOLVE(fsetxattr);
    const char *t = getenv("FENCELOCK_CRASH_TARGET");
    const char *m = getenv("FENCELOCK_CRASH_MARKS");
    const char *l = getenv("FENCELOCK_CRASH_LOG");
    if (t && m && l) {
        snprintf(target, sizeof target, "%s", t);
        snprintf(log_prefix, sizeof log_prefix, "%s.wal.", t);
        snprintf(target_dir, sizeof target_dir, "%s", t);
        char *slash = strrchr(target_dir, '/');
        if (slash == target_dir)
            slash[1] = 0; /* the root directory */
        else if (slash)
            *slash = 0;
        snprintf(marks, sizeof marks, "%s", m);
        snprintf(log_path, sizeof log_path, "%s", l);
    }
    const char *k = getenv("FENCELOCK_CRASH_KILL_AT");
    kill_at = k ? strtoul(k, NULL, 10) : 0;
    const char *ks = getenv("FENCELOCK_CRASH_KILL_BEFORE_LOG_SYNC");
    kill_before_log_sync = ks ? strtoul(ks, NULL, 10) : 0;
    resolved = 1;
}

#define ENSURE()                                                                                   \
    if (!resolved)                                                                                 \
    recorder_init()

static int active(void) { return target[0] != 0; }

static int kind_of(int fd) {
    ENSURE();
    return fd >= 0 && fd < MAX_FDS ? fd_kind[fd] : FD_NONE;
}

static void set_kind(int fd, int kind) {
    if (fd >= 0 && fd < MAX_FDS)
        fd_kind[fd] = (unsigned char)kind;
}

/* The part of `path` after the store's path when it names a log file (TARGET.wal.*), else
 * NULL. */
static const char *log_name(const char *path) {
    size_t n = strlen(log_prefix);
    return strncmp(path, log_prefix, n) == 0 ? path + strlen(target) : NULL;
}

/* Classifies a descriptor just opened by the path it really names. */
static void classify(int fd) {
    if (fd < 0 || !active())
        return;
    char link[64], name[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, name, sizeof name - 1);
    int kind = FD_NONE;
    if (n > 0) {
        name[n] = 0;
        if (strcmp(name, target) == 0)
            kind = FD_STORE;
        else if (strcmp(name, marks) == 0)
            kind = FD_MARKS;
        else if (log_name(name))
            kind = FD_LOG;
        else if (strcmp(name, target_dir) == 0)
            kind = FD_DIR;
    }
    set_kind(fd, kind);
}

/* The absolute path `path` names, relative to the directory `dir` (AT_FDCWD: the working
 * directory), into `out`; an empty string when it cannot be told. */
static void absolute(int dir, const char *path, char *out, size_t size) {
    out[0] = 0;
    if (path[0] == '/') {
        snprintf(out, size, "%s", path);
        return;
    }
    char base[4096];
    if (dir == AT_FDCWD) {
        if (!getcwd(base, sizeof base))
            return;
    } else {
        char link[64];
        snprintf(link, sizeof link, "/proc/self/fd/%d", dir);
        ssize_t n = readlink(link, base, sizeof base - 1);
        if (n <= 0)
            return;
        base[n] = 0;
    }
    snprintf(out, size, "%s/%s", base, path);
}

/* The file a record is about: 0 for the store, else the log file's inode number. */
static uint64_t file_of(int fd, int kind) {
    if (kind != FD_LOG)
        return 0;
    struct stat st;
    if (fstat(fd, &st) != 0)
        die("fstat of a log file");
    return (uint64_t)st.st_ino;
}

/* Takes the log lock; opens this process's own descriptor of the log first (after a fork the
 * child needs one of its own, since flock belongs to the open file description). */
static void lock_log(void) {
    if (pthread_mutex_lock(&log_mutex) != 0)
        die("mutex");
    if (log_fd < 0 || log_pid != getpid()) {
        int fd = real_open(log_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0)
            die("open log");
        log_fd = fd;
        log_pid = getpid();
    }
    while (flock(log_fd, LOCK_EX) != 0)
        if (errno != EINTR)
            die("flock log");
}

static void unlock_log(void) {
    flock(log_fd, LOCK_UN);
    pthread_mutex_unlock(&log_mutex);
}

static void put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

#define RECORD_HEADER 37

/* Appends one record; the caller holds the log lock. */
static void append(int kind, uint64_t file, uint64_t a, uint64_t b, const struct iovec *iov,
                   int iovcnt, uint64_t len) {
    size_t total = RECORD_HEADER + (size_t)len;
    unsigned char *rec = malloc(total);
    if (!rec)
        die("malloc");
    rec[0] = (unsigned char)kind;
    uint32_t pid = (uint32_t)getpid();
    memcpy(rec + 1, &pid, 4);
    put_u64(rec + 5, file);
    put_u64(rec + 13, a);
    put_u64(rec + 21, b);
    put_u64(rec + 29, len);
    size_t at = RECORD_HEADER;
    for (int i = 0; i < iovcnt && at < total; i++) {
        size_t take = iov[i].iov_len < total - at ? iov[i].iov_len : total - at;
        memcpy(rec + at, iov[i].iov_base, take);
        at += take;
    }
    /* O_APPEND under the lock: finishing a short write interleaves nothing. */
    size_t done = 0;
    while (done < total) {
        ssize_t n = real_write(log_fd, rec + done, total - done);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            die("write log");
        }
        done += (size_t)n;
    }
    free(rec);
}

static void append_plain(int kind, uint64_t file, uint64_t a, uint64_t b) {
    append(kind, file, a, b, NULL, 0, 0);
}

static void append_name(int kind, uint64_t file, const char *name) {
    struct iovec one = {(void *)name, strlen(name)};
    append(kind, file, 0, 0, &one, 1, one.iov_len);
}

/* ---- opens and descriptor bookkeeping ---- */

static int wants_mode(int flags) { return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE; }

/* An open that may create a log file's name is made under the log lock, and the name's creation
 * logged: whether it existed is looked at just before, under the same lock. */
static int open_logged(int dir, const char *path, int flags,
                       int (*call)(int, const char *, int, mode_t), mode_t mode) {
    char full[4200];
    const char *name = NULL;
    if ((flags & O_CREAT) && active()) {
        absolute(dir, path, full, sizeof full);
        name = log_name(full);
    }
    if (!name) {
        int fd = call(dir, path, flags, mode);
        classify(fd);
        return fd;
    }
    lock_log();
    struct stat st;
    int existed = fstatat(dir, path, &st, 0) == 0;
    if (existed && (flags & O_TRUNC))
        die("O_TRUNC of a log file is not modelled");
    int fd = call(dir, path, flags, mode);
    int saved = errno;
    classify(fd);
    if (fd >= 0 && !existed)
        append_name(REC_CREATE, file_of(fd, FD_LOG), name);
    unlock_log();
    errno = saved;
    return fd;
}

static int call_open(int dir, const char *path, int flags, mode_t mode) {
    (void)dir;
    return real_open(path, flags, mode);
}
static int call_open64(int dir, const char *path, int flags, mode_t mode) {
    (void)dir;
    return real_open64(path, flags, mode);
}
static int call_openat(int dir, const char *path, int flags, mode_t mode) {
    return real_openat(dir, path, flags, mode);
}
static int call_openat64(int dir, const char *path, int flags, mode_t mode) {
    return real_openat64(dir, path, flags, mode);
}

#define OPEN_BODY(dir, call)                                                                       \
    ENSURE();                                                                                      \
    mode_t mode = 0;                                                                               \
    if (wants_mode(flags)) {                                                                       \
        va_list ap;                                                                                \
        va_start(ap, flags);                                                                       \
        mode = va_arg(ap, mode_t);                                                                 \
        va_end(ap);                                                                                \
    }                                                                                              \
    return open_logged(dir, path, flags, call, mode);

int open(const char *path, int flags, ...) { OPEN_BODY(AT_FDCWD, call_open) }
int open64(const char *path, int flags, ...) { OPEN_BODY(AT_FDCWD, call_open64) }
int openat(int dir, const char *path, int flags, ...) { OPEN_BODY(dir, call_openat) }
int openat64(int dir, const char *path, int flags, ...) { OPEN_BODY(dir, call_openat64) }
int __open_2(const char *path, int flags) { return open(path, flags); }
int __open64_2(const char *path, int flags) { return open64(path, flags); }
int __openat_2(int dir, const char *path, int flags) { return openat(dir, path, flags); }
int __openat64_2(int dir, const char *path, int flags) { return openat64(dir, path, flags); }

int creat(const char *path, mode_t mode) {
    ENSURE();
    return open(path, O_CREAT | O_WRONLY | O_TRUNC, mode);
}
int creat64(const char *path, mode_t mode) {
    ENSURE();
    return open64(path, O_CREAT | O_WRONLY | O_TRUNC, mode);
}

int close(int fd) {
    ENSURE();
    int rc = real_close(fd);
    set_kind(fd, FD_NONE);
    return rc;
}

int dup(int fd) {
    ENSURE();
    int copy = real_dup(fd);
    if (copy >= 0)
        set_kind(copy, kind_of(fd));
    return copy;
}
int dup2(int fd, int to) {
    ENSURE();
    int copy = real_dup2(fd, to);
    if (copy >= 0)
        set_kind(copy, kind_of(fd));
    return copy;
}
int dup3(int fd, int to, int flags) {
    ENSURE();
    int copy = real_dup3(fd, to, flags);
    if (copy >= 0)
        set_kind(copy, kind_of(fd));
    return copy;
}

#define FCNTL_BODY(real)                                                                           \
    ENSURE();                                                                                      \
    va_list ap;                                                                                    \
    va_start(ap, cmd);                                                                             \
    void *arg = va_arg(ap, void *);                                                                \
    va_end(ap);                                                                                    \
    int rc = real(fd, cmd, arg);                                                                   \
    if (rc >= 0 && (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC))                                    \
        set_kind(rc, kind_of(fd));                                                                 \
    return rc;

int fcntl(int fd, int cmd, ...) { FCNTL_BODY(real_fcntl) }
int fcntl64(int fd, int cmd, ...) { FCNTL_BODY(real_fcntl64) }

/* ---- names: links, unlinks, renames ---- */

/* The inode `path` (relative to `dir`) names, without following a last symlink; 0 if none. */
static uint64_t inode_at(int dir, const char *path) {
    struct stat st;
    return fstatat(dir, path, &st, AT_SYMLINK_NOFOLLOW) == 0 ? (uint64_t)st.st_ino : 0;
}

/* Whether `path` (relative to `dir`) is the store or one of its log files. */
static int ours(int dir, const char *path) {
    char full[4200];
    absolute(dir, path, full, sizeof full);
    return strcmp(full, target) == 0 || log_name(full) != NULL;
}

int linkat(int olddir, const char *old, int newdir, const char *new, int flags) {
    ENSURE();
    char full[4200];
    absolute(newdir, new, full, sizeof full);
    const char *name = active() ? log_name(full) : NULL;
    if (!name) {
        if (active() && ours(olddir, old))
            die("a link of the store or a log file to another name is not modelled");
        return real_linkat(olddir, old, newdir, new, flags);
    }
    char from[4200];
    absolute(olddir, old, from, sizeof from);
    if (!log_name(from))
        die("a link to a log file's name from a file not recorded is not modelled");
    lock_log();
    int rc = real_linkat(olddir, old, newdir, new, flags);
    int saved = errno;
    if (rc == 0)
        append_name(REC_LINK, inode_at(newdir, new), name);
    unlock_log();
    errno = saved;
    return rc;
}
int link(const char *old, const char *new) { return linkat(AT_FDCWD, old, AT_FDCWD, new, 0); }

int unlinkat(int dir, const char *path, int flags) {
    ENSURE();
    char full[4200];
    absolute(dir, path, full, sizeof full);
    const char *name = active() ? log_name(full) : NULL;
    if (!name)
        return real_unlinkat(dir, path, flags);
    lock_log();
    uint64_t inode = inode_at(dir, path);
    int rc = real_unlinkat(dir, path, flags);
    int saved = errno;
    if (rc == 0)
        append_name(REC_UNLINK, inode, name);
    unlock_log();
    errno = saved;
    return rc;
}
int unlink(const char *path) { return unlinkat(AT_FDCWD, path, 0); }

#define RENAME_GUARD(olddir, old, newdir, new)                                                     \
    ENSURE();                                                                                      \
    if (active() && (ours(olddir, old) || ours(newdir, new)))                                      \
        die("a rename of the store or a log file is not modelled");

int renameat2(int olddir, const char *old, int newdir, const char *new, unsigned int flags) {
    RENAME_GUARD(olddir, old, newdir, new)
    return real_renameat2(olddir, old, newdir, new, flags);
}
int renameat(int olddir, const char *old, int newdir, const char *new) {
    RENAME_GUARD(olddir, old, newdir, new)
    return real_renameat(olddir, old, newdir, new);
}
int rename(const char *old, const char *new) {
    RENAME_GUARD(AT_FDCWD, old, AT_FDCWD, new)
    return real_rename(old, new);
}

/* ---- the store's extended attributes ---- */

static void append_xattr(const char *name, const void *value, size_t size) {
    struct iovec parts[2] = {{(void *)name, strlen(name) + 1}, {(void *)value, size}};
    append(REC_XATTR, 0, 0, 0, parts, 2, parts[0].iov_len + size);
}

#define XATTR_BODY(is_store, call)                                                                 \
    ENSURE();                                                                                      \
    if (!active() || !(is_store))                                                                  \
        return call;                                                                               \
    lock_log();                                                                                    \
    int rc = call;                                                                                 \
    int saved = errno;                                                                             \
    if (rc == 0)                                                                                   \
        append_xattr(name, value, size);                                                           \
    unlock_log();                                                                                  \
    errno = saved;                                                                                 \
    return rc;

static int names_store(const char *path) {
    char full[4200];
    absolute(AT_FDCWD, path, full, sizeof full);
    return strcmp(full, target) == 0;
}

int setxattr(const char *path, const char *name, const void *value, size_t size, int flags) {
    XATTR_BODY(names_store(path), real_setxattr(path, name, value, size, flags))
}
int lsetxattr(const char *path, const char *name, const void *value, size_t size, int flags) {
    XATTR_BODY(names_store(path), real_lsetxattr(path, name, value, size, flags))
}
int fsetxattr(int fd, const char *name, const void *value, size_t size, int flags) {
    XATTR_BODY(kind_of(fd) == FD_STORE, real_fsetxattr(fd, name, value, size, flags))
}

/* ---- writes ---- */

/* Where a write without an offset lands: the file's end with O_APPEND, else the file offset. */
static off_t current_offset(int fd) {
    int flags = real_fcntl(fd, F_GETFL);
    if (flags >= 0 && (flags & O_APPEND)) {
        struct stat st;
        return fstat(fd, &st) == 0 ? st.st_size : -1;
    }
    return lseek(fd, 0, SEEK_CUR);
}

/* Whether a descriptor of this kind has its contents recorded. */
static int contents(int kind) { return kind == FD_STORE || kind == FD_LOG; }

/* A positioned write of `iov` at `offset` (or at the file offset when `offset` < 0). */
#define WRITE_BODY(call, iov, iovcnt, offset_expr)                                                 \
    int kind = kind_of(fd);                                                                        \
    if (!(contents(kind) || kind == FD_MARKS) || !active())                                        \
        return call;                                                                               \
    lock_log();                                                                                    \
    off_t at = offset_expr;                                                                        \
    ssize_t n = call;                                                                              \
    int saved = errno;                                                                             \
    int die_now = 0;                                                                               \
    if (n > 0) {                                                                                   \
        if (contents(kind)) {                                                                      \
            append(REC_WRITE, file_of(fd, kind), (uint64_t)at, 0, iov, iovcnt, (uint64_t)n);       \
            die_now = kind == FD_STORE && kill_at != 0 && ++store_writes == kill_at;               \
        } else {                                                                                   \
            append(REC_MARK, 0, 0, 0, iov, iovcnt, (uint64_t)n);                                   \
        }                                                                                          \
    }                                                                                              \
    if (die_now)                                                                                   \
        kill(getpid(), SIGKILL);                                                                   \
    unlock_log();                                                                                  \
    errno = saved;                                                                                 \
    return n;

ssize_t write(int fd, const void *buf, size_t count) {
    struct iovec one = {(void *)buf, count};
    WRITE_BODY(real_write(fd, buf, count), &one, 1, current_offset(fd))
}
ssize_t writev(int fd, const struct iovec *iov, int iovcnt) {
    WRITE_BODY(real_writev(fd, iov, iovcnt), iov, iovcnt, current_offset(fd))
}
ssize_t pwrite(int fd, const void *buf, size_t count, off_t offset) {
    struct iovec one = {(void *)buf, count};
    WRITE_BODY(real_pwrite(fd, buf, count, offset), &one, 1, offset)
}
ssize_t pwrite64(int fd, const void *buf, size_t count, off_t offset) {
    struct iovec one = {(void *)buf, count};
    WRITE_BODY(real_pwrite64(fd, buf, count, offset), &one, 1, offset)
}
ssize_t pwritev(int fd, const struct iovec *iov, int iovcnt, off_t offset) {
    WRITE_BODY(real_pwritev(fd, iov, iovcnt, offset), iov, iovcnt, offset)
}
ssize_t pwritev64(int fd, const struct iovec *iov, int iovcnt, off_t offset) {
    WRITE_BODY(real_pwritev64(fd, iov, iovcnt, offset), iov, iovcnt, offset)
}
/* pwritev2 with offset -1 writes at the file offset. */
ssize_t pwritev2(int fd, const struct iovec *iov, int iovcnt, off_t offset, int flags) {
    WRITE_BODY(real_pwritev2(fd, iov, iovcnt, offset, flags), iov, iovcnt,
               offset == -1 ? current_offset(fd) : offset)
}
ssize_t pwritev64v2(int fd, const struct iovec *iov, int iovcnt, off_t offset, int flags) {
    WRITE_BODY(real_pwritev64v2(fd, iov, iovcnt, offset, flags), iov, iovcnt,
               offset == -1 ? current_offset(fd) : offset)
}

/* ---- syncs, truncation, allocation ---- */

/* A call on a descriptor whose contents are recorded: `record` runs (under the log lock) when it
 * returned 0, with `file` the file it is about. */
#define LOGGED_CALL(call, record)                                                                  \
    int kind = kind_of(fd);                                                                        \
    if (!contents(kind) || !active())                                                              \
        return call;                                                                               \
    lock_log();                                                                                    \
    uint64_t file = file_of(fd, kind);                                                             \
    int rc = call;                                                                                 \
    int saved = errno;                                                                             \
    if (rc == 0)                                                                                   \
        record;                                                                                    \
    unlock_log();                                                                                  \
    errno = saved;                                                                                 \
    return rc;

/* A sync of the directory: the names made and removed before it are durable. */
static int dir_sync(int fd, int (*call)(int)) {
    lock_log();
    int rc = call(fd);
    int saved = errno;
    if (rc == 0)
        append_plain(REC_DIR_SYNC, 0, 0, 0);
    unlock_log();
    errno = saved;
    return rc;
}

/* FENCELOCK_CRASH_KILL_BEFORE_LOG_SYNC: dies, unrecorded, at the entry of its Nth sync of a log
 * file, so that what it wrote there since the last sync is in the page cache only. */
static void die_before_log_sync(int fd) {
    if (kill_before_log_sync == 0 || kind_of(fd) != FD_LOG || !active())
        return;
    lock_log();
    if (++log_syncs == kill_before_log_sync)
        kill(getpid(), SIGKILL);
    unlock_log();
}

int fsync(int fd) {
    if (kind_of(fd) == FD_DIR && active())
        return dir_sync(fd, real_fsync);
    die_before_log_sync(fd);
    LOGGED_CALL(real_fsync(fd), append_plain(REC_SYNC, file, 1, 0))
}
int fdatasync(int fd) {
    if (kind_of(fd) == FD_DIR && active())
        return dir_sync(fd, real_fdatasync);
    die_before_log_sync(fd);
    LOGGED_CALL(real_fdatasync(fd), append_plain(REC_SYNC, file, 0, 0))
}
int sync_file_range(int fd, off_t offset, off_t nbytes, unsigned int flags) {
    LOGGED_CALL(real_sync_file_range(fd, offset, nbytes, flags),
                append_plain(REC_SYNC_RANGE, file, (uint64_t)offset, (uint64_t)nbytes))
}
int ftruncate(int fd, off_t length) {
    LOGGED_CALL(real_ftruncate(fd, length), append_plain(REC_TRUNCATE, file, (uint64_t)length, 0))
}
int ftruncate64(int fd, off_t length) {
    LOGGED_CALL(real_ftruncate64(fd, length),
                append_plain(REC_TRUNCATE, file, (uint64_t)length, 0))
}

static void append_fallocate(uint64_t file, int mode, off_t offset, off_t len) {
    uint32_t m = (uint32_t)mode;
    struct iovec one = {&m, sizeof m};
    append(REC_FALLOCATE, file, (uint64_t)offset, (uint64_t)len, &one, 1, sizeof m);
}
int fallocate(int fd, int mode, off_t offset, off_t len) {
    LOGGED_CALL(real_fallocate(fd, mode, offset, len), append_fallocate(file, mode, offset, len))
}
int fallocate64(int fd, int mode, off_t offset, off_t len) {
    LOGGED_CALL(real_fallocate64(fd, mode, offset, len), append_fallocate(file, mode, offset, len))
}
int posix_fallocate(int fd, off_t offset, off_t len) {
    LOGGED_CALL(real_posix_fallocate(fd, offset, len), append_fallocate(file, 0, offset, len))
}
int posix_fallocate64(int fd, off_t offset, off_t len) {
    LOGGED_CALL(real_posix_fallocate64(fd, offset, len), append_fallocate(file, 0, offset, len))
}

/* sync() and syncfs() flush every file and the directory. */
void sync(void) {
    ENSURE();
    if (!active()) {
        real_sync();
        return;
    }
    lock_log();
    real_sync();
    append_plain(REC_SYNC_ALL, 0, 0, 0);
    unlock_log();
}
int syncfs(int fd) {
    ENSURE();
    if (!active())
        return real_syncfs(fd);
    lock_log();
    int rc = real_syncfs(fd);
    int saved = errno;
    if (rc == 0)
        append_plain(REC_SYNC_ALL, 0, 0, 0);
    unlock_log();
    errno = saved;
    return rc;
}
