/* The floor of a durable fenced write on this disk, and what group commit across processes makes
 * of it: the prototype that docs/design/writes.md measures its design against.
 *
 *   cc -O2 -o group_commit benches/floor/group_commit.c
 *   ./group_commit DIR PROCESSES SECONDS
 *
 * A log file of 64 MiB is preallocated and synced once (so that an overwrite in place is a
 * data-only sync). PROCESSES processes share a mapping of three words and a table of written
 * records. Each process loops: it reserves 128 bytes of log (fetch-and-add on `end`), writes its
 * record there with pwrite, marks it written in the table, and waits until `flushed` passes it.
 * One process at a time is the flusher (a compare-and-swap on `flusher`): it finds how far the
 * log is written without a gap, calls fdatasync, and raises `flushed` to there, covering every
 * process's records, not only its own (PostgreSQL's XLogFlush). Others wait for `flushed` to
 * move, asleep on a futex; one that sees no progress for 2 ms (a flusher stopped or slow) calls
 * fdatasync itself,
 * so that a stopped process delays others by at most that. With PROCESSES = 1 this is one
 * pwrite and one fdatasync per acknowledged write: the floor.
 *
 * Prints acknowledged writes per second, fdatasync calls per write, and the p50 and p99 of one
 * write's latency (from reserving to acknowledging), over all processes. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define LOG_SIZE (64u << 20)
#define RECORD 128
#define MAX_SAMPLES 200000

struct shared {
    _Atomic uint64_t end;
    _Atomic uint64_t flushed;
    _Atomic uint64_t flusher;
    _Atomic uint32_t generation; /* raised, and waiters woken, at each raise of `flushed` */
    _Atomic uint64_t writes;
    _Atomic uint64_t syncs;
};

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

#define SLOTS (LOG_SIZE / RECORD)

/* How far the log is written without a gap, from `from` (a record boundary). */
static uint64_t written_to(struct shared *s, _Atomic uint64_t *table, uint64_t from) {
    uint64_t end = atomic_load(&s->end);
    uint64_t at = from;
    while (at < end && atomic_load(&table[(at / RECORD) % SLOTS]) == at / RECORD + 1) at += RECORD;
    return at;
}

static void raise_flushed(struct shared *s, uint64_t to) {
    uint64_t seen = atomic_load(&s->flushed);
    while (seen < to && !atomic_compare_exchange_weak(&s->flushed, &seen, to)) {}
    atomic_fetch_add(&s->generation, 1);
    syscall(SYS_futex, &s->generation, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

/* Sleeps until the next raise of `flushed`, or 2 ms. */
static void wait_flush(struct shared *s, uint32_t seen) {
    struct timespec limit = {0, 2000000};
    syscall(SYS_futex, &s->generation, FUTEX_WAIT, seen, &limit, NULL, 0);
}

static void run(int fd, struct shared *s, _Atomic uint64_t *table, uint64_t until, uint64_t *lat,
                size_t *n) {
    char record[RECORD];
    memset(record, 'r', sizeof record);
    while (now_ns() < until) {
        uint64_t start = now_ns();
        uint64_t at = atomic_fetch_add(&s->end, RECORD);
        if (pwrite(fd, record, RECORD, (off_t)(at % LOG_SIZE)) != RECORD) { perror("pwrite"); exit(1); }
        atomic_store(&table[(at / RECORD) % SLOTS], at / RECORD + 1);
        uint64_t mine = at + RECORD, since = now_ns();
        while (atomic_load(&s->flushed) < mine) {
            uint32_t gen = atomic_load(&s->generation);
            uint64_t idle = 0;
            int lead = atomic_compare_exchange_strong(&s->flusher, &idle, (uint64_t)getpid());
            if (lead || now_ns() - since > 2000000) {
                uint64_t to = written_to(s, table, atomic_load(&s->flushed));
                if (fdatasync(fd) != 0) { perror("fdatasync"); exit(1); }
                atomic_fetch_add(&s->syncs, 1);
                raise_flushed(s, to);
                if (lead) atomic_store(&s->flusher, 0);
                since = now_ns();
            } else {
                wait_flush(s, gen);
                if (atomic_load(&s->generation) != gen) since = now_ns();
            }
        }
        atomic_fetch_add(&s->writes, 1);
        if (*n < MAX_SAMPLES) lat[(*n)++] = now_ns() - start;
    }
}

int main(int argc, char **argv) {
    if (argc != 4) { fprintf(stderr, "usage: %s DIR PROCESSES SECONDS\n", argv[0]); return 2; }
    int procs = atoi(argv[2]);
    double seconds = atof(argv[3]);
    char path[4096];
    snprintf(path, sizeof path, "%s/group_commit.log", argv[1]);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || posix_fallocate(fd, 0, LOG_SIZE) != 0) { perror(path); return 1; }
    char *zeros = calloc(1, 1 << 20);
    for (uint64_t off = 0; off < LOG_SIZE; off += 1 << 20)
        if (pwrite(fd, zeros, 1 << 20, (off_t)off) != 1 << 20) { perror("pwrite"); return 1; }
    if (fsync(fd) != 0) { perror("fsync"); return 1; }
    struct shared *s = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    _Atomic uint64_t *table = mmap(NULL, SLOTS * sizeof *table, PROT_READ | PROT_WRITE,
                                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    size_t per = MAX_SAMPLES + 1;
    uint64_t *samples = mmap(NULL, (size_t)procs * per * sizeof *samples, PROT_READ | PROT_WRITE,
                             MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (s == MAP_FAILED || table == MAP_FAILED || samples == MAP_FAILED) { perror("mmap"); return 1; }
    uint64_t until = now_ns() + (uint64_t)(seconds * 1e9);
    for (int i = 0; i < procs; i++) {
        if (fork() == 0) {
            size_t n = 0;
            run(fd, s, table, until, samples + (size_t)i * per + 1, &n);
            samples[(size_t)i * per] = n;
            _exit(0);
        }
    }
    while (wait(NULL) > 0) {}
    uint64_t *all = malloc((size_t)procs * MAX_SAMPLES * sizeof *all);
    size_t total = 0;
    for (int i = 0; i < procs; i++) {
        size_t n = samples[(size_t)i * per];
        memcpy(all + total, samples + (size_t)i * per + 1, n * sizeof *all);
        total += n;
    }
    qsort(all, total, sizeof *all, cmp);
    uint64_t writes = atomic_load(&s->writes), syncs = atomic_load(&s->syncs);
    printf("processes %d: %.0f writes/s, %.2f fdatasync per write, p50 %.0f us, p99 %.0f us\n",
           procs, (double)writes / seconds, (double)syncs / (double)writes,
           (double)all[total / 2] / 1e3, (double)all[total * 99 / 100] / 1e3);
    unlink(path);
    return 0;
}
