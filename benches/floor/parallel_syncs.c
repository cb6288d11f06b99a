/* Whether durable writes of several processes go faster on files of their own than on one
 * shared file: the question a striped log (several log files synced side by side) would answer
 * for the redo log of docs/design/writes.md.
 *
 *   cc -O2 -o parallel_syncs benches/floor/parallel_syncs.c
 *   ./parallel_syncs DIR PROCESSES SECONDS MODE
 *
 * MODE is one of:
 *   own       each process writes a file of its own: pwrite of 128 bytes + fdatasync;
 *   shared    every process writes its own 128-byte places of one file, pwrite + fdatasync
 *             (no group commit: each process syncs for itself);
 *   dsync     as `shared`, each write a pwritev2 with RWF_DSYNC.
 * Every file is 16 MiB, preallocated, written with zeros and synced once, so that each sync is
 * a data-only sync of an overwrite in place. Prints durable writes per second over all
 * processes. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define FILE_SIZE (16u << 20)
#define RECORD 128

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what) {
    perror(what);
    exit(1);
}

static void make_file(const char *path) {
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) die("open");
    static char zeros[1 << 20];
    for (uint64_t at = 0; at < FILE_SIZE; at += sizeof zeros)
        if (pwrite(fd, zeros, sizeof zeros, (off_t)at) != (ssize_t)sizeof zeros) die("pwrite");
    if (fsync(fd) != 0) die("fsync");
    close(fd);
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s DIR PROCESSES SECONDS own|shared|dsync\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1];
    int procs = atoi(argv[2]);
    double seconds = atof(argv[3]);
    const char *mode = argv[4];
    int own = strcmp(mode, "own") == 0, dsync = strcmp(mode, "dsync") == 0;
    if (procs < 1 || seconds <= 0 || (!own && !dsync && strcmp(mode, "shared") != 0)) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    uint64_t *counts = mmap(NULL, sizeof(uint64_t) * (size_t)procs, PROT_READ | PROT_WRITE,
                            MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (counts == MAP_FAILED) die("mmap");
    char path[4096];
    for (int i = 0; i < (own ? procs : 1); i++) {
        snprintf(path, sizeof path, "%s/parallel_syncs.%d", dir, i);
        make_file(path);
    }
    double start = now() + 0.2;
    for (int i = 0; i < procs; i++) {
        pid_t pid = fork();
        if (pid < 0) die("fork");
        if (pid > 0) continue;
        snprintf(path, sizeof path, "%s/parallel_syncs.%d", dir, own ? i : 0);
        int fd = open(path, O_RDWR);
        if (fd < 0) die("open");
        char record[RECORD];
        memset(record, 'a' + i % 26, sizeof record);
        /* Own files: rising offsets. One file: this process's places, interleaved. */
        uint64_t first = own ? 0 : (uint64_t)i * RECORD;
        uint64_t step = own ? RECORD : (uint64_t)procs * RECORD;
        uint64_t at = first, done = 0;
        while (now() < start) {
        }
        while (now() < start + seconds) {
            if (dsync) {
                struct iovec iov = {record, RECORD};
                if (pwritev2(fd, &iov, 1, (off_t)at, RWF_DSYNC) != RECORD) die("pwritev2");
            } else {
                if (pwrite(fd, record, RECORD, (off_t)at) != RECORD) die("pwrite");
                if (fdatasync(fd) != 0) die("fdatasync");
            }
            done++;
            at += step;
            if (at + RECORD > FILE_SIZE) at = first;
        }
        counts[i] = done;
        _exit(0);
    }
    for (int i = 0; i < procs; i++) wait(NULL);
    uint64_t total = 0;
    for (int i = 0; i < procs; i++) total += counts[i];
    printf("processes %d, %s: %.0f writes/s\n", procs, mode, (double)total / seconds);
    for (int i = 0; i < (own ? procs : 1); i++) {
        snprintf(path, sizeof path, "%s/parallel_syncs.%d", dir, i);
        unlink(path);
    }
    return 0;
}
